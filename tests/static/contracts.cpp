// Compiling this file is the test: every parallel::Strategy and precision::Precision accel
// defines meets its contract (parallel/contract.hpp, precision/contract.hpp) role by role, and
// so do its trackers (tracking/tracker_contract.hpp), so that the contract is what the library
// itself is held to, not only users' policies and trackers. A policy or tracker added to accel
// belongs here too. Then the Accelerator's narrow surface; at its end, what a training TU does
// not parse in the separately compiled mode.
#include <accel/accelerator.hpp>
#include <accel/parallel/strategies.hpp>
#include <accel/runtime/fallback_transport.hpp>
#include <accel/runtime/fault_transport.hpp>

#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../loss_scaled_fp32.hpp"

namespace {

template <class Par>
inline constexpr bool meets_strategy_contract =
    accel::parallel::StrategyContract<accel::parallel::Strategy<Par>> &&
    accel::parallel::strategy_meets_contract<Par>();

static_assert(meets_strategy_contract<accel::Ddp>);
static_assert(meets_strategy_contract<accel::DdpWith<accel::CompressFp16>>);
static_assert(meets_strategy_contract<accel::DdpWith<accel::CompressBf16>>);
static_assert(meets_strategy_contract<accel::Zero2>);
static_assert(meets_strategy_contract<accel::Zero3>);
static_assert(meets_strategy_contract<accel::Fsdp<accel::NoShard>>);
static_assert(meets_strategy_contract<accel::Fsdp<accel::ShardGradOp>>);
static_assert(meets_strategy_contract<accel::Fsdp<accel::FullShard>>);
static_assert(meets_strategy_contract<accel::Fsdp<accel::HybridShard>>);
template <class Outer>
using TensorParallel2 = accel::Parallel<Outer, accel::TensorParallel<2>>;
static_assert(meets_strategy_contract<TensorParallel2<accel::Ddp>>);
static_assert(meets_strategy_contract<TensorParallel2<accel::Zero2>>);
static_assert(meets_strategy_contract<TensorParallel2<accel::Zero3>>);
static_assert(meets_strategy_contract<TensorParallel2<accel::Fsdp<accel::NoShard>>>);
static_assert(meets_strategy_contract<TensorParallel2<accel::Fsdp<accel::ShardGradOp>>>);
static_assert(meets_strategy_contract<TensorParallel2<accel::Fsdp<accel::FullShard>>>);
// clip_grad_norm finds norm_share by its presence (parallel/detail/clip.hpp): a misspelling
// would count every replicated gradient N times without a word, so its presence is held here.
template <class Outer>
inline constexpr bool has_norm_share =
    requires(const accel::parallel::Strategy<TensorParallel2<Outer>>& s,
             const torch::Tensor& gradient) {
      { s.norm_share(gradient) } -> std::same_as<double>;
    };
static_assert(has_norm_share<accel::Ddp> && has_norm_share<accel::Zero2> &&
              has_norm_share<accel::Zero3> && has_norm_share<accel::Fsdp<accel::FullShard>>);

template <class Prec>
inline constexpr bool meets_precision_contract =
    accel::precision::PrecisionContract<accel::precision::Precision<Prec>> &&
    accel::precision::precision_meets_contract<Prec>();

static_assert(meets_precision_contract<accel::Fp32>);
static_assert(meets_precision_contract<accel::Bf16>);
static_assert(meets_precision_contract<accel::Fp16>);
static_assert(meets_precision_contract<accel::Fp8>);
// The test suite's own policy, written as a user would (tests/loss_scaled_fp32.hpp).
static_assert(meets_precision_contract<accel_test::LossScaledFp32>);

// accel's run-folder writers are trackers like any other; only the JSONL one can take a line back.
static_assert(accel::tracking::TrackerContract<accel::tracking::JsonlWriter> &&
              accel::tracking::tracker_meets_contract<accel::tracking::JsonlWriter>());
static_assert(accel::tracking::TrackerContract<accel::tracking::CsvWriter> &&
              accel::tracking::tracker_meets_contract<accel::tracking::CsvWriter>());
static_assert(accel::tracking::TakesBackLastCall<accel::tracking::JsonlWriter>);
static_assert(!accel::tracking::TakesBackLastCall<accel::tracking::CsvWriter>);

// The contract is about members, not bases: a role's base alone meets only that role.
static_assert(accel::parallel::GradientAccess<accel::parallel::ReplicatedGradients>);
static_assert(!accel::parallel::TrainingStep<accel::parallel::ReplicatedGradients>);
static_assert(!accel::precision::PrecisionSetup<accel::precision::WithoutLossScaling>);

// The Accelerator's surface (docs/reference/accelerator.md): its state is a private base, not a
// public one a caller could convert to and read; the strategy, the precision and the process
// group are reached through accel::testing::internals, and the collectives and checkpoints'
// entry points come from bases of their own.
using Zero3Accelerator = accel::Accelerator<accel::Zero3, accel::Fp16>;
static_assert(!std::is_convertible_v<Zero3Accelerator*, accel::detail::AcceleratorCore*>);
static_assert(!std::is_convertible_v<accel::Accelerator<>*, accel::detail::AcceleratorCore*>);
static_assert(requires(Zero3Accelerator& acc) {
  accel::testing::internals(acc).strategy().unit_count();
  accel::testing::internals(acc).precision().skipped_steps();
  accel::testing::internals(acc).process_group();
  accel::testing::internals(acc).environment();
  accel::testing::internals(acc).tracker();
  { acc.skipped_steps() } -> std::same_as<std::int64_t>;
  acc.run_dir();
});
static_assert(
    std::is_base_of_v<accel::detail::WithCollectives<Zero3Accelerator>, Zero3Accelerator>);
static_assert(std::is_base_of_v<accel::state::WithCheckpoints<Zero3Accelerator>, Zero3Accelerator>);

// What a transport offers the group (runtime/transport.hpp): the test transport is one; the class
// that runs the group's collectives on it, which offers them by the group's signatures, is not.
// The group's own transports are checked where it routes to them (runtime/impl/process_group.ipp).
static_assert(accel::runtime::Transport<accel::testing::FallbackTransport>);
static_assert(!accel::runtime::Transport<accel::testing::Fallbacks>);
// The fault-injecting one wraps any transport and is one itself.
static_assert(accel::runtime::Transport<
              accel::testing::FaultTransport<accel::testing::FallbackTransport>>);
static_assert(!accel::runtime::Transport<accel::testing::Faults>);
// And the started collectives all come back as the one pending type.
static_assert(std::is_same_v<decltype(std::declval<accel::runtime::ProcessGroup&>().allreduce_async(
                                 torch::Tensor())),
                             decltype(std::declval<accel::runtime::ProcessGroup&>()
                                          .reduce_scatter_async(torch::Tensor()))>);

}  // namespace

// In the separately compiled mode, <accel/accelerator.hpp> leaves the transports and c10d's Gloo
// backend and stores to impl/ (runtime/process_group.hpp): parsing them cost every training TU
// about a sixth of its compile above a plain libtorch loop (docs/dev/build-time.md).
// Each class is declared here; had a header defined it, it would be complete.
#if defined(ACCEL_SEPARATE_COMPILATION)
namespace c10d {
class ProcessGroupGloo;
class TCPStore;
class FileStore;
class PrefixStore;
}  // namespace c10d

namespace {
template <class T>
concept defined = requires { sizeof(T); };

static_assert(!defined<accel::runtime::C10dTransport>);
static_assert(!defined<accel::runtime::SharedMemoryPath>);
static_assert(!defined<c10d::ProcessGroupGloo>);
static_assert(!defined<c10d::TCPStore>);
static_assert(!defined<c10d::FileStore>);
static_assert(!defined<c10d::PrefixStore>);
// And the check itself works: a class the headers do define.
static_assert(defined<accel::runtime::ProcessGroup>);
}  // namespace
#endif
