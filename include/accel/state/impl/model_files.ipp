// load_model's dtype check; model_files.hpp includes it in header-only mode.
#pragma once

#include <cstdint>
#include <string_view>

#include "../model_files.hpp"

namespace accel::state::detail {

ACCEL_DECL void check_conversion(const std::string& name, const std::filesystem::path& folder,
                                 const torch::Tensor& t, c10::ScalarType to) {
  const c10::ScalarType from = t.scalar_type();
  if (from == to) return;
  const auto kind = [](c10::ScalarType type) {
    return type == torch::kBool                 ? "bool"
           : c10::isFloatingType(type)          ? "floating-point"
           : c10::isComplexType(type)           ? "complex"
                                                : "integer";
  };
  const std::string_view fix = "pass accel::DtypeConversion::unchecked as load_model's fourth "
                               "argument to convert it as torch's copy_ would";
  if (std::string_view(kind(from)) != kind(to))
    accel::detail::fail("load_model: '{}' in '{}' is {} ({}), the model's is {} ({}): another "
                        "kind of number, most often the wrong file; {}",
                        name, folder.string(), c10::toString(from), kind(from), c10::toString(to),
                        kind(to), fix);
  if (!c10::isFloatingType(from)) return;
  const torch::Tensor finite = torch::isfinite(t);
  const torch::Tensor overflow = finite & ~torch::isfinite(t.to(to));
  if (overflow.any().item<bool>())
    accel::detail::fail("load_model: '{}' in '{}' holds {} finite {} values beyond the range of "
                        "the model's {} (largest magnitude {:g}); they would become infinite; {}",
                        name, folder.string(), overflow.sum().item<std::int64_t>(),
                        c10::toString(from), c10::toString(to),
                        t.masked_select(finite).abs().max().item<double>(), fix);
}

}  // namespace accel::state::detail
