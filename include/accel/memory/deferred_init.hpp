// accel::deferred_init: build a model without allocating its parameters, so that prepare() under
// Zero3, Fsdp<FullShard> or Fsdp<HybridShard> allocates only each rank's shard, with the values
// an eager build would have had (docs/how-to/large-models.md, "Empty builds"). How it records the
// constructor and replays it: detail/deferred_build.hpp.
//
//   auto model = accel::deferred_init([&] { return Gpt(options); });   // parameters on meta
//   auto prepared = accelerator.prepare(model);                         // this rank's shard only
//
// Until prepare() an operator on the model's tensors (a forward, to()) fails with an accel: line
// saying to prepare first; torch::save, which reads storage without an operator, cannot be
// stopped and writes a file without values (docs/how-to/large-models.md).
//
// Under the other strategies (Ddp, Zero2, one process) prepare() replays the whole model: they
// keep every parameter whole on every rank anyway, so the empty build costs nothing there and
// one program can switch strategies by its alias.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <type_traits>
#include <utility>

#include "../detail/deferred_build.hpp"

namespace accel {

namespace detail {
template <class T>
concept module_handle =
    requires(const T& m) { m.ptr(); } ||  // torch::nn::ModuleHolder
    std::is_convertible_v<T, std::shared_ptr<torch::nn::Module>>;

template <class T>
const torch::nn::Module& module_of(const T& model) {
  if constexpr (requires { model.ptr(); })
    return *model.ptr();
  else
    return *model;
}
}  // namespace detail

// Runs factory() with every tensor it makes at the default device put on the meta device and
// recorded (the CPU generator's state with it); returns what factory returned, a module holder
// (Linear, Gpt) or a std::shared_ptr to a module. Nothing is drawn from the generator.
template <class Factory>
  requires detail::module_handle<std::invoke_result_t<Factory&>>
auto deferred_init(Factory&& factory) {
  auto build = std::make_shared<detail::DeferredBuild>();
  auto model = [&] {
    detail::DeferredScope scope(*build);
    return factory();
  }();
  detail::remember_deferred_build(detail::module_of(model), std::move(build));
  return model;
}

// Whether `module` still holds tensors of an empty build (it has not been prepared).
inline bool is_deferred(const torch::nn::Module& module) {
  return detail::deferred_build_of(module) != nullptr;
}

}  // namespace accel
