// A digest of a module's parameters: FNV-1a over every parameter's name, shape and bytes, in
// registration order. Equal digests mean bitwise-equal parameters; comparing them across ranks
// or runs is cheaper and stricter than comparing losses.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "../detail/separate_compilation.hpp"

namespace accel::state {

ACCEL_DECL std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t hash);

ACCEL_DECL std::uint64_t parameter_digest(const torch::nn::Module& module);

inline std::string parameter_digest_hex(const torch::nn::Module& module) {
  return fmt::format("{:016x}", parameter_digest(module));
}

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/digest.ipp"
#endif
