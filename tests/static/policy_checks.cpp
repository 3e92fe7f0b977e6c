// Compiling this file is the test: concepts and composition rules, positive and negative.
// No torch here: policy headers must stay cheap to include.
#include <accel/policy.hpp>

#include <string_view>
#include <type_traits>

namespace {
using namespace accel;  // NOLINT: a test file, not a header

// Each policy satisfies the concept of its kind and no other.
static_assert(ParallelismPolicy<Ddp> && ParallelismPolicy<Zero2> && ParallelismPolicy<Zero3>);
static_assert(ParallelismPolicy<Fsdp<FullShard>> && ParallelismPolicy<Fsdp<HybridShard>>);
static_assert(PrecisionPolicy<Fp32> && PrecisionPolicy<Fp16> && PrecisionPolicy<Bf16> &&
              PrecisionPolicy<Fp8>);
static_assert(AccumulationPolicy<GradAccum<1>> && AccumulationPolicy<GradAccum<8>>);
static_assert(ShardingPolicy<FullShard> && ShardingPolicy<ShardGradOp> &&
              ShardingPolicy<NoShard> && ShardingPolicy<HybridShard>);

static_assert(!ParallelismPolicy<Bf16> && !ParallelismPolicy<GradAccum<2>>);
static_assert(!ParallelismPolicy<FullShard> && !ParallelismPolicy<int>);
static_assert(!PrecisionPolicy<Ddp> && !PrecisionPolicy<GradAccum<2>> && !PrecisionPolicy<void>);
static_assert(!AccumulationPolicy<Fp32> && !AccumulationPolicy<Zero3>);
static_assert(!ShardingPolicy<Ddp> && !ShardingPolicy<Fp16>);
static_assert(ParallelismPolicy<DdpWith<CompressFp16>> && ParallelismPolicy<DdpWith<CompressBf16>>);
static_assert(CompressionPolicy<CompressFp16> && !CompressionPolicy<Fp16>);
static_assert(!ParallelismPolicy<CompressFp16> && !PrecisionPolicy<CompressBf16>);

struct Impostor {  // has the constants but not the category: not a policy
  static constexpr bool shards_parameters = true;
};
static_assert(!policy::AnyPolicy<Impostor> && !ParallelismPolicy<Impostor>);

// The category but not every member: a policy of no kind (policy/rules.hpp then names the
// member; tests/compile_fail/policy/*_without_*.cpp).
struct NoName {
  using category = policy::parallelism_tag;
};
struct NoCompute {
  using category = policy::precision_tag;
  static constexpr std::string_view name = "NoCompute";
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
};
struct IntCompute {  // compute must be a ComputeType, not a number
  using category = policy::precision_tag;
  static constexpr std::string_view name = "IntCompute";
  static constexpr int compute = 1;
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
};
struct ZeroSteps {
  using category = policy::accumulation_tag;
  static constexpr int steps = 0;
};
struct NoWire {
  using category = policy::compression_tag;
  static constexpr std::string_view name = "NoWire";
};
struct UnnamedCompression {  // DdpWith<C> is named after C: a compression must have a name
  using category = policy::compression_tag;
  static constexpr auto wire = policy::ComputeType::float16;
};
struct UnnamedSharding {
  using category = policy::sharding_tag;
  static constexpr bool shards_optimizer_state = true;
  static constexpr bool shards_gradients = true;
  static constexpr bool shards_parameters = true;
};
static_assert(!CompressionPolicy<UnnamedCompression> && !ShardingPolicy<UnnamedSharding>);
static_assert(policy::AnyPolicy<NoName> && !ParallelismPolicy<NoName>);
static_assert(!PrecisionPolicy<NoCompute> && !PrecisionPolicy<IntCompute>);
static_assert(!AccumulationPolicy<ZeroSteps> && !CompressionPolicy<NoWire>);

// A complete policy of the user's own is one.
struct MyPrecision {
  using category = policy::precision_tag;
  static constexpr std::string_view name = "MyPrecision";
  static constexpr auto compute = policy::ComputeType::bfloat16;
  static constexpr bool autocast = true;
  static constexpr bool loss_scaling = false;
};
static_assert(PrecisionPolicy<MyPrecision>);
static_assert(policy::Checked<Ddp, MyPrecision, GradAccum<2>>::value);
static_assert(std::is_same_v<policy::Checked<Ddp, MyPrecision, GradAccum<2>>::precision, MyPrecision>);

// What each strategy shards, as in the ZeRO paper and PyTorch FSDP.
template <class Par>
using S = policy::sharding_of_t<Par>;
static_assert(!S<Ddp>::shards_gradients && !S<Ddp>::shards_parameters);
static_assert(S<Zero2>::shards_optimizer_state && S<Zero2>::shards_gradients &&
              !S<Zero2>::shards_parameters);
static_assert(S<Zero3>::shards_parameters);
static_assert(S<Fsdp<FullShard>>::shards_parameters && !S<Fsdp<ShardGradOp>>::shards_parameters);
static_assert(!S<Fsdp<NoShard>>::shards_optimizer_state && S<Fsdp<HybridShard>>::hybrid);

// Valid compositions pass every rule and keep their policies.
using Valid = policy::Checked<Zero3, Bf16, GradAccum<4>>;
static_assert(Valid::value);
static_assert(std::is_same_v<Valid::parallelism, Zero3> && std::is_same_v<Valid::precision, Bf16> &&
              std::is_same_v<Valid::accumulation, GradAccum<4>>);
static_assert(policy::Checked<Fsdp<ShardGradOp>, Fp8, GradAccum<1>>::value);
static_assert(policy::Checked<DdpWith<CompressBf16>, Bf16, GradAccum<2>>::value);

// Tensor parallelism: Parallel<P> alone is P; the composition is a parallelism policy of its own
// full name, with the outer policy's sharded state and the degree readable at compile time.
using TensorParallel2 = Parallel<Ddp, TensorParallel<2>>;
static_assert(std::is_same_v<Parallel<Ddp>, Ddp> && std::is_same_v<Parallel<Zero3>, Zero3>);
static_assert(ParallelismPolicy<TensorParallel2> && !ParallelismPolicy<TensorParallel<2>>);
static_assert(TensorParallel2::name == std::string_view("Parallel<Ddp,TensorParallel<2>>"));
static_assert(Parallel<Ddp, TensorParallel<16>>::name ==
              std::string_view("Parallel<Ddp,TensorParallel<16>>"));
static_assert(tensor_parallel_degree_v<TensorParallel2> == 2 && tensor_parallel_degree_v<Ddp> == 0);
// The outer policy's sharding is the composition's, and its name is in the full name.
static_assert(shards_parameters_v<Parallel<Zero3, TensorParallel<2>>> &&
              !shards_parameters_v<Parallel<Zero2, TensorParallel<2>>> &&
              shards_gradients_v<Parallel<Zero2, TensorParallel<2>>>);
static_assert(Parallel<Fsdp<FullShard>, TensorParallel<2>>::name ==
              std::string_view("Parallel<Fsdp<FullShard>,TensorParallel<2>>"));
static_assert(policy::Checked<Parallel<Zero3, TensorParallel<2>>, Fp32, GradAccum<2>>::value);
static_assert(!shards_parameters_v<TensorParallel2> && !shards_gradients_v<TensorParallel2>);
static_assert(policy::Checked<TensorParallel2, Bf16, GradAccum<2>>::value);
static_assert(std::is_same_v<policy::Checked<TensorParallel2, Fp32, GradAccum<1>>::parallelism,
                             TensorParallel2>);
static_assert(GradAccum<4>::steps == 4 && NoAccumulation::steps == 1);

}  // namespace

int main() { return 0; }
