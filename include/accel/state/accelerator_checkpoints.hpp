// save_state / load_state / save_model / load_model on the Accelerator, with the registrations a
// checkpoint runs over (docs/how-to/resume.md). The Accelerator inherits them from this base
// (CRTP: each call hands state::CheckpointIO the Accelerator's checkpoint_view() and precision,
// which it lets this base read as a friend), as it does the trackers; the saving and loading
// themselves are state/checkpoint_io.hpp's (<accel/checkpoints.hpp>).
//
//   acc.register_for_checkpointing(my_counter);
//   acc.save_state();                          // every rank: the next checkpoint_<n>
//   acc.load_state();                          // the newest committed one
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <utility>

#include "background_save.hpp"
#include "checkpoint_io_declaration.hpp"
#include "custom_objects.hpp"
#include "dtype_conversion.hpp"

namespace accel::state {

/// The Accelerator's checkpoints' entry points.
template <class Derived>  // the Accelerator, which makes this base a friend
class WithCheckpoints {
 public:
  /// Every rank calls them: under the sharded strategies each rank saves and loads its own
  /// shards, so guarding save_state() with is_main_process() is a bug.
  ///
  /// Saves every prepared model, optimizer and scheduler, the precision state, each rank's RNG
  /// states, every prepared loader's position, the accumulation window (and, mid-window, the
  /// gradients collected so far), completed_steps() and the registered objects into `folder`,
  /// committed atomically (a crash leaves the previous checkpoint whole). Without a folder: the
  /// next checkpoint_<n> under Options::checkpoints.directory, keeping at most total_limit.
  /// SaveMode::async returns once this rank's state is copied into host memory and writes and
  /// commits it in the background (docs/how-to/fault-tolerance.md). Returns the folder written.
  std::filesystem::path save_state(const std::optional<std::filesystem::path>& folder = {},
                                   SaveMode mode = SaveMode::sync) {
    return CheckpointIO<Derived>::save_state(derived().checkpoint_view(), derived().precision_,
                                             folder, mode);
  }
  /// The same, into the next checkpoint_<n>.
  std::filesystem::path save_state(SaveMode mode) { return save_state(std::nullopt, mode); }
  /// Loads what save_state() wrote; every file is read and checked before any object changes, so
  /// on an error the objects are as they were and the message names the file (and tensor).
  /// Without a folder: the newest committed checkpoint under Options::checkpoints.directory.
  /// Returns the folder loaded.
  std::filesystem::path load_state(const std::optional<std::filesystem::path>& folder = {}) {
    return CheckpointIO<Derived>::load_state(derived().checkpoint_view(), derived().precision_,
                                             folder);
  }
  /// Consolidated weights of a prepared model as safetensors (gathered from the shards; the main
  /// process writes), split into files of at most max_shard_bytes with an index, as the
  /// HuggingFace ecosystem lays them out.
  template <class Model>
  void save_model(Model& model, const std::filesystem::path& folder,
                  std::uint64_t max_shard_bytes = 10ULL << 30) {
    CheckpointIO<Derived>::save_model(derived().checkpoint_view(),
                                      static_cast<torch::nn::Module&>(*model), folder,
                                      max_shard_bytes);
  }
  /// Weights from such a folder (or one other tools wrote) into a prepared model. strict: every
  /// parameter and buffer must be there and nothing else (the error lists what is missing and
  /// unexpected); otherwise the names found are loaded and the others left as they are.
  /// `conversion`: what happens to a weight stored in another dtype (state/dtype_conversion.hpp).
  template <class Model>
  void load_model(Model& model, const std::filesystem::path& folder, bool strict = true,
                  DtypeConversion conversion = DtypeConversion::checked) {
    CheckpointIO<Derived>::load_model(derived().checkpoint_view(),
                                      static_cast<torch::nn::Module&>(*model), folder, strict,
                                      conversion);
  }
  /// An object of yours saved with every checkpoint (by the main process) and loaded on every
  /// rank: anything with torch's save(OutputArchive&) / load(InputArchive&), or a trivially
  /// copyable struct. Register in the same order before load_state(); it must outlive this.
  template <Checkpointable T>
  void register_for_checkpointing(T& object) {
    derived().custom_objects_.push_back(custom_object(object));
  }
  /// A function of yours called with the checkpoint folder by save_state(), on every rank, before
  /// any file of the checkpoint is written (fill a registered object with what it should save,
  /// say), as Accelerate's register_save_state_pre_hook. The folder is the one save_state()
  /// returns; accel commits it whole at the end, so keep files of your own elsewhere. Hooks run
  /// in registration order; one that throws stops the save on every rank, before anything is
  /// written.
  void register_save_state_pre_hook(std::function<void(const std::filesystem::path&)> hook) {
    Derived::add_pre_hook(derived().save_state_pre_hooks_, std::move(hook),
                          "register_save_state_pre_hook");
  }
  /// The same for load_state(): called with the folder it is about to read, on every rank,
  /// before any file is read or any object changes.
  void register_load_state_pre_hook(std::function<void(const std::filesystem::path&)> hook) {
    Derived::add_pre_hook(derived().load_state_pre_hooks_, std::move(hook),
                          "register_load_state_pre_hook");
  }
  /// Accumulation windows completed (optimizer steps taken, whether or not the loss scaler
  /// skipped them), restored by load_state(): a resumed loop runs until it reaches its total.
  std::int64_t completed_steps() const { return derived().completed_steps_; }
  /// The checkpoint Options::checkpoints.resume loaded, if it loaded one.
  const std::optional<std::filesystem::path>& resumed_from() const {
    return derived().checkpoints_.resumed_from;
  }

 protected:
  WithCheckpoints() = default;

 private:
  // The up-call is the simplest honest form here: this base is a slice of the Accelerator's
  // public surface and the state it works on lives in the Accelerator; it reads that state
  // (and calls its public members), and nothing it calls comes back into this base.
  Derived& derived() { return static_cast<Derived&>(*this); }
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
};

}  // namespace accel::state
