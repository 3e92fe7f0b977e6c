// The mark on the tensors an empty build hands out (accel::deferred_init, deferred_build.hpp)
// until prepare(): they hold no values, and an operator on them anywhere else would fail deep
// inside libtorch ("Could not run ... 'Meta' backend") or compute on shapes alone.
//
// The mark is a dispatch key in the tensor's own key set, TESTING_ONLY_GenericWrapper: the
// wrapper-tensor key beside the mode key the build records with, above autograd, and registered
// on by nothing else in libtorch 1.13 and 2.6. Its fallback lets an operator through while an
// UnpreparedAccess lives on the calling thread (the build itself, prepare()) and otherwise fails
// with an `accel:` line naming the operator and saying to call prepare() first. prepare() adopts
// real values into the same TensorImpls (adopt_value), and with them the real tensors' keys: the
// mark goes. Only operators see it: code that reads storage directly (torch::save) does not.
#pragma once

#include <torch/torch.h>

#include "separate_compilation.hpp"

namespace accel::detail {

// The same tensor (storage, geometry, dtype) in a TensorImpl of its own, marked.
ACCEL_DECL torch::Tensor marked_unprepared(const torch::Tensor& meta);

// The mark's fallback, registered once per process (by the first empty build).
ACCEL_DECL void register_unprepared_fallback();

// While one lives, this thread may run operators on marked tensors.
class UnpreparedAccess {
 public:
  ACCEL_DECL UnpreparedAccess();
  ACCEL_DECL ~UnpreparedAccess();
  UnpreparedAccess(const UnpreparedAccess&) = delete;
  UnpreparedAccess& operator=(const UnpreparedAccess&) = delete;
};

}  // namespace accel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/unprepared_mark.ipp"
#endif
