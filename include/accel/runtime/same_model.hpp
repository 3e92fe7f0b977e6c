// Every rank must prepare the same model (checked by prepare(), on every transport). A parameter
// one rank froze or shaped differently would give the ranks different buckets and shards: over
// Gloo the collectives would then run on tensors of different sizes, with no error or a crash.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "collectives.hpp"
#include "process_group.hpp"

namespace accel::runtime {

// Not a namespace `detail`: an accel::runtime::detail would hide accel::detail from the runtime
// headers that follow this one.
namespace model_layout_text {
// One line per parameter and buffer, each ending with '\n': kind, name, dtype, shape, and
// whether it is frozen.
ACCEL_DECL std::string model_layout(const torch::nn::Module& module);

ACCEL_DECL std::vector<std::string> lines_of(const std::string& layout);
}  // namespace model_layout_text

// Refuses, on every rank alike, a model whose layout differs from rank 0's, naming the first
// line that differs. Nothing to check without a group (one process).
ACCEL_DECL void check_same_model_on_every_rank(ProcessGroup* group, const torch::nn::Module& module,
                                               const std::string& label);

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/same_model.ipp"
#endif
