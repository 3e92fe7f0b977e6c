// What accelerator.profile() records and where it writes (ProfileOptions), and the per-step
// timeline's knobs (TimelineOptions, Options::timeline). Plain aggregates with no torch, so that
// options.hpp may hold them (docs/how-to/profiling.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace accel::profiling {

/// Which optimizer steps a profile records, as torch.profiler.schedule (and Accelerate's
/// ProfileKwargs.schedule_option): after skip_first steps, cycles of `wait` steps not recorded,
/// `warmup` steps with libtorch's profiler running but nothing kept (its start-up cost stays out
/// of the trace), then `active` steps recorded; the trace file is written at the end of each
/// cycle. repeat: how many cycles (0: as many as the profile lasts).
struct ProfileSchedule {
  /// Steps not recorded, at each cycle's start.
  std::int64_t wait = 0;
  /// Then steps with the profiler running, nothing kept.
  std::int64_t warmup = 0;
  std::int64_t active = 1;  ///< >= 1
  /// Cycles; 0: as many as the profile lasts.
  std::int64_t repeat = 0;
  /// Steps passed over before the first cycle.
  std::int64_t skip_first = 0;
};

/// What accelerator.profile() records and where it writes.
struct ProfileOptions {
  /// Unset: every step from the profile's start to its end is recorded, and written at the end.
  std::optional<ProfileSchedule> schedule = std::nullopt;
  /// Where trace_rank<r>.json goes. Empty: the run folder (init_trackers) when a run is open on
  /// the main process, else ./profile. Made when missing.
  std::filesystem::path output_dir = {};
  /// Also record libtorch's operator events (aten::mm, autograd::engine::evaluate_function: ...)
  /// with its profiler, into the same file; nested under accel's spans on the thread that ran
  /// them. Costs a few microseconds per operator while recording.
  bool torch_ops = false;
};

/// The per-step timeline (Options::timeline): each optimizer step's seconds in data wait,
/// forward, backward compute, communication waited for, optimizer and the rest (idle), on every
/// rank, logged through the trackers of the open run with tokens/s, samples/s and MFU.
struct TimelineOptions {
  /// On: the timeline runs.
  bool enabled = false;
  /// Steps gathered to the main process per collective (one small all-gather per `every` steps);
  /// their rows are logged together. >= 1.
  std::int64_t every = 1;
  /// @{
  /// Samples (sequences, images) and tokens one optimizer step takes over every rank; 0 leaves
  /// samples_per_second / tokens_per_second out.
  double samples_per_step = 0;
  double tokens_per_step = 0;
  /// @}
  /// @{
  /// Model FLOPs of one sample's forward and backward (about 6 x parameters x tokens per sample for
  /// a transformer) and the peak FLOP/s of one device (e.g. 989e12 for an H100's dense bf16): with
  /// both and samples_per_step, MFU = FLOPs per step / step seconds / (peak x processes).
  double flops_per_sample = 0;
  double peak_flops = 0;
  /// @}
};

}  // namespace accel::profiling
