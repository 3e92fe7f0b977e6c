// Options::checkpoints' resume at prepare() and periodic saves, for every Accelerator
// (automatic_checkpoints.hpp says what they do; docs/how-to/fault-tolerance.md); <accel/checkpoints.hpp>
// includes it. Both go through the Accelerator's own save and load (checkpoint_io.hpp).
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "../detail/error.hpp"
#include "../runtime/any_rank.hpp"
#include "automatic_checkpoints.hpp"
#include "checkpoint_folder.hpp"
#include "checkpoint_io.hpp"
#include "folder_lock.hpp"
#include "manifest.hpp"
#include "rank_agreement.hpp"
#include "resume_choice.hpp"

namespace accel::state {

template <class Accel>
struct AutomaticCheckpoints {
  static void after_prepare(Accel& accelerator) {
    const CheckpointOptions& options = accelerator.options_.checkpoints;
    if (!automatic_checkpoints_asked(options)) return;
    if (!accelerator.step_boundary_)
      accelerator.step_boundary_ = [&accelerator] { at_step_boundary(accelerator); };
    if (options.resume && !accelerator.checkpoints_.resume_settled) try_resume(accelerator);
  }

 private:
  using Path = std::filesystem::path;

  // What a checkpoint holds, or what is prepared: the objects a load needs.
  struct Counts {
    std::size_t models = 0, optimizers = 0, schedulers = 0, loaders = 0;
    std::string text() const {
      return fmt::format("{} model(s), {} optimizer(s), {} LR scheduler(s) and {} data loader(s)",
                         models, optimizers, schedulers, loaders);
    }
  };

  // How the global batch is made: loader batches per optimizer step (each of them split over
  // the processes, or one per data-parallel rank: per process, or under tensor parallelism per
  // group of tensor_parallel processes), out of processes and micro-batches.
  struct BatchMaking {
    int world_size = 1, accumulation_steps = 1;
    bool split_batches = false;
    int tensor_parallel = 1;
    int data_ranks() const { return world_size / tensor_parallel; }
    int loader_batches() const { return accumulation_steps * (split_batches ? 1 : data_ranks()); }
    std::string processes() const {
      return tensor_parallel == 1 ? counted(world_size, "process")
                                  : fmt::format("{} ({} data-parallel x tensor-parallel {})",
                                                counted(world_size, "process"), data_ranks(),
                                                tensor_parallel);
    }
    std::string text() const {
      return fmt::format("{} with GradAccum<{}>{} ({} per optimizer step)", processes(),
                         accumulation_steps,
                         split_batches ? ", each batch split over them" : "",
                         counted(loader_batches(), "loader batch"));
    }
    // "1 process", "2 processes", "2 loader batches".
    static std::string counted(int n, std::string_view what) {
      const bool es = what.ends_with("ss") || what.ends_with("ch");
      return fmt::format("{} {}{}", n, what, n == 1 ? "" : es ? "es" : "s");
    }
  };

  // A restart (an automatic resume) continues the same training: on another number of
  // processes, or with another accumulation, the global batch would change, which only the user
  // may decide (Options::checkpoints.allow_global_batch_change). Every rank decides alike, from
  // what the main process read.
  static void check_global_batch(const Accel& a, const BatchMaking& saved,
                                 const std::string& folder) {
    const BatchMaking here{a.process_.world_size, Accel::accumulation_steps,
                           a.options_.split_batches, Accel::ranks_per_batch};
    if (saved.loader_batches() == here.loader_batches() ||
        a.options_.checkpoints.allow_global_batch_change)
      return;
    const int per_step = here.split_batches ? 1 : here.data_ranks();
    const int needed = saved.loader_batches() / per_step;
    const bool integral = needed >= 1 && needed * per_step == saved.loader_batches();
    accel::detail::fail(
        "Options::checkpoints.resume: '{}' was saved by {}; this run has {}, so its global batch "
        "would change. Resume on {} with GradAccum<{}>{}, or set "
        "Options::checkpoints.allow_global_batch_change to go on with the new global batch",
        folder, saved.text(), here.text(), saved.processes(), saved.accumulation_steps,
        integral ? fmt::format(", or keep {} with GradAccum<{}>", here.processes(), needed)
                 : std::string());
  }

  // The newest committed checkpoint of this run (resume_choice.hpp), chosen by the main process
  // and loaded once everything it holds is prepared; none: the run starts afresh.
  static void try_resume(Accel& a) {
    CheckpointRunner& runner = a.checkpoints_;
    runtime::ProcessGroup* group = a.group_.get();
    // "" for none, else "<models> <optimizers> <schedulers> <loaders> <world size>
    // <accumulation> <split batches> <tensor-parallel degree> <folder>"
    std::string chosen;
    const std::string error = detail::error_of([&] {
      if (a.process_.rank != 0) return;
      const Path root = a.options_.checkpoints.directory;
      std::error_code absent;
      if (!std::filesystem::is_directory(root, absent)) return;
      // Resuming from the folder makes it this run's, as load_state() does.
      hold_folder_for_this_run(resolved_folder(root), "Options::checkpoints.resume");
      const auto newest = checkpoint_to_resume(root);
      if (!newest) return;
      const Manifest saved = Manifest::read(*newest, "Options::checkpoints.resume");
      chosen = fmt::format("{} {} {} {} {} {} {} {} {}", saved.models.size(),
                           saved.optimizers.size(), saved.scheduler_steps.size(),
                           saved.loaders.size(), saved.world_size, saved.accumulation_steps,
                           saved.split_batches ? 1 : 0, saved.tensor_parallel, newest->string());
    });
    detail::agree(group, error, "Options::checkpoints.resume: finding the checkpoint");
    chosen = detail::broadcast_string(group, chosen);
    if (chosen.empty()) {
      runner.resume_settled = true;
      return;
    }
    std::istringstream in(chosen);
    Counts saved;
    BatchMaking making;
    in >> saved.models >> saved.optimizers >> saved.schedulers >> saved.loaders >>
        making.world_size >> making.accumulation_steps >> making.split_batches >>
        making.tensor_parallel;
    in.get();
    std::string folder;
    std::getline(in, folder);
    check_global_batch(a, making, folder);
    const Counts here{a.models_.size(), a.optimizers_.size(), a.schedulers_.size(),
                      a.loaders_.size()};
    // A later prepare() call may register the rest.
    if (here.models < saved.models || here.optimizers < saved.optimizers ||
        here.schedulers < saved.schedulers || here.loaders < saved.loaders) {
      runner.resume_waiting =
          fmt::format("'{}' holds {}, and {} are prepared", folder, saved.text(), here.text());
      return;
    }
    runner.resumed_from = a.load_state(Path(folder));
    runner.resume_settled = true;
    runner.resume_waiting.clear();
    runner.last_saved_step = runner.considered_step = a.completed_steps_;
    runner.last_save_time = std::chrono::steady_clock::now();
  }

  // Between two training batches (AcceleratorCore::on_step_boundary): the resume must be
  // settled, and a periodic save that is due is taken.
  static void at_step_boundary(Accel& a) {
    CheckpointRunner& runner = a.checkpoints_;
    const CheckpointOptions& options = a.options_.checkpoints;
    if (options.resume && !runner.resume_settled)
      accel::detail::fail("Options::checkpoints.resume: training began before everything the "
                          "checkpoint to resume from holds was prepared: {}. Prepare them all (in "
                          "one prepare() call or several) before the first batch, or set resume "
                          "to false to start afresh",
                          runner.resume_waiting);
    if (a.gradients_.collecting()) return;
    const std::int64_t steps = a.completed_steps_;
    if (steps == runner.considered_step) return;
    runner.considered_step = steps;
    bool due = options.every_steps > 0 && steps % options.every_steps == 0 &&
               steps != runner.last_saved_step;
    if (options.every_seconds > 0) {
      const std::chrono::duration<double> since =
          std::chrono::steady_clock::now() - runner.last_save_time;
      // The ranks' clocks differ: every rank takes the decision any of them takes.
      due = runtime::any_rank(a.group_.get(), since.count() >= options.every_seconds) || due;
    }
    if (!due) return;
    a.save_state(std::nullopt, options.async ? SaveMode::async : SaveMode::sync);
    runner.last_saved_step = steps;
    runner.last_save_time = std::chrono::steady_clock::now();
  }
};

}  // namespace accel::state

namespace accel {

// The overload prepare() finds where this header is included (automatic_checkpoints.hpp).
template <class Accel>
void after_prepare_checkpoints(Accel& accelerator, state::CheckpointCode) {
  state::AutomaticCheckpoints<Accel>::after_prepare(accelerator);
}

}  // namespace accel
