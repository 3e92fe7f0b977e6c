// Compiling this file is the test: nothing on the training path dispatches virtually, so a
// strategy compiles to direct calls (docs/reference/accelerator.md). A virtual
// function inside a member does not make the class that holds it polymorphic, so checking the
// Accelerator alone proves nothing: every type is listed itself, each parallel::Strategy
// specialization (parallel/strategies.hpp includes them all), the types they hold, and each
// precision guard. A type added to parallel/ belongs here too.
#include <accel/accelerator.hpp>
#include <accel/parallel/strategies.hpp>

#include <type_traits>

namespace {

template <class... Types>
inline constexpr bool none_polymorphic = (!std::is_polymorphic_v<Types> && ...);

namespace parallel = accel::parallel;
namespace precision = accel::precision;

// Every specialization accel defines.
static_assert(none_polymorphic<
              parallel::Strategy<accel::Ddp>, parallel::Strategy<accel::DdpWith<accel::CompressFp16>>,
              parallel::Strategy<accel::DdpWith<accel::CompressBf16>>,
              parallel::Strategy<accel::Zero2>, parallel::Strategy<accel::Zero3>,
              parallel::Strategy<accel::Fsdp<accel::FullShard>>,
              parallel::Strategy<accel::Fsdp<accel::ShardGradOp>>,
              parallel::Strategy<accel::Fsdp<accel::NoShard>>,
              parallel::Strategy<accel::Fsdp<accel::HybridShard>>,
              parallel::Strategy<accel::Parallel<accel::Ddp, accel::TensorParallel<2>>>>);

// What they hold (a base with a virtual would make them polymorphic, a member would not): Ddp's
// reducers and the comm hook each is instantiated with.
static_assert(none_polymorphic<parallel::detail::Reducer<parallel::detail::AllreduceHook>,
                               parallel::detail::Reducer<parallel::detail::CompressHook>,
                               parallel::detail::AllreduceHook, parallel::detail::CompressHook,
                               parallel::detail::BucketCaps>);

// And the parts the sharded strategies are composed of (detail/sharded_strategy.hpp).
static_assert(none_polymorphic<parallel::detail::FlatParameterSet,
                               parallel::detail::ShardOptimizers,
                               parallel::detail::GradientReduceScatter>);

// What a unit marked with accel::Sharded adds to the module (its own forward calls through it).
static_assert(none_polymorphic<parallel::detail::MarkedUnit, parallel::detail::UnitRoute>);

// The precision side: the autocast guard and the hooks (precision/policies.hpp) of every policy,
// and what the hooks are built from.
static_assert(none_polymorphic<precision::Autocast<accel::Fp32>, precision::Autocast<accel::Bf16>,
                               precision::Autocast<accel::Fp16>, precision::Autocast<accel::Fp8>>);
static_assert(none_polymorphic<precision::Precision<accel::Fp32>, precision::Precision<accel::Bf16>,
                               precision::Precision<accel::Fp16>, precision::Precision<accel::Fp8>,
                               precision::WithoutLossScaling, precision::DynamicLossScaling>);

// And the class a training loop holds, for each kind of composition.
static_assert(none_polymorphic<
              accel::Accelerator<>, accel::Accelerator<accel::Ddp, accel::Bf16>,
              accel::Accelerator<accel::DdpWith<accel::CompressFp16>, accel::Fp32, accel::GradAccum<2>>,
              accel::Accelerator<accel::Zero2, accel::Fp16, accel::GradAccum<2>>,
              accel::Accelerator<accel::Zero3, accel::Bf16, accel::GradAccum<4>>,
              accel::Accelerator<accel::Fsdp<accel::FullShard>, accel::Fp8>,
              accel::Accelerator<accel::Fsdp<accel::HybridShard>, accel::Fp32, accel::GradAccum<8>>>);

}  // namespace
