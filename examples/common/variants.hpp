// The strategies compiled into the example programs: every combination of four parallelisms,
// four precisions and the accumulation counts 1 and 2 (32 accel::Accelerator types), or with
// ACCEL_ALL_VARIANTS (CMake's -DACCEL_ALL_VARIANTS=ON) also 4 and 8 (all 64, twice the compile
// time), each named by the flag value that picks it at run time; ACCEL_VARIANTS_LEFT_OUT gives the
// 32 that the default leaves out, for example.all_variants' syntax check. Shared so that the
// examples offer the same choices under the same names, and so that a policy added here reaches
// every example's --help and dispatch.
#pragma once

#include <accel/accelerator.hpp>
#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace examples {

// A policy's name on the command line (--strategy, --precision).
template <class T> struct Named;
template <> struct Named<accel::Ddp> { static constexpr std::string_view flag = "ddp"; };
template <> struct Named<accel::Zero2> { static constexpr std::string_view flag = "zero2"; };
template <> struct Named<accel::Zero3> { static constexpr std::string_view flag = "zero3"; };
template <> struct Named<accel::Fsdp<accel::FullShard>> { static constexpr std::string_view flag = "fsdp"; };
template <> struct Named<accel::Fp32> { static constexpr std::string_view flag = "fp32"; };
template <> struct Named<accel::Bf16> { static constexpr std::string_view flag = "bf16"; };
template <> struct Named<accel::Fp16> { static constexpr std::string_view flag = "fp16"; };
template <> struct Named<accel::Fp8> { static constexpr std::string_view flag = "fp8"; };

using Parallelisms = std::tuple<accel::Ddp, accel::Zero2, accel::Zero3, accel::Fsdp<accel::FullShard>>;
using Precisions = std::tuple<accel::Fp32, accel::Bf16, accel::Fp16, accel::Fp8>;
// The counts only the whole matrix compiles in, which --accum names with the option that adds them.
using LeftOutAccumulations = std::integer_sequence<int, 4, 8>;
#if defined(ACCEL_ALL_VARIANTS)
using Accumulations = std::integer_sequence<int, 1, 2, 4, 8>;
#elif defined(ACCEL_VARIANTS_LEFT_OUT)  // example.all_variants: what the default build leaves out
using Accumulations = LeftOutAccumulations;
#else
using Accumulations = std::integer_sequence<int, 1, 2>;
#endif
template <int... N>
constexpr std::array<int, sizeof...(N)> array_of(std::integer_sequence<int, N...>) {
  return {N...};
}
inline constexpr auto kAllVariantsAccumulations = array_of(LeftOutAccumulations{});

template <class... T>
std::vector<std::string_view> flags_of(std::type_identity<std::tuple<T...>>) {
  return {Named<T>::flag...};
}
template <int... N>
std::vector<int> values_of(std::integer_sequence<int, N...>) {
  return {N...};
}

// What --strategy, --precision and --accum accept, in the lists' order (as --help shows them).
inline std::vector<std::string_view> strategy_flags() {
  return flags_of(std::type_identity<Parallelisms>{});
}
inline std::vector<std::string_view> precision_flags() {
  return flags_of(std::type_identity<Precisions>{});
}
inline std::vector<int> accumulation_values() { return values_of(Accumulations{}); }

// Every combination of the lists above, as one accel::Variants: the dispatch a user's program
// gets from accel_add_variants(), here over the examples' matrix.
template <class Par, class Prec, int... N>
auto with_accumulations(std::integer_sequence<int, N...>)
    -> std::tuple<accel::Accelerator<Par, Prec, accel::GradAccum<N>>...>;
template <class Par, class... Prec>
auto with_precisions(std::tuple<Prec...>)
    -> decltype(std::tuple_cat(with_accumulations<Par, Prec>(Accumulations{})...));
template <class... Par>
auto every_combination(std::tuple<Par...>)
    -> decltype(std::tuple_cat(with_precisions<Par>(Precisions{})...));
template <class... Strategies>
auto as_variants(std::tuple<Strategies...>) -> accel::Variants<Strategies...>;
using Matrix = decltype(as_variants(every_combination(Parallelisms{})));

// The policy a command-line flag names, by its accel name ("fsdp": "Fsdp<FullShard>").
template <class... T>
std::string_view policy_name(std::string_view flag, std::type_identity<std::tuple<T...>>) {
  std::string_view name;
  ((Named<T>::flag == flag ? (void)(name = T::name) : void()), ...);
  return name;
}

// Calls run(std::type_identity<Accelerator<Par, Prec, GradAccum<N>>>{}) for the one combination
// these flag values name. The command line accepts only names and values from the lists above,
// so there is always one (a value from nowhere else would be Variants::run's error).
template <class Fn>
void run_variant(std::string_view strategy, std::string_view precision, int accum, Fn&& run) {
  Matrix::run(fmt::format("{},{},{}", policy_name(strategy, std::type_identity<Parallelisms>{}),
                          policy_name(precision, std::type_identity<Precisions>{}), accum),
              run);
}

}  // namespace examples
