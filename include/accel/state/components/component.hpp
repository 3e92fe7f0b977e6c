// The protocol every piece of a checkpoint implements, and what a piece is handed. A component
// is a struct of four static member templates over the CheckpointView (../checkpoint_view.hpp):
//
//   add_tensors(view, rank, tensors)  save, every rank: what it puts into rank_<rank>.safetensors
//   describe(view, manifest)          save, main process: its part of the Manifest
//                                     (../manifest.hpp, the one type written and read)
//   check(view, manifest, where)      load, before any rank file is read: what the manifest alone
//                                     refuses (most components: nothing)
//   stage(staging)                    load: its part read from the rank files and the manifest,
//                                     checked against the live objects (an `accel:` error naming
//                                     the file or the value otherwise), and the steps that copy
//                                     it in appended to staging.apply: the apply step, run only
//                                     once every rank has staged every component
//
// ../checkpoint_io.hpp runs them, in the order of its component list, and does what is no
// component's: the folder, the pre-hooks, the ranks' agreement, writing, committing. Each piece
// (model_slices.hpp, optimizer_slots.hpp, schedulers.hpp, loader_positions.hpp, rng.hpp,
// window.hpp, precision_and_objects.hpp) has its save and its load side by side. A component has
// every step, empty where it has nothing to do: a forgotten one does not compile.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../../detail/separate_compilation.hpp"
#include "../checkpoint_view.hpp"
#include "../manifest.hpp"
#include "../slice_catalog.hpp"

namespace accel::state::components {

// A rank file's tensors, by name, in the order written.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What one component stages from: the checkpoint read and checked, and where its apply steps go.
template <class View>
struct Staging {
  const View& view;
  const Manifest& manifest;
  const SliceCatalog& catalog;  // every rank file, read whole and checked against the manifest
  const std::string& where;     // the manifest's path, for errors
  const std::filesystem::path& folder;
  int rank;
  ApplySteps& apply;
};

template <class C, class View>
concept CheckpointComponent = requires(const View& view, int rank, NamedTensors& tensors,
                                       Manifest& written, const Manifest& read,
                                       const std::string& where, const Staging<View>& staging) {
  C::add_tensors(view, rank, tensors);
  C::describe(view, written);
  C::check(view, read, where);
  C::stage(staging);
};
template <class List, class View>
inline constexpr bool all_components = false;
template <class... C, class View>
inline constexpr bool all_components<std::tuple<C...>, View> =
    (CheckpointComponent<C, View> && ...);

namespace detail {

// While one lives on a thread, cpu_copy leaves device tensors where they are: a background
// save's snapshot (../host_snapshot.hpp) copies them into its pinned buffers itself, on a copy
// stream, instead of through a blocking copy into new memory.
inline bool& keep_on_device() {
  thread_local bool keep = false;
  return keep;
}
struct KeepOnDevice {
  KeepOnDevice() { keep_on_device() = true; }
  ~KeepOnDevice() { keep_on_device() = false; }
  KeepOnDevice(const KeepOnDevice&) = delete;
  KeepOnDevice& operator=(const KeepOnDevice&) = delete;
};

// A tensor as a rank file keeps it: detached, on the CPU, contiguous.
inline torch::Tensor cpu_copy(const torch::Tensor& t) {
  if (keep_on_device()) return t.detach();
  return t.detach().to(torch::kCPU).contiguous();
}

// Bytes (an archive, a registered object) as a uint8 tensor, and back.
ACCEL_DECL torch::Tensor bytes_tensor(const std::string& bytes);
ACCEL_DECL std::string tensor_bytes(const torch::Tensor& t);

}  // namespace detail

}  // namespace accel::state::components

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/component.ipp"
#endif
