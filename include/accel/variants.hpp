// Several Accelerator aliases in one program, one picked at run time: what a project compiles
// once and runs on clusters that each want another strategy. accel_add_variants() in CMake
// (cmake/accel-variants.cmake) defines ACCEL_VARIANTS as the aliases of a build, so one source
// serves both one executable per variant and one executable carrying several:
//
//   using Variants = accel::Variants<ACCEL_VARIANTS>;
//   int main(int argc, char** argv) {
//     return Variants::run(accel::requested_variant(argc, argv),
//                          []<class Strategy>(std::type_identity<Strategy>) { return train<Strategy>(); });
//   }
//
// A variant is named as in CMake, "Parallelism,Precision,Accumulation": "Ddp,Bf16,4",
// "Fsdp<FullShard>,Fp32,1" (case does not matter). A request for a variant that is not compiled
// in is an accel::Error listing those that are.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/error.hpp"

namespace accel {

namespace detail {

inline std::string lowercase(std::string_view text) {
  std::string lower;
  for (const char c : text)
    if (c != ' ') lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

}  // namespace detail

// "Ddp,Bf16,4" for Accelerator<Ddp, Bf16, GradAccum<4>>.
template <class Strategy>
std::string variant_name() {
  return fmt::format("{},{},{}",
                     Strategy::parallelism_policy::name,
                     Strategy::precision_policy::name, Strategy::accumulation_steps);
}

// The variant a run asks for: `--variant NAME` (or --variant=NAME) among the arguments, else
// ACCEL_VARIANT, else empty (Variants::run then takes the first compiled in).
inline std::string requested_variant(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--variant") {
      if (i + 1 >= argc)
        detail::fail("--variant needs a value, e.g. --variant Ddp,Bf16,4");
      return argv[i + 1];
    }
    if (arg.starts_with("--variant=")) return std::string(arg.substr(10));
  }
  const char* set = std::getenv("ACCEL_VARIANT");
  return set != nullptr ? std::string(set) : std::string();
}

template <class... Strategies>
struct Variants {
  static_assert(sizeof...(Strategies) > 0,
                "accel: Variants<> needs at least one Accelerator alias, e.g. "
                "accel::Variants<accel::Accelerator<accel::Ddp>>");

  // The compiled-in variants' names, in the order given.
  static std::vector<std::string> names() { return {variant_name<Strategies>()...}; }

  // Calls fn(std::type_identity<Strategy>{}) for the variant named `requested` (empty: the first)
  // and returns its result.
  template <class Fn>
  static decltype(auto) run(std::string_view requested, Fn&& fn) {
    using Result = std::invoke_result_t<Fn&, std::type_identity<
                                                 std::tuple_element_t<0, std::tuple<Strategies...>>>>;
    const std::vector<std::string> all = names();
    std::size_t chosen = 0;
    if (!requested.empty()) {
      const std::string wanted = detail::lowercase(requested);
      chosen = all.size();
      for (std::size_t i = 0; i < all.size(); ++i)
        if (detail::lowercase(all[i]) == wanted) chosen = i;
      if (chosen == all.size()) {
        std::string list;
        for (const auto& name : all) list += (list.empty() ? "" : " | ") + name;
        detail::fail("variant '{}' is not compiled into this program; it has {}. Ask for one of "
                     "them (--variant or ACCEL_VARIANT), or add it to the VARIANTS of "
                     "accel_add_variants() and rebuild",
                     requested, list);
      }
    }
    std::size_t index = 0;
    if constexpr (std::is_void_v<Result>) {
      ((index++ == chosen ? fn(std::type_identity<Strategies>{}) : void()), ...);
    } else {
      Result result{};
      ((index++ == chosen ? (void)(result = fn(std::type_identity<Strategies>{})) : void()), ...);
      return result;
    }
  }
};

}  // namespace accel
