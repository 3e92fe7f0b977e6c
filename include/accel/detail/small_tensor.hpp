// Small tensors made from values: the flags, lengths and layouts sent through collectives, an
// amax history. Not torch::tensor({...}): its TensorDataContainer (an initializer-list tree with
// a pretty-printer) adds its code to every translation unit that calls it, for what is one fill
// or one copy here (docs/dev/build-time.md).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace accel::detail {

// A 1-D tensor of one element, `value`.
inline torch::Tensor one_value(std::int64_t value, torch::Dtype dtype = torch::kLong) {
  return torch::full({1}, value, torch::TensorOptions().dtype(dtype));
}

// A 1-D tensor holding a copy of `values`, of their dtype.
template <class T>
torch::Tensor values_tensor(const std::vector<T>& values) {
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(values.size())},
                                 torch::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value));
  std::copy(values.begin(), values.end(), t.data_ptr<T>());
  return t;
}

}  // namespace accel::detail
