// accel::Checkpointed<Holder>: a module holder whose forward is checkpointed (memory/activation_checkpoint.hpp),
// for declaring a member or a Sequential child so:
//
//   accel::Checkpointed<Block> block{nullptr};
//   block = register_module("block", accel::Checkpointed<Block>(options));
//   x = block->forward(x);            // or block(x), or inside a Sequential
//
// CheckpointedImpl<Impl> derives from the module's own Impl, so it IS that module: the same
// constructors, parameters and names (a checkpoint written with or without it loads into the
// other), the same ->member access and ->as<Impl>(); only forward, with the Impl's exact signature
// (so Sequential and AnyModule accept it), goes through accel::checkpoint. A forward that is
// overloaded or a template has no single signature: use accel::checkpoint inside it instead.
#pragma once

#include <torch/torch.h>

#include <utility>

#include "../detail/dependent_false.hpp"
#include "activation_checkpoint.hpp"

namespace accel::memory {

namespace detail {
// The module's parameter names, for a stale-parameter error to name the one modified.
inline TensorNames parameter_names(const torch::nn::Module& module) {
  TensorNames names;
  for (const auto& item : module.named_parameters()) names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  return names;
}
}  // namespace detail

template <class Impl, class Signature = decltype(&Impl::forward)>
class CheckpointedImpl : public Impl {
  static_assert(accel::detail::dependent_false<Impl>,
                "accel: Checkpointed<Holder>: the module's forward is not one plain member "
                "function (it is overloaded, a template or static), so accel cannot give the "
                "wrapper the same signature; call accel::checkpoint(fn, inputs...) inside its "
                "forward instead");
};

template <class Impl, class R, class C, class... A>
class CheckpointedImpl<Impl, R (C::*)(A...)> : public Impl {
 public:
  using Impl::Impl;
  R forward(A... args) {
    const TensorNames names = detail::parameter_names(*this);
    return memory::detail::checkpoint(
        &names, [this](A... a) -> R { return Impl::forward(std::forward<A>(a)...); },
        std::forward<A>(args)...);
  }
};

template <class Impl, class R, class C, class... A>
class CheckpointedImpl<Impl, R (C::*)(A...) const> : public Impl {
 public:
  using Impl::Impl;
  R forward(A... args) const {
    const TensorNames names = detail::parameter_names(*this);
    return memory::detail::checkpoint(
        &names, [this](A... a) -> R { return Impl::forward(std::forward<A>(a)...); },
        std::forward<A>(args)...);
  }
};

// Checkpointed<torch::nn::Linear>, Checkpointed<Block> (a TORCH_MODULE holder of yours).
template <class Holder>
using Checkpointed = torch::nn::ModuleHolder<CheckpointedImpl<typename Holder::ContainedType>>;

}  // namespace accel::memory

namespace accel {
using memory::Checkpointed;
using memory::CheckpointedImpl;
}  // namespace accel
