// Tensor parallelism as a second dimension of the Parallelism slot:
//
//   Accelerator<Parallel<Ddp, TensorParallel<2>>, Fp32, GradAccum<2>>
//
// splits the marked layers (accel::ColumnParallelLinear, accel::RowParallelLinear) across groups
// of N consecutive ranks, and runs the outer policy (Ddp) across those groups. Parallel<X> alone
// is X itself, so that code written for one dimension reads the same with two. The composition is
// checked where the policies meet (rules.hpp): the degree, the dimension, and which outer
// policies work with it so far.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "category.hpp"
#include "parallelism.hpp"

namespace accel {

/// Megatron-style tensor parallelism over groups of N consecutive ranks: the argument of
/// Parallel<P, TensorParallel<N>> (docs/how-to/tensor-parallel.md).
template <int N>
struct TensorParallel {
  static_assert(N >= 1,
                "accel: TensorParallel<N> needs N >= 1 (N is the number of ranks each marked "
                "layer is split across); for no tensor parallelism leave it out: Parallel<Ddp> "
                "or Ddp");
  /// @{
  /// What the composition rules and the strategy read about this dimension.
  using category = policy::tensor_parallel_tag;
  static constexpr int degree = N;
  /// @}
};

namespace policy {

template <class T>
inline constexpr bool is_tensor_parallel = false;
template <int N>
inline constexpr bool is_tensor_parallel<TensorParallel<N>> = true;

// The degree as text, at compile time: the full name below carries it.
template <int N>
struct DegreeText {
  static constexpr auto text = [] {
    std::array<char, 12> digits{};
    std::size_t size = 0;
    long value = N < 0 ? -static_cast<long>(N) : N;
    do {
      digits[size++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value > 0);
    std::array<char, 12> out{};
    std::size_t at = 0;
    if (N < 0) out[at++] = '-';
    while (size > 0) out[at++] = digits[--size];
    return std::pair{out, at};
  }();
  static constexpr std::string_view value{text.first.data(), text.second};
};

// "Parallel<Outer,TensorParallel<N>>": the one full name the composition goes by (checkpoints,
// run.json, errors), without spaces, as the other full names.
template <const std::string_view& Outer, int N>
struct TensorParallelName {
  static constexpr std::string_view head = "Parallel<", middle = ",TensorParallel<", tail = ">>";
  static constexpr auto text = [] {
    constexpr std::string_view degree = DegreeText<N>::value;
    std::array<char, head.size() + Outer.size() + middle.size() + degree.size() + tail.size()>
        joined{};
    std::size_t at = 0;
    for (const std::string_view part : {head, Outer, middle, degree, tail})
      for (const char c : part) joined[at++] = c;
    return joined;
  }();
  static constexpr std::string_view value{text.data(), text.size()};
};

// Parallel<Outer, Dimension> for any Dimension: the rules (rules.hpp) refuse one that is not a
// TensorParallel<N>, and an outer policy tensor parallelism does not work with yet, by name.
template <class Outer, class Dimension>
struct Composed {
  /// @{
  /// What the composition rules and the strategy read about this policy.
  using category = parallelism_tag;
  using outer = Outer;
  using dimension = Dimension;
  static constexpr std::string_view name = name_of<Outer>;
  static constexpr bool shards_optimizer_state = ShardedState<Outer>::optimizer_state;
  static constexpr bool shards_gradients = ShardedState<Outer>::gradients;
  static constexpr bool shards_parameters = ShardedState<Outer>::parameters;
  /// @}
};
template <class Outer, int N>
struct Composed<Outer, TensorParallel<N>> {
  using category = parallelism_tag;
  using outer = Outer;
  using dimension = TensorParallel<N>;
  static constexpr std::string_view name = TensorParallelName<name_of<Outer>, N>::value;
  static constexpr bool shards_optimizer_state = ShardedState<Outer>::optimizer_state;
  static constexpr bool shards_gradients = ShardedState<Outer>::gradients;
  static constexpr bool shards_parameters = ShardedState<Outer>::parameters;
};

template <class Outer, class Dimension>
struct ParallelOf {
  using type = Composed<Outer, Dimension>;
};
template <class Outer>
struct ParallelOf<Outer, void> {
  using type = Outer;
};

// The tensor-parallel degree of a parallelism policy: 0 for one without a tensor dimension.
template <class P>
inline constexpr int tensor_parallel_degree = 0;
template <class Outer, int N>
inline constexpr int tensor_parallel_degree<Composed<Outer, TensorParallel<N>>> = N;

}  // namespace policy

/// A parallelism policy with a second dimension: Parallel<Ddp, TensorParallel<2>>. Parallel<P>
/// alone is P.
template <class Outer, class Dimension = void>
using Parallel = typename policy::ParallelOf<Outer, Dimension>::type;

/// The tensor-parallel degree of a parallelism policy (0 where it has none).
template <class P>
inline constexpr int tensor_parallel_degree_v = policy::tensor_parallel_degree<P>;

}  // namespace accel
