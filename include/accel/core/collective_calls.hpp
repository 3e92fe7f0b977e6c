// wait_for_everyone, the goes-first scopes, the collectives and the trigger on the Accelerator,
// as Accelerate names them. Every rank calls them, in the same order. On one process they return
// their argument (gather: as if gathered from one rank). Tensors may sit in any aggregate
// (data/tensor_tree.hpp). The Accelerator inherits them from this base (CRTP: they run over its
// process group, which it lets this base read as a friend), as it does the trackers.
//
//   const auto losses = acc.gather_for_metrics(loss.detach());
//   if (acc.is_main_process()) save(losses);
//   acc.wait_for_everyone();
#pragma once

#include <cstdint>
#include <vector>

#include "../runtime/any_rank.hpp"
#include "../runtime/collectives.hpp"
#include "../runtime/process_group.hpp"

namespace accel::detail {

/// The Accelerator's collectives (wait_for_everyone, broadcast, reduce, gather, ...).
template <class Derived>  // the Accelerator, which makes this base a friend
class WithCollectives {
 public:
  /// Blocks until every rank gets here.
  void wait_for_everyone() {
    const runtime::ProcessGroup::Caller caller(group(), "wait_for_everyone");
    if (group()) group()->barrier();
  }

  /// RAII: the processes that go first run the scope, the others wait at its start until those
  /// have left it. Each process passes one barrier (at the start or at the end), so every
  /// process must enter the scope.
  class [[nodiscard]] GoesFirst {
   public:
    /// A process with `goes_first` runs the scope first; the others wait here.
    GoesFirst(Derived& accelerator, bool goes_first)
        : accelerator_(accelerator), goes_first_(goes_first) {
      if (!goes_first_) accelerator_.wait_for_everyone();
    }
    ~GoesFirst() noexcept(false) {
      if (goes_first_) accelerator_.wait_for_everyone();
    }
    GoesFirst(const GoesFirst&) = delete;
    GoesFirst& operator=(const GoesFirst&) = delete;

   private:
    Derived& accelerator_;
    bool goes_first_;
  };
  /// Accelerate's name for the scope.
  using MainProcessFirst = GoesFirst;
  /// The main process runs the scope first, the others after it has left it (download or
  /// preprocess once, then read the result everywhere).
  GoesFirst main_process_first() { return GoesFirst(derived(), derived().is_main_process()); }
  /// The same per node: each node's local main process (LOCAL_RANK 0) runs the scope first, then
  /// the node's other processes (prepare a node-local cache once per node). With the job's
  /// barrier, as Accelerate does: the local main processes of all nodes run it at once, and the
  /// others start once all of them have left it.
  GoesFirst local_main_process_first() {
    return GoesFirst(derived(), derived().is_local_main_process());
  }

  /// Every tensor of `value` as rank `root` holds it.
  template <class T>
  T broadcast(const T& value, int root = 0) {
    return runtime::broadcast(group(), value, root);
  }

  /// Every tensor of `value` reduced element-wise over the ranks (sum, mean, max or min).
  template <class T>
  T reduce(const T& value, runtime::ReduceOp op = runtime::ReduceOp::sum) {
    return runtime::reduce(group(), value, op);
  }

  /// Every tensor of `value` concatenated along dimension 0 over the ranks, in rank order. The
  /// first dimension may differ between ranks; 0-dim tensors become one row per rank.
  template <class T>
  T gather(const T& value) {
    return runtime::gather(group(), value);
  }

  /// gather, without the duplicates that even_batches added to the last round of the epoch
  /// (exactly those), so that metrics see every sample once. Under tensor parallelism the
  /// ranks of a tensor-parallel group share one batch, so each group's values come once (its
  /// first rank's), in data-parallel order.
  template <class T>
  T gather_for_metrics(const T& value) {
    const runtime::ProcessGroup::Caller caller(group(), "gather_for_metrics");
    const Derived& self = derived();
    return runtime::gather_first(group(), value,
                                 self.end_of_data_ ? self.real_in_final_round_ : -1,
                                 Derived::ranks_per_batch);
  }

  /// One value per rank, in rank order. T: a trivially copyable type, std::string, or a
  /// std::vector of a trivially copyable type.
  template <class T>
  std::vector<T> gather_object(const T& value) {
    return runtime::gather_object(group(), value);
  }

  /// Pads dimension `dim` of every tensor of `value` to the largest size among the ranks.
  template <class T>
  T pad_across_processes(const T& value, std::int64_t dim = 0, double pad_value = 0.0,
                         bool pad_first = false) {
    return runtime::pad_across_processes(group(), value, dim, pad_value, pad_first);
  }

  /// This rank's contiguous share of `items` (a std::vector or a tensor's first dimension):
  /// shares differ by at most one item, the first ranks taking the extra ones.
  template <class T>
  T split_between_processes(const T& items) {
    return runtime::split_between_processes(group(), items);
  }

  /// A flag any rank may raise (for example on a diverging loss) and every rank then sees at its
  /// next check_trigger(), which lowers it again.
  void set_trigger() { trigger_ = true; }
  /// Whether any rank raised the flag since the last check; every rank calls it.
  bool check_trigger() {
    const bool raised = runtime::any_rank(group(), trigger_);
    if (raised) trigger_ = false;
    return raised;
  }

 protected:
  WithCollectives() = default;

 private:
  // The up-call is the simplest honest form here: this base is a slice of the Accelerator's
  // public surface and the state it works on lives in the Accelerator; it reads that state
  // (and calls its public members), and nothing it calls comes back into this base.
  Derived& derived() { return static_cast<Derived&>(*this); }
  const Derived& derived() const { return static_cast<const Derived&>(*this); }
  // Null on one process.
  runtime::ProcessGroup* group() const { return derived().group_.get(); }

  // The group behind the collectives, for accel's functions that take an Accelerator in its
  // place (memory/executable_batch_size.hpp); found by argument-dependent lookup only.
  friend runtime::ProcessGroup* collective_group(const WithCollectives& self) {
    return self.group();
  }

  bool trigger_ = false;
};

}  // namespace accel::detail
