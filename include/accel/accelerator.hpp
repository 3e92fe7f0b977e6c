// accel::Accelerator<Par, Prec, Acc>: the one class a training loop talks to.
//
//   using Strategy = accel::Accelerator<accel::Ddp, accel::Bf16, accel::GradAccum<4>>;
//   Strategy acc;
//   auto [model, optimizer, loader] = acc.prepare(net, adam, train_loader);
//   for (const auto& batch : loader) {
//     auto loss = torch::nll_loss(model(batch.image), batch.label);
//     acc.backward(loss);
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// The policies are checked once, here (policy/rules.hpp); the class then compiles to one path
// for that composition, with no virtual dispatch.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "data/loader.hpp"
#include "data/tensor_tree.hpp"
#include "detail/error.hpp"
#include "detail/gradient_state.hpp"
#include "options.hpp"
#include "parallel/local.hpp"
#include "policy.hpp"
#include "precision/autocast.hpp"
#include "prepared.hpp"
#include "runtime/process.hpp"
#include "state/digest.hpp"
#include "version.hpp"

namespace accel {

namespace detail {

template <class T>
concept ModuleHandle = requires(const T& handle) {
  { handle.ptr() } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>;
} || requires(const T& handle) {
  requires std::same_as<T, std::shared_ptr<typename T::element_type>>;
  requires std::derived_from<typename T::element_type, torch::nn::Module>;
};

template <class T>
concept LrScheduler = std::derived_from<T, torch::optim::LRScheduler>;

template <class T>
inline constexpr bool is_data_loader = false;
template <class D, class C>
inline constexpr bool is_data_loader<DataLoader<D, C>> = true;

template <class T>
inline constexpr bool is_prepared = false;
template <class A, class T>
inline constexpr bool is_prepared<PreparedModel<A, T>> = true;
template <class A, class T>
inline constexpr bool is_prepared<PreparedOptimizer<A, T>> = true;
template <class A, class T>
inline constexpr bool is_prepared<PreparedScheduler<A, T>> = true;
template <class A, class T>
inline constexpr bool is_prepared<PreparedLoader<A, T>> = true;

inline std::shared_ptr<torch::nn::Module> module_pointer(const auto& handle) {
  if constexpr (requires { handle.ptr(); })
    return handle.ptr();
  else
    return handle;
}

}  // namespace detail

template <class Par = Ddp, class Prec = Fp32, class Acc = GradAccum<1>>
class Accelerator {
  using checked = policy::Checked<Par, Prec, Acc>;

 public:
  using parallelism_policy = typename checked::parallelism;
  using precision_policy = typename checked::precision;
  using accumulation_policy = typename checked::accumulation;
  static constexpr int accumulation_steps = accumulation_policy::steps;

  explicit Accelerator(Options options = {})
      : options_(std::move(options)),
        process_(runtime::process_info_from_environment()),
        device_(options_.device.value_or(default_device(process_.local_rank))),
        gradients_(accumulation_steps) {
    if constexpr (precision_policy::compute == policy::ComputeType::float16 ||
                  precision_policy::compute == policy::ComputeType::float8)
      detail::fail("{} training is not available in this version of accel; use Fp32 or Bf16",
                   precision_policy::name);
    if (options_.seed) set_seed(*options_.seed);
  }

  // Prepared objects point back here: an Accelerator stays where it was made.
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // --- Where this process stands -----------------------------------------------------------------
  const torch::Device& device() const { return device_; }
  int process_index() const { return process_.rank; }
  int num_processes() const { return process_.world_size; }
  int local_process_index() const { return process_.local_rank; }
  bool is_main_process() const { return process_.rank == 0; }
  bool is_local_main_process() const { return process_.local_rank == 0; }
  const Options& options() const { return options_; }

  // --- prepare -----------------------------------------------------------------------------------
  // Takes modules (holders or shared_ptrs), optimizers, LR schedulers and DataLoaders, in any
  // order, and returns their prepared handles in the order given: one object, or a tuple for
  // structured bindings. Preparing an object twice returns an equivalent handle.
  template <class... Objects>
  auto prepare(Objects&&... objects) {
    static_assert(sizeof...(Objects) > 0, "accel: prepare() needs at least one object");
    if constexpr (sizeof...(Objects) == 1)
      return prepare_one(std::forward<Objects>(objects)...);
    else
      return std::tuple{prepare_one(std::forward<Objects>(objects))...};
  }

  // --- The training step -------------------------------------------------------------------------
  // Backpropagates loss scaled for accumulation (1/N, or 1/k in a last window of k < N batches).
  void backward(const torch::Tensor& loss) {
    gradients_.on_backward();
    const bool sync = gradients_.sync_gradients();
    strategy_.before_backward(sync);
    if (gradients_.window_length() == 1)
      loss.backward();
    else
      (loss * gradients_.loss_scale()).backward();
    strategy_.after_backward(sync);
    accumulating_ = !sync;
  }

  // True on the micro-step that ends an accumulation window (every step without accumulation).
  bool sync_gradients() const { return gradients_.sync_gradients(); }
  // True while the batch in hand is the last of its epoch.
  bool end_of_data() const { return gradients_.end_of_data(); }
  const detail::GradientState& gradient_state() const { return gradients_; }

  // Clips the gradients of every prepared model so that their global norm is at most max_norm,
  // and returns the norm before clipping. Mid-window it only measures: the gradients are not
  // complete yet.
  double clip_grad_norm(double max_norm, double norm_type = 2.0) {
    return clip_grad_norm(prepared_parameters(), max_norm, norm_type);
  }
  double clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm,
                        double norm_type = 2.0) {
    if (!(max_norm > 0.0)) detail::fail("clip_grad_norm: max_norm is {}; it must be > 0", max_norm);
    if (!(norm_type > 0.0))
      detail::fail("clip_grad_norm: norm_type is {}; it must be > 0 (or infinity)", norm_type);
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters)
      if (p.grad().defined()) grads.push_back(p.grad());
    if (grads.empty()) return 0.0;

    const bool is_max = std::isinf(norm_type);
    std::vector<torch::Tensor> parts;
    parts.reserve(grads.size());
    for (const auto& g : grads)
      parts.push_back(is_max ? g.abs().max().to(torch::kDouble)
                             : g.to(torch::kDouble).abs().pow(norm_type).sum());
    torch::Tensor local = is_max ? torch::stack(parts).max() : torch::stack(parts).sum();
    torch::Tensor reduced = strategy_.reduce_norm(local, is_max);
    const double total = is_max ? reduced.item<double>()
                                : std::pow(reduced.item<double>(), 1.0 / norm_type);
    if (sync_gradients()) {
      const double coefficient = max_norm / (total + 1e-6);
      if (coefficient < 1.0) {
        torch::NoGradGuard no_grad;
        for (auto& g : grads) g.mul_(coefficient);
      }
    }
    return total;
  }

  // --- Utilities ---------------------------------------------------------------------------------
  // Seeds every torch generator (CPU and CUDA) of this process.
  void set_seed(std::uint64_t seed) { torch::manual_seed(seed); }

  // fmt-formatted line on the main process only.
  template <class... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    if (is_main_process()) fmt::print("{}\n", fmt::format(format, std::forward<Args>(args)...));
  }

  // The precision policy's autocast, for code outside a prepared model's forward.
  precision::Autocast<precision_policy> autocast() const {
    return precision::Autocast<precision_policy>(device_);
  }

  // Any aggregate of tensors, on this Accelerator's device.
  template <class T>
  T to_device(const T& value) const {
    return data::to_device(value, device_, options_.non_blocking);
  }

  // --- Called by the prepared handles ------------------------------------------------------------
  template <class Holder, class... Args>
  auto forward(Holder& module, Args&&... args) {
    precision::Autocast<precision_policy> guard(device_);
    return precision::outputs_to_fp32<precision_policy>(
        module->forward(std::forward<Args>(args)...));
  }

  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    if (sync_gradients()) strategy_.optimizer_step(optimizer);
  }

  // Zeroes gradients in place unless a window is still collecting them. In place rather than
  // set to none: the next backward accumulates into the same storage instead of allocating
  // (measured: 7% of a step on the mlp benchmark on CPU), and gradients that are views of
  // communication buckets stay views.
  template <class Optimizer>
  void optimizer_zero_grad(Optimizer& optimizer) {
    if (accumulating_) return;
    torch::NoGradGuard no_grad;
    for (auto& group : optimizer.param_groups())
      for (auto& p : group.params())
        if (p.grad().defined()) p.mutable_grad().zero_();
  }

  // A loader yielded batch `index` of `count`. Evaluation loops run under torch::NoGradGuard
  // and do not count as micro-steps.
  template <class Batch>
  Batch on_batch(const Batch& batch, std::int64_t index, std::int64_t count) {
    if (torch::GradMode::is_enabled()) gradients_.begin_micro_step(count - index, index == 0);
    return to_device(batch);
  }

 private:
  static torch::Device default_device(int local_rank) {
    if (torch::cuda::is_available())
      return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
    return torch::Device(torch::kCPU);
  }

  template <class T>
  auto prepare_one(T&& object) {
    using Object = std::remove_cvref_t<T>;
    if constexpr (detail::is_prepared<Object>) {
      return Object(object);
    } else if constexpr (detail::ModuleHandle<Object>) {
      register_model(detail::module_pointer(object));
      return PreparedModel<Accelerator, Object>(this, object);
    } else if constexpr (std::derived_from<Object, torch::optim::Optimizer>) {
      static_assert(std::is_lvalue_reference_v<T>,
                    "accel: prepare() keeps a pointer to the optimizer; pass a named optimizer "
                    "that outlives the Accelerator, not a temporary");
      return PreparedOptimizer<Accelerator, Object>(this, &object);
    } else if constexpr (detail::LrScheduler<Object>) {
      static_assert(std::is_lvalue_reference_v<T>,
                    "accel: prepare() keeps a pointer to the scheduler; pass a named scheduler "
                    "that outlives the Accelerator, not a temporary");
      return PreparedScheduler<Accelerator, Object>(this, &object);
    } else if constexpr (detail::is_data_loader<Object>) {
      static_assert(std::is_lvalue_reference_v<T>,
                    "accel: prepare() keeps a pointer to the DataLoader; pass a named loader "
                    "that outlives the Accelerator, not a temporary");
      return PreparedLoader<Accelerator, Object>(this, &object);
    } else {
      static_assert(detail::dependent_false<Object>,
                    "accel: prepare() takes modules (torch::nn::ModuleHolder or "
                    "std::shared_ptr<Module>), torch::optim optimizers, torch::optim::LRScheduler "
                    "schedulers and accel::DataLoader; this argument is none of them");
    }
  }

  void register_model(const std::shared_ptr<torch::nn::Module>& module) {
    for (const auto& known : models_)
      if (known.get() == module.get()) return;
    module->to(device_);
    models_.push_back(module);
  }

  std::vector<torch::Tensor> prepared_parameters() const {
    std::vector<torch::Tensor> parameters;
    std::unordered_set<const void*> seen;
    for (const auto& module : models_)
      for (const auto& p : module->parameters())
        if (seen.insert(p.unsafeGetTensorImpl()).second) parameters.push_back(p);
    return parameters;
  }

  Options options_;
  runtime::ProcessInfo process_;
  torch::Device device_;
  detail::GradientState gradients_;
  parallel::Strategy<parallelism_policy> strategy_;
  std::vector<std::shared_ptr<torch::nn::Module>> models_;
  bool accumulating_ = false;  // gradients of an unfinished window are in .grad
};

}  // namespace accel
