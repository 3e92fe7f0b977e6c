// The mark on an empty build's tensors; unprepared_mark.hpp includes it in header-only mode.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "../error.hpp"
#include "../unprepared_mark.hpp"

namespace accel::detail {

namespace unprepared {

inline constexpr c10::DispatchKey key = c10::DispatchKey::TESTING_ONLY_GenericWrapper;

// UnpreparedAccess scopes alive on this thread.
ACCEL_DECL int& access() {
  static thread_local int depth = 0;
  return depth;
}

ACCEL_DECL void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (access() == 0)
    fail("{} on a tensor of a model built by accel::deferred_init and not prepared yet: its "
         "parameters and buffers are on the meta device and hold no values until prepare(); call "
         "accelerator.prepare(model) before its forward, to() or anything reading them",
         op.schema().name());
  c10::impl::ExcludeDispatchKeyGuard exclude(key);
  op.callBoxed(stack);
}

}  // namespace unprepared

ACCEL_DECL torch::Tensor marked_unprepared(const torch::Tensor& meta) {
  torch::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(meta.storage()), meta.key_set() | c10::DispatchKeySet(unprepared::key),
      meta.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(meta.sizes(), meta.strides());
  tensor.unsafeGetTensorImpl()->set_storage_offset(meta.storage_offset());
  return tensor;
}

ACCEL_DECL void register_unprepared_fallback() {
  static const bool registered = [] {
    static torch::Library library(torch::Library::IMPL, "_", unprepared::key, __FILE__, __LINE__);
    library.fallback(torch::CppFunction::makeFromBoxedFunction<&unprepared::fallback>());
    return true;
  }();
  (void)registered;
}

ACCEL_DECL UnpreparedAccess::UnpreparedAccess() { ++unprepared::access(); }
ACCEL_DECL UnpreparedAccess::~UnpreparedAccess() { --unprepared::access(); }

}  // namespace accel::detail
