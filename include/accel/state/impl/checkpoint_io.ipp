// Checkpoint I/O: non-template helpers; checkpoint_io.hpp includes it in header-only mode.
#pragma once

#include "../checkpoint_io.hpp"

namespace accel::state::detail {

ACCEL_DECL torch::Tensor bytes_tensor(const std::string& bytes) {
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

ACCEL_DECL std::string tensor_bytes(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

ACCEL_DECL std::vector<torch::Generator> generators() {
  std::vector<torch::Generator> all{at::detail::getDefaultCPUGenerator()};
  if (torch::cuda::is_available())
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i)
      all.push_back(at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, i)));
  return all;
}

ACCEL_DECL void agree(runtime::ProcessGroup* group, const std::string& error, const char* what) {
  std::vector<std::string> errors{error};
  if (group != nullptr) errors = runtime::gather_object(group, error);
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) {
      if (static_cast<int>(r) == (group ? group->rank() : 0)) throw Error(errors[r]);
      throw Error(fmt::format("accel: {}: rank {} failed: {}", what, r, errors[r]));
    }
}

ACCEL_DECL std::string broadcast_string(runtime::ProcessGroup* group, const std::string& value) {
  if (group == nullptr) return value;
  return runtime::gather_object(group, value).front();
}

}  // namespace accel::state::detail
