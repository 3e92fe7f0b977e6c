// An empty build (accel::deferred_init, memory/deferred_init.hpp): the model's constructor runs
// with its tensors on the meta device, so no parameter is allocated, and every operation that
// makes or fills one is recorded; prepare() replays the record later, one tensor at a time, and
// keeps of each value what this rank needs (Zero3's shard, or the whole under other strategies).
//
// Why record and replay rather than construct on meta and re-run reset_parameters(): libtorch's
// C++ modules initialise in their constructors, and models re-initialise their layers after
// building them (GPT's normal_(0, 0.02) pass); only the operations themselves, in their order,
// reproduce the eager values bitwise. The CPU generator's state at the start of the build is
// kept, so the replay draws exactly what the eager constructor drew.
//
// How the constructor is observed: libtorch has no settable default device in 1.13's C++ API, so
// a boxed fallback is registered on a dispatch key that is included only in this thread's scope
// (c10::impl::IncludeDispatchKeyGuard): every operator called in the scope reaches it first.
//   factory (a `device` argument left at the default, no tensor argument): made on meta instead;
//   recorded.
//   in place on a tensor made in the scope (uniform_, normal_, fill_, zero_, copy_, mul_...):
//   recorded, not run (meta tensors have no values).
//   anything else reading such tensors: run on meta; a result that is a new tensor is recorded
//   (torch::randn(...) * 0.02), a view is not (shape arithmetic in the init functions).
//   Refused, naming the operator: writing into a view of a scope tensor (its record would be the
//   base's), and drawing random numbers into a tensor made outside the scope or with an explicit
//   device (it would draw now, out of the eager order).
// The key is TESTING_ONLY_GenericMode: the one mode key meant to be enabled by thread-local
// inclusion with a fallback, in 1.13 and 2.6 alike (c10/core/DispatchKey.h); nothing else in
// libtorch registers on it.
//
// Until prepare(), the tensors the build hands out (the module's parameters and buffers) are
// marked (unprepared_mark.hpp): an operator on them outside the build and prepare() fails with
// an `accel:` line saying to call prepare() first.
//
// The replay runs only what the wanted values need (backwards liveness: an overwrite such as
// uniform_ ends a tensor's dependence on what came before), except that every random operation
// runs, on a throwaway tensor if its result is not needed, so the generator advances as it did in
// the eager build. A tensor is allocated at its last overwrite and released once its last
// operation ran, right after its value is handed over: the replay's peak is the largest few
// tensors alive at once, not the model.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "separate_compilation.hpp"
#include "unprepared_mark.hpp"

namespace accel::detail {

class DeferredBuild {
 public:
  // One recorded operator call.
  struct Entry {
    Entry(c10::OperatorHandle handle, std::vector<c10::IValue> args)
        : op(std::move(handle)), arguments(std::move(args)) {}
    c10::OperatorHandle op;
    std::vector<c10::IValue> arguments;  // tensors made in the scope are their meta tensors
    // Tensors this call made (factories, new results): (position among its returns, id).
    std::vector<std::pair<std::size_t, std::size_t>> outputs;
    std::ptrdiff_t written = -1;         // the tensor an in-place call writes, or -1
    bool overwrites = false;             // it writes every element without reading them
    bool random = false;                 // it draws from a generator
    std::vector<std::size_t> reads;      // tensors made in the scope among its arguments
  };

  DeferredBuild();

  // The made tensor `t` is, or -1.
  std::ptrdiff_t id_of(const torch::Tensor& t) const;
  // Whether `t` shares storage with a tensor made in the scope (a view of one, or one).
  bool aliases_made(const torch::Tensor& t) const;
  // The shape of the made tensor whose storage `t` views (for errors).
  ACCEL_DECL std::vector<std::int64_t> base_shape(const torch::Tensor& t) const;
  std::size_t add_made(const torch::Tensor& meta);
  // Its arguments keep the record's own meta aliases, not the caller's tensors: those become
  // parameters that prepare() adopts real values into before the replay reads the record.
  ACCEL_DECL void add_entry(Entry entry);

  // The CPU generator's state when the build began (uint8 tensor).
  const torch::Tensor& generator_state() const { return generator_state_; }

  // Replays what `targets` (tensors made in the scope) need, drawing from `generator_state`
  // (the program's own generator state is put back afterwards), and calls deliver(k, value)
  // once per target, as soon as targets[k]'s value is final; the value is released after.
  ACCEL_DECL void replay(const std::vector<torch::Tensor>& targets,
                         const std::function<void(std::size_t, const torch::Tensor&)>& deliver,
                         const torch::Tensor& generator_state) const;

  std::size_t entry_count() const { return entries_.size(); }

 private:
  torch::Tensor generator_state_;
  std::vector<Entry> entries_;
  std::vector<torch::Tensor> made_;                          // meta, by id
  std::unordered_map<const void*, std::size_t> id_by_storage_;  // StorageImpl -> id
};

// Records into `build` every operator this thread calls until destroyed.
class DeferredScope {
 public:
  ACCEL_DECL explicit DeferredScope(DeferredBuild& build);
  ACCEL_DECL ~DeferredScope();
  DeferredScope(const DeferredScope&) = delete;
  DeferredScope& operator=(const DeferredScope&) = delete;

 private:
  DeferredBuild* previous_;
  UnpreparedAccess building_;  // the build runs operators on the tensors it marks
  std::unique_ptr<c10::impl::IncludeDispatchKeyGuard> include_;
};

// The builds of models not yet prepared, by the root module deferred_init returned.
ACCEL_DECL void remember_deferred_build(const torch::nn::Module& module,
                                        std::shared_ptr<DeferredBuild> build);
// The module's build, or null when it was built eagerly. Fails for a module with meta tensors
// that no deferred_init made.
ACCEL_DECL std::shared_ptr<DeferredBuild> deferred_build_of(const torch::nn::Module& module);
ACCEL_DECL void forget_deferred_build(const torch::nn::Module& module);

// The meta tensor `target` becomes `value` in place: the same TensorImpl (so the module's
// members, its parameter list and an optimizer built before prepare() keep seeing it) now with
// value's storage, device and strides. set_data() refuses meta -> CPU ("incompatible tensor
// type") though both are plain dense TensorImpls; this is the copy set_data makes after that
// check. Call before any gradient accumulator exists for the tensor.
ACCEL_DECL void adopt_value(const torch::Tensor& target, const torch::Tensor& value);

// The eager path: every parameter and buffer of `module` replayed whole onto `device`, from
// `generator_state`, and the build forgotten.
ACCEL_DECL void materialize_whole(torch::nn::Module& module, const DeferredBuild& build,
                                  const torch::Tensor& generator_state, const torch::Device& device);

}  // namespace accel::detail

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/deferred_build.ipp"
#endif
