// The flat parameters of a sharded strategy (Zero2, Zero3 and their Fsdp names) and the hooks
// that see their gradients arrive: one of the three parts of sharded_strategy.hpp, beside the
// shard optimizers (shard_optimizers.hpp) and the reduce-scatter (gradient_reduce_scatter.hpp).
//
// Kept apart because every other part only reads it: the shard optimizers look their
// parameters up here to find the pieces they step, the reduce-scatter moves the full gradients
// of its flat parameters into their shards, and the strategies walk its flat parameters by
// index. What it owns is fixed at prepare(): which parameters were flattened (and where each
// went), which were frozen then, and the accumulator hooks, which must live as long as the
// flat parameters they report on.
//
//   flatten()      trainable parameters of one group (a bucket for Zero2, a unit for Zero3),
//                  by dtype and device, into flat parameters (../flat_parameter.hpp), cut into
//                  as many shards as the shard group has ranks; the frozen ones recorded.
//   the hooks      one on each flattened parameter's gradient accumulator: the flat parameter
//                  is marked pending (a gradient arrived since its last reduce-scatter) and the
//                  parameter as having produced one in this window, then the strategy is told,
//                  through the function it gave the constructor (a plain function pointer: no
//                  virtual dispatch, and this class stays a non-template, compiled once).
//   had a gradient which parameters any rank has produced a gradient for so far
//                  (agree_on_gradients at each window's end): on one process a parameter that
//                  never had one has an undefined .grad, which torch's optimizers skip, so the
//                  shard optimizers skip its pieces until it has (docs/concepts/strategies.md,
//                  "Parameters without gradients").
//   trainability   freezing or unfreezing a parameter after prepare() is refused
//                  (check_still_trainable), since the other ranks' collectives were laid out
//                  with it.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../detail/separate_compilation.hpp"
#include "../../runtime/process_group.hpp"
#include "../../detail/memory_counter.hpp"
#include "../contract.hpp"
#include "../flat_parameter.hpp"

namespace accel::parallel::detail {

class FlatParameterSet {
 public:
  // Where a flattened parameter went: flat parameter `flat`, its parameter `index`.
  struct Location {
    std::size_t flat = 0;
    std::size_t index = 0;
  };
  // Called on autograd's thread when parameter `index` of flat parameter `flat` has its
  // gradient: the strategy that owns the set (ShardedStrategy) starts its reduce-scatters from
  // there. A typed callable, not a virtual function: the strategies stay free of virtual
  // dispatch (tests/static/no_virtual_dispatch.cpp).
  using GradientArrived = std::function<void(std::size_t flat, std::size_t index)>;

  // name: the policy, as errors call it ("Zero2", "Fsdp<FullShard>").
  FlatParameterSet(std::string_view name, GradientArrived arrived)
      : name_(name), arrived_(std::move(arrived)) {}
  FlatParameterSet(const FlatParameterSet&) = delete;
  FlatParameterSet& operator=(const FlatParameterSet&) = delete;

  // The ranks the shards split across (read when flattening); whether the shards live on the
  // CPU (Options::offload.parameters).
  void cut_across(const runtime::ProcessGroup* shards) { shards_ = shards; }
  void keep_shards_on_host(bool on_host) { shards_on_host_ = on_host; }
  // Where flat parameters of an empty build's (meta) parameters are made.
  void build_on(torch::Device device) { build_device_ = device; }

  // Flattens the trainable parameters among `named` (by dtype and device, in order; a parameter
  // listed twice, or flattened earlier, once) and records the frozen ones. Returns the indices of
  // the flat parameters made.
  ACCEL_DECL std::vector<std::size_t> flatten(
      const std::vector<std::pair<std::string, torch::Tensor>>& named, const std::string& label,
      Residency residency);

  // The flat parameters, in the order they were made.
  const std::vector<std::unique_ptr<FlatParameter>>& all() const { return flats_; }
  std::size_t size() const { return flats_.size(); }
  FlatParameter& operator[](std::size_t f) { return *flats_[f]; }
  const FlatParameter& operator[](std::size_t f) const { return *flats_[f]; }

  bool is_flattened(const torch::Tensor& parameter) const {
    return where_.count(parameter.unsafeGetTensorImpl()) != 0;
  }
  // Where `parameter` was flattened; null if it was not.
  ACCEL_DECL const Location* find(const torch::Tensor& parameter) const;

  // Per flat parameter: gradients arrived since its last reduce-scatter (or, restored from a
  // checkpoint, collected before it). Written by autograd's thread during backward, read after
  // it.
  bool pending(std::size_t f) const { return pending_[f] != 0; }
  void mark_pending(std::size_t f) { pending_[f] = 1; }
  void clear_pending(std::size_t f) { pending_[f] = 0; }

  // At a window's end, on every rank: whether any rank has produced a gradient for parameter i
  // of flat parameter f in this window or an earlier one, as one all-reduce of an integer per
  // parameter, skipped (on every rank alike: the answers are the same everywhere) once every
  // parameter has had one. One process keeps a .grad once a parameter has one (zero_grad zeroes
  // it in place), and steps it from then on; so does a shard optimizer.
  ACCEL_DECL void agree_on_gradients(runtime::ProcessGroup& group);
  bool had_gradient(std::size_t f, std::size_t i) const { return had_gradient_[f][i] != 0; }
  bool all_had_gradients() const { return all_had_gradients_; }

  // The part of a flattened parameter in this rank's shard, where it starts in the parameter.
  ACCEL_DECL std::optional<ParameterSlice> this_ranks_piece(const Location& location) const;
  // That part's gradient, the shard gradient allocated first (zeros where no gradient reached
  // it yet); nothing where this rank's shard holds none of the parameter.
  ACCEL_DECL std::optional<torch::Tensor> piece_gradient(const Location& location) const;

  // Which parameters are sharded was fixed at prepare(), and the other ranks' collectives with
  // it: freezing or unfreezing afterwards is refused.
  ACCEL_DECL void check_still_trainable() const;

  // Each flat parameter's full gradient (undefined where none is held), and how they are put
  // back: copied in and marked pending, so that the window's reduce-scatter sends them.
  ACCEL_DECL std::vector<torch::Tensor> full_gradients() const;
  ACCEL_DECL void restore_full_gradients(const std::vector<torch::Tensor>& gradients);

  // Flat buffers (while they have storage), shards, shard and full gradients.
  ACCEL_DECL void count_memory(state::MemoryCounter& counter) const;

 private:
  struct Frozen {
    torch::Tensor parameter;
    std::string name;
    std::string model;
  };

  // Marks flat parameter f pending and calls arrived_ when autograd has accumulated the
  // gradient of its parameter i.
  ACCEL_DECL void install_hook(const torch::Tensor& parameter, std::size_t f, std::size_t i);

  [[noreturn]] ACCEL_DECL void fail_trainability(const std::string& parameter,
                                                 const std::string& model,
                                                 std::string_view change) const;

  std::string_view name_;
  GradientArrived arrived_;
  const runtime::ProcessGroup* shards_ = nullptr;
  bool shards_on_host_ = false;
  torch::Device build_device_ = torch::kCPU;
  std::vector<std::unique_ptr<FlatParameter>> flats_;
  std::vector<std::string> labels_;  // the model (or unit) of each flat parameter, for errors
  // One byte each, so that autograd threads of different devices never share a word.
  std::vector<char> pending_;
  // Per flat parameter and parameter: a gradient produced on this rank in this window (written
  // by the hooks), and produced on any rank in any window so far (agree_on_gradients).
  std::vector<std::vector<char>> produced_, had_gradient_;
  bool all_had_gradients_ = false;
  std::unordered_map<const void*, Location> where_;  // by TensorImpl
  std::vector<Frozen> frozen_;
  // The tensor holds its accumulator weakly: kept here, or the hook silently never fires.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

}  // namespace accel::parallel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/flat_parameter_set.ipp"
#endif
