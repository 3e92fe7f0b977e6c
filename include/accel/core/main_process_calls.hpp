// on_main_process / on_local_main_process on the Accelerator, Accelerate's decorators of those
// names as calls: a callable runs on one process (of the job, or of each node) only, and its
// result comes back as a std::optional, empty on the processes that did not run it. The
// Accelerator inherits them from this base (CRTP: it reads where the process stands and calls
// wait_for_everyone() on the derived class), as it does the trackers.
//
//   acc.on_main_process([&] { download(dataset); }, accel::OthersWait::yes);  // then all read it
//   std::optional<double> score = acc.on_main_process([&] { return evaluate(model); });
#pragma once

#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

namespace accel {

/// Whether the processes that do not run an on_main_process call wait for it to end.
enum class OthersWait {
  no,   ///< they go on at once (no collective: any process may call alone)
  yes,  ///< every process meets at a barrier after the call, so every process must make it
};

namespace detail {

/// The Accelerator's on_main_process and on_local_main_process.
template <class Derived>  // the Accelerator
class WithMainProcessCalls {
 public:
  /// Runs `f()` on the main process (rank 0) only. Returns its result there and std::nullopt on
  /// the others (nothing for a callable that returns void). With OthersWait::yes every process
  /// then waits at a barrier until the main process has returned from `f`, also when `f`
  /// throws there (the exception then goes on on the main process only).
  template <class F>
  auto on_main_process(F&& f, OthersWait others = OthersWait::no) {
    return run_on(derived().is_main_process(), std::forward<F>(f), others);
  }

  /// The same on each node's local main process (LOCAL_RANK 0); the barrier of OthersWait::yes
  /// is the job's, as local_main_process_first()'s is.
  template <class F>
  auto on_local_main_process(F&& f, OthersWait others = OthersWait::no) {
    return run_on(derived().is_local_main_process(), std::forward<F>(f), others);
  }

 protected:
  WithMainProcessCalls() = default;

 private:
  // The up-call is the simplest honest form here: this base is a slice of the Accelerator's
  // public surface and the state it works on lives in the Accelerator; it reads that state
  // (and calls its public members), and nothing it calls comes back into this base.
  Derived& derived() { return static_cast<Derived&>(*this); }

  template <class F>
  auto run_on(bool runs, F&& f, OthersWait others) {
    using Result = std::invoke_result_t<F&>;
    const bool wait = others == OthersWait::yes;
    if constexpr (std::is_void_v<Result>) {
      if (runs) call_then_wait(f, wait);
      else if (wait) derived().wait_for_everyone();
    } else {
      std::optional<std::remove_cvref_t<Result>> result;
      if (runs) result.emplace(call_then_wait(f, wait));
      else if (wait) derived().wait_for_everyone();
      return result;
    }
  }

  // f()'s result, the barrier passed after it; when f throws, the barrier is passed before the
  // exception goes on, so that the others are not left waiting for a process that never comes.
  template <class F>
  auto call_then_wait(F& f, bool wait) {
    const auto call = [&]() -> std::invoke_result_t<F&> {
      try {
        return std::invoke(f);
      } catch (...) {
        if (wait) derived().wait_for_everyone();
        throw;
      }
    };
    if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
      call();
      if (wait) derived().wait_for_everyone();
    } else {
      auto result = call();
      if (wait) derived().wait_for_everyone();
      return result;
    }
  }
};

}  // namespace detail
}  // namespace accel
