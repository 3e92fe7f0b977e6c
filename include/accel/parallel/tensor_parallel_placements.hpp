// Where each split parameter's slice lies in its full tensor, for checkpoints (placement.hpp):
// Parallel<Outer, TensorParallel<N>> writes and reads every parameter in the full tensors'
// numbering, so that a checkpoint saved on one mesh (data-parallel x tensor-parallel degree)
// loads on another, or on one process. Read from the shapes, before and after the split layers
// are narrowed (tensor_parallel_linear.hpp): a split parameter is narrowed along one dimension
// to 1/N of it, rank i of the group keeping part i (of each of its fused projections, where the
// dimension holds several side by side: FusedOutputs), so its slice is rows of the full tensor
// flattened. Any layer narrowed that way is mapped; one narrowed otherwise stops prepare() with
// an `accel:` error.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/shape_text.hpp"
#include "placement.hpp"
#include "tensor_parallel_linear.hpp"

namespace accel::parallel {

class TensorParallelPlacements {
 public:
  struct Split {
    std::vector<std::int64_t> full_shape;
    int dim = 0;  // the dimension split
    Placement placement;
  };

  // Before the split: every parameter's full shape.
  void note_full_shapes(torch::nn::Module& module) {
    for (const auto& item : module.named_parameters())
      full_.emplace(item.value().unsafeGetTensorImpl(), item.value().sizes().vec());
  }

  // After: each of `split` (the parameters the layers narrowed) placed in its full tensor, as
  // rank `rank` of a group of `degree`. `policy` and `label` name it in errors.
  void note_split(torch::nn::Module& module, const std::vector<SplitParameter>& split, int rank,
                  int degree, std::string_view policy, const std::string& label) {
    for (const auto& item : module.named_parameters()) {
      const torch::Tensor& p = item.value();
      const SplitParameter* as_split = nullptr;
      for (const auto& s : split)
        if (s.tensor.is_same(p)) as_split = &s;
      const auto known = full_.find(p.unsafeGetTensorImpl());
      if (as_split == nullptr || known == full_.end() ||
          splits_.count(p.unsafeGetTensorImpl()) != 0)
        continue;
      splits_.emplace(p.unsafeGetTensorImpl(),
                      place(known->second, p.sizes().vec(), as_split->fused, rank, degree, policy,
                            label + " " + item.key()));
    }
  }

  // The split parameter's full shape and placement; null for one every rank holds whole.
  const Split* find(const torch::Tensor& parameter) const {
    const auto found = splits_.find(parameter.unsafeGetTensorImpl());
    return found == splits_.end() ? nullptr : &found->second;
  }

 private:
  // Part `rank` of `degree` of the full tensor along the one dimension whose size changed: for
  // full shape [outer..., F, inner...] it is `outer` rows of F / degree * inner elements, F *
  // inner apart; with `fused` projections along F, `outer` x `fused` rows of F / (fused x
  // degree) * inner elements, F / fused * inner apart.
  static Split place(const std::vector<std::int64_t>& full, const std::vector<std::int64_t>& local,
                     std::int64_t fused, int rank, int degree, std::string_view policy,
                     const std::string& name) {
    int dim = -1;
    bool mappable = full.size() == local.size();
    for (std::size_t d = 0; mappable && d < full.size(); ++d)
      if (full[d] != local[d]) {
        mappable = dim < 0 && local[d] * degree == full[d];
        dim = static_cast<int>(d);
      }
    if (!mappable || dim < 0)
      accel::detail::fail("{}: parameter '{}' was split from [{}] to [{}], which is not 1/{} of "
                          "one dimension; a checkpoint cannot place it in the full tensor. Split "
                          "layers narrow one dimension evenly (tensor_parallel_linear.hpp)",
                          policy, name, accel::detail::shape_text(full),
                          accel::detail::shape_text(local), degree);
    std::int64_t inner = 1;
    for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < full.size(); ++d) inner *= full[d];
    const std::int64_t width = local[static_cast<std::size_t>(dim)] / fused * inner;
    return {full, dim,
            Placement{width, full[static_cast<std::size_t>(dim)] / fused * inner, rank * width}};
  }

  std::unordered_map<const void*, std::vector<std::int64_t>> full_;
  std::unordered_map<const void*, Split> splits_;
};

}  // namespace accel::parallel
