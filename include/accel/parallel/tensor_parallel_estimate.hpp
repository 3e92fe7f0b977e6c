// What estimate_memory counts under Parallel<Outer, TensorParallel<N>> (memory/estimate_memory.hpp):
// a rank holds 1/N of every ColumnParallelLinear's and RowParallelLinear's split parameters and
// every other parameter whole, and the outer strategy shards (or not) what it holds over the
// data-parallel group. The strategy's memory_layout asks the outer one about the model as one
// rank would hold it: SplitShapes gives each split parameter the shape of its slice for as long
// as it lives, a view of the first 1/N of it along the dimension prepare() splits (nothing is
// copied or allocated, and the values are never read), and gives the full tensor back after,
// also when the outer strategy throws. Cheaper than a copy of the model's slices, and the outer
// strategy's own grouping (Zero2's buckets, Zero3's units) sees the sizes prepare() would give it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "tensor_parallel_linear.hpp"

namespace accel::parallel {

class SplitShapes {
 public:
  // The split layers of `model` not split yet (an unprepared model), narrowed as `degree` ranks
  // would hold them; `policy` names the composition in errors.
  SplitShapes(torch::nn::Module& model, int degree, std::string_view policy) {
    // Every layer checked before any is narrowed: a constructor that throws runs no destructor.
    std::vector<std::pair<torch::Tensor*, std::int64_t>> cuts;  // a parameter, its split dimension
    for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
      const std::string path = item.key().empty() ? std::string("the model") : item.key();
      if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(item.value().get());
          column != nullptr && !column->is_split()) {
        check(column->options.out_features() / column->fused.count, degree, policy,
              "ColumnParallelLinear", path,
              column->fused.count > 1 ? "out_features / FusedOutputs" : "out_features");
        cuts.insert(cuts.end(), {{&column->weight, 0}, {&column->bias, 0}});
      } else if (auto* row = dynamic_cast<RowParallelLinearImpl*>(item.value().get());
                 row != nullptr && !row->is_split()) {
        check(row->options.in_features(), degree, policy, "RowParallelLinear", path,
              "in_features");
        cuts.emplace_back(&row->weight, 1);  // the bias is whole on every rank
      }
    }
    try {
      for (const auto& [parameter, dim] : cuts) narrow(*parameter, dim, degree);
    } catch (...) {
      restore();
      throw;
    }
  }
  ~SplitShapes() { restore(); }
  SplitShapes(const SplitShapes&) = delete;
  SplitShapes& operator=(const SplitShapes&) = delete;

 private:
  // Refused as prepare() would refuse it, before anything is narrowed.
  static void check(std::int64_t features, int degree, std::string_view policy, const char* layer,
                    const std::string& path, const char* which) {
    if (features % degree != 0)
      accel::detail::fail("estimate_memory: {}: {} '{}' has {} {}, which the "
                          "tensor-parallel degree {} does not divide; make {} a multiple of {} "
                          "(prepare() refuses it too)",
                          policy, layer, path, which, features, degree, which, degree);
  }

  void restore() {
    torch::NoGradGuard no_grad;
    for (auto& [parameter, full] : narrowed_) parameter.set_data(full);
    narrowed_.clear();
  }

  void narrow(torch::Tensor& parameter, std::int64_t dim, int degree) {
    if (!parameter.defined()) return;
    torch::NoGradGuard no_grad;
    const torch::Tensor full = parameter.detach();
    narrowed_.emplace_back(parameter, full);
    parameter.set_data(full.narrow(dim, 0, full.size(dim) / degree));
  }

  std::vector<std::pair<torch::Tensor, torch::Tensor>> narrowed_;  // a parameter, its full data
};

}  // namespace accel::parallel
