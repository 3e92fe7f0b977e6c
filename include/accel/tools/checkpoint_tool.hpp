// A checkpoint folder read without the program that wrote it: `accel-launch checkpoint`
// (DeepSpeed's zero_to_fp32.py and Accelerate's merge-weights, in one place). Everything here
// reads the manifest through Manifest::read and the rank files through read_checkpoint_files,
// as load_state does, so a folder that load_state would refuse is refused here with the same
// words. See docs/how-to/resume.md, "Without the training program".
//
//   inspect DIR          what it holds: step, world size, policies, tensors, optimizers, files
//   verify DIR           every checksum, and every parameter and optimizer slot covered exactly
//   merge DIR OUT        the model's consolidated weights, as save_model writes them
//   diff A B             tensor by tensor, bit for bit (NaN equal to NaN at the same place):
//                        the largest absolute and relative difference, the NaN counts
// The command line over them is checkpoint_command.hpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>


namespace accel::state {

// inspect: a description for people (not a format to parse: the manifest is that).
inline std::string describe_checkpoint(const std::filesystem::path& folder);

// verify: every problem found, none when the checkpoint is whole. A manifest that cannot be
// read is one problem; a rank file that fails its size or checksum leaves coverage unchecked.
inline std::vector<std::string> verify_checkpoint(const std::filesystem::path& folder);

struct MergeOptions {
  std::size_t model = 0;                       // which prepared model, in prepare() order
  std::uint64_t max_shard_bytes = 10ULL << 30;  // save_model's default
  bool optimizer = false;                      // also optimizer.safetensors (flat state)
};

// merge: `out` (new, or an empty folder; made, and checked writable, before the checkpoint is
// read) receives the model's weights byte for byte as
// save_model(model, out, max_shard_bytes) writes them from the same state; with `optimizer`,
// also optimizer.safetensors: every optimizer slot's fields whole and flat, named as in the
// checkpoint ("optimizer<o>/<group>/<index>/<field>").
inline void merge_checkpoint(const std::filesystem::path& folder,
                                 const std::filesystem::path& out, const MergeOptions& options);

struct TensorDifference {
  std::string name;
  std::string status;  // "equal", "differs", "only in A", "only in B", "shape", "dtype"
  // Over the elements that differ and are numbers in both (0 when none is).
  double max_abs = 0;
  double max_rel = 0;
  std::int64_t nan_a = 0;  // NaN elements in A's tensor, and in B's
  std::int64_t nan_b = 0;
};

// diff: the model tensors and optimizer state of two checkpoints, name by name (A's order,
// then B's extra names). Elements are compared bit for bit, a NaN equal to a NaN at the same
// place: a checkpoint is equal to itself whatever it holds, and -0 differs from +0.
inline std::vector<TensorDifference> diff_checkpoints(const std::filesystem::path& a,
                                                          const std::filesystem::path& b);

}  // namespace accel::state

// Header-only in both modes: the tools compile it themselves (accel::compiled has no tools).
#include "impl/checkpoint_tool.ipp"
#include "impl/checkpoint_merge_diff.ipp"
