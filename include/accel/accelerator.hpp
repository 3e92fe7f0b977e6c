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
#include "data/shard.hpp"
#include "data/tensor_tree.hpp"
#include "detail/bytes.hpp"
#include "detail/error.hpp"
#include "detail/gradient_state.hpp"
#include "launch.hpp"
#include "options.hpp"
#include "parallel/strategies.hpp"
#include "policy.hpp"
#include "precision/autocast.hpp"
#include "prepared.hpp"
#include "runtime/cpu_heap.hpp"
#include "runtime/environment.hpp"
#include "runtime/process_group.hpp"
#include "state/digest.hpp"
#include "version.hpp"

namespace accel {

using runtime::ReduceOp;

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
        environment_(runtime::read_environment()),
        process_(environment_.process),
        device_(options_.device.value_or(default_device(process_.local_rank))),
        gradients_(accumulation_steps) {
    if constexpr (precision_policy::compute == policy::ComputeType::float16 ||
                  precision_policy::compute == policy::ComputeType::float8)
      detail::fail("{} training is not available in this version of accel; use Fp32 or Bf16",
                   precision_policy::name);
    const runtime::GroupSettings group_settings = runtime::with_environment(
        {options_.timeout, options_.rendezvous_timeout, options_.check_collectives});
    if (process_.world_size > 1) {
      if (device_.is_cuda())
        detail::fail("{} processes on {}: multi-process training on CUDA needs NCCL, which this "
                     "version of accel does not wire yet; run the ranks on CPU "
                     "(Options{{.device = torch::kCPU}}) or one process per job",
                     process_.world_size, device_.str());
      group_ = std::make_unique<runtime::ProcessGroup>(environment_, group_settings);
    }
    if (options_.tune_cpu_heap && device_.is_cpu()) runtime::keep_freed_cpu_memory();
    strategy_.attach(group_.get(), options_);
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
  const runtime::Environment& environment() const { return environment_; }
  // The process group; null on one process.
  runtime::ProcessGroup* process_group() const { return group_.get(); }

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
  // Several backward() calls on one batch share its micro-step (gradient_state.hpp).
  void backward(const torch::Tensor& loss) {
    gradients_.on_backward();
    const bool sync = gradients_.sync_gradients();
    strategy_.before_backward(sync);
    if (gradients_.window_length() == 1)
      loss.backward();
    else
      (loss * gradients_.accumulation_factor()).backward();
    strategy_.after_backward(sync);
    accumulating_ = !sync;
  }

  // RAII: one micro-step in a loop without a prepared loader, as Accelerate's accumulate():
  // every backward() inside the scope belongs to it. Inside a prepared loader's loop the batch
  // already is the micro-step, and the scope changes nothing.
  class [[nodiscard]] MicroStep {
   public:
    explicit MicroStep(detail::GradientState* owned) : owned_(owned) {}
    ~MicroStep() {
      if (owned_ != nullptr) owned_->end_micro_step();
    }
    MicroStep(const MicroStep&) = delete;
    MicroStep& operator=(const MicroStep&) = delete;

   private:
    detail::GradientState* owned_;
  };
  MicroStep accumulate() {
    if (gradients_.in_micro_step()) return MicroStep(nullptr);
    gradients_.begin_micro_step();
    return MicroStep(&gradients_);
  }

  // True on the micro-step that ends an accumulation window (every step without accumulation).
  bool sync_gradients() const { return gradients_.sync_gradients(); }
  // True while the batch in hand is the last of its epoch (evaluation loaders included).
  bool end_of_data() const { return end_of_data_; }
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

  // --- Collectives: every rank calls them, in the same order. On one process they return their
  // argument (gather: as if gathered from one rank). Tensors may sit in any aggregate. --------------

  // Blocks until every rank gets here.
  void wait_for_everyone() {
    if (group_) group_->barrier();
  }

  // RAII: the main process runs the scope first, the others after it has left it (download or
  // preprocess once, then read the result everywhere).
  class [[nodiscard]] MainProcessFirst {
   public:
    explicit MainProcessFirst(Accelerator& accelerator) : accelerator_(accelerator) {
      if (!accelerator_.is_main_process()) accelerator_.wait_for_everyone();
    }
    ~MainProcessFirst() noexcept(false) {
      if (accelerator_.is_main_process()) accelerator_.wait_for_everyone();
    }
    MainProcessFirst(const MainProcessFirst&) = delete;
    MainProcessFirst& operator=(const MainProcessFirst&) = delete;

   private:
    Accelerator& accelerator_;
  };
  MainProcessFirst main_process_first() { return MainProcessFirst(*this); }

  // Every tensor of `value` as rank `root` holds it.
  template <class T>
  T broadcast(const T& value, int root = 0) {
    if (!group_) return value;
    return data::map_tensors(value, [&](const torch::Tensor& t) {
      torch::Tensor copy = t.detach().clone();
      group_->broadcast(copy, root);
      return copy;
    });
  }

  // Every tensor of `value` reduced element-wise over the ranks (sum, mean, max or min).
  template <class T>
  T reduce(const T& value, ReduceOp op = ReduceOp::sum) {
    data::for_each_tensor(value, [&](const torch::Tensor& t) { runtime::check_reducible(t, op); });
    if (!group_) return value;
    return data::map_tensors(value, [&](const torch::Tensor& t) {
      torch::Tensor copy = t.detach().clone();
      group_->allreduce(copy, op);
      return copy;
    });
  }

  // Every tensor of `value` concatenated along dimension 0 over the ranks, in rank order. The
  // first dimension may differ between ranks; 0-dim tensors become one row per rank.
  template <class T>
  T gather(const T& value) {
    return data::map_tensors(value, [&](const torch::Tensor& t) { return gather_tensor(t); });
  }

  // gather, without the duplicates that even_batches added to the last round of the epoch
  // (exactly those), so that metrics see every sample once.
  template <class T>
  T gather_for_metrics(const T& value) {
    const std::int64_t keep = end_of_data_ ? real_in_final_round_ : -1;
    return data::map_tensors(value, [&](const torch::Tensor& t) {
      torch::Tensor all = gather_tensor(t);
      return keep >= 0 && keep < all.size(0) ? all.narrow(0, 0, keep) : all;
    });
  }

  // One value per rank, in rank order. T: a trivially copyable type, std::string, or a
  // std::vector of a trivially copyable type.
  template <class T>
  std::vector<T> gather_object(const T& value) {
    if (!group_) return {value};
    std::vector<T> result;
    for (const std::string& bytes : group_->allgather_bytes(detail::to_bytes(value)))
      result.push_back(detail::from_bytes<T>(bytes));
    return result;
  }

  // Pads dimension `dim` of every tensor of `value` to the largest size among the ranks.
  template <class T>
  T pad_across_processes(const T& value, std::int64_t dim = 0, double pad_value = 0.0,
                         bool pad_first = false) {
    return data::map_tensors(value, [&](const torch::Tensor& t) {
      return pad_tensor(t, dim, pad_value, pad_first);
    });
  }

  // This rank's contiguous share of `items` (a std::vector or a tensor's first dimension):
  // shares differ by at most one item, the first ranks taking the extra ones.
  template <class T>
  T split_between_processes(const T& items) {
    const std::int64_t n = static_cast<std::int64_t>(
        [&] {
          if constexpr (std::is_same_v<T, torch::Tensor>)
            return items.size(0);
          else
            return items.size();
        }());
    const std::int64_t world = num_processes(), rank = process_index();
    const std::int64_t base = n / world, extra = n % world;
    const std::int64_t begin = rank * base + std::min(rank, extra);
    const std::int64_t count = base + (rank < extra ? 1 : 0);
    if constexpr (std::is_same_v<T, torch::Tensor>)
      return items.narrow(0, begin, count);
    else
      return T(items.begin() + begin, items.begin() + begin + count);
  }

  // A flag any rank may raise (for example on a diverging loss) and every rank then sees at its
  // next check_trigger(), which lowers it again.
  void set_trigger() { trigger_ = true; }
  bool check_trigger() {
    torch::Tensor flag = torch::tensor({trigger_ ? 1 : 0}, torch::kInt);
    if (group_) group_->allreduce(flag, ReduceOp::max);
    const bool raised = flag.item<int>() == 1;
    if (raised) trigger_ = false;
    return raised;
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
    strategy_.before_forward(static_cast<torch::nn::Module&>(*module));
    precision::Autocast<precision_policy> guard(device_);
    return precision::outputs_to_fp32<precision_policy>(
        module->forward(std::forward<Args>(args)...));
  }

  template <class Optimizer>
  void optimizer_step(Optimizer& optimizer) {
    if (sync_gradients()) strategy_.optimizer_step(optimizer);
  }

  // Zeroes gradients (in place, parallel/local.hpp) unless a window is still collecting them.
  template <class Optimizer>
  void optimizer_zero_grad(Optimizer& optimizer) {
    if (!accumulating_) strategy_.zero_grad(optimizer);
  }

  // A loader yielded this rank's batch `index` of `count`; `real_in_final_round` is how many
  // samples of the last round are not wrap-around duplicates (-1: none are). Evaluation loops
  // run under torch::NoGradGuard and do not count as micro-steps.
  template <class Batch>
  Batch on_batch(const Batch& batch, std::int64_t index, std::int64_t count,
                 std::int64_t real_in_final_round) {
    if (torch::GradMode::is_enabled()) gradients_.begin_micro_step(count - index, index == 0);
    end_of_data_ = index + 1 == count;
    real_in_final_round_ = real_in_final_round;
    return to_device(batch);
  }
  // A loader's epoch ran out: a backward() after it is no longer part of its last batch.
  void on_epoch_end() {
    if (torch::GradMode::is_enabled()) gradients_.end_micro_step();
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
      strategy_.prepare_optimizer(object);
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
      return PreparedLoader<Accelerator, Object>(
          this, &object,
          data::Shard{process_.rank, process_.world_size, options_.even_batches,
                      options_.split_batches});
    } else {
      static_assert(detail::dependent_false<Object>,
                    "accel: prepare() takes modules (torch::nn::ModuleHolder or "
                    "std::shared_ptr<Module>), torch::optim optimizers, torch::optim::LRScheduler "
                    "schedulers and accel::DataLoader; this argument is none of them");
    }
  }

  torch::Tensor gather_tensor(const torch::Tensor& tensor) {
    const torch::Tensor t = tensor.dim() == 0 ? tensor.reshape({1}) : tensor;
    if (!group_) return t;
    // Rows, dtype and the shape past the first dimension (up to 6 dimensions in all), in the
    // one small all-gather the rows need anyway: a mismatch fails here, naming each rank's,
    // rather than inside Gloo.
    std::vector<std::int64_t> layout(8, 0);
    layout[0] = t.size(0);
    layout[1] = static_cast<std::int64_t>(t.scalar_type());
    layout[2] = t.dim();
    for (std::int64_t d = 1; d < std::min<std::int64_t>(t.dim(), 6); ++d)
      layout[static_cast<std::size_t>(2 + d)] = t.size(d);
    const torch::Tensor layouts = group_->allgather(torch::tensor(layout)).view({-1, 8});
    const torch::Tensor rest = layouts.narrow(1, 1, 7);
    if (!torch::equal(rest, rest[0].expand_as(rest))) {
      std::string each;
      for (int r = 0; r < num_processes(); ++r) {
        const std::int64_t* v = layouts[r].data_ptr<std::int64_t>();
        each += fmt::format("\n  rank {}: {} tensor of shape [rows, {}]", r,
                            c10::toString(static_cast<c10::ScalarType>(v[1])),
                            fmt::join(v + 3, v + 2 + std::min<std::int64_t>(v[2], 6), ", "));
      }
      detail::fail("gather: the ranks passed tensors that differ in dtype or past the first "
                   "dimension; only the first dimension may differ:{}",
                   each);
    }
    const torch::Tensor rows = layouts.select(1, 0).contiguous();
    const std::int64_t longest = rows.max().item<std::int64_t>();
    if (rows.min().item<std::int64_t>() == longest) return group_->allgather(t);
    // Uneven first dimensions: pad to the longest, gather, then keep each rank's real rows.
    const torch::Tensor all = group_->allgather(pad_tensor(t, 0, 0.0, false, longest));
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < num_processes(); ++r)
      parts.push_back(all.narrow(0, r * longest, rows[r].item<std::int64_t>()));
    return torch::cat(parts);
  }

  torch::Tensor pad_tensor(const torch::Tensor& t, std::int64_t dim, double pad_value,
                           bool pad_first, std::int64_t target = -1) {
    if (!group_ || t.dim() == 0) return t;
    if (dim < 0) dim += t.dim();
    if (dim < 0 || dim >= t.dim())
      detail::fail("pad_across_processes: dim {} is out of range for a tensor of {} dimensions",
                   dim, t.dim());
    if (target < 0) {
      torch::Tensor size = torch::tensor({t.size(dim)});
      group_->allreduce(size, ReduceOp::max);
      target = size.item<std::int64_t>();
    }
    if (t.size(dim) == target) return t;
    std::vector<std::int64_t> shape = t.sizes().vec();
    shape[static_cast<std::size_t>(dim)] = target;
    torch::Tensor padded = torch::full(shape, pad_value, t.options());
    const std::int64_t offset = pad_first ? target - t.size(dim) : 0;
    padded.narrow(dim, offset, t.size(dim)).copy_(t);
    return padded;
  }

  void register_model(const std::shared_ptr<torch::nn::Module>& module) {
    for (const auto& known : models_)
      if (known.get() == module.get()) return;
    module->to(device_);
    strategy_.prepare_model(*module, fmt::format("prepared model #{} ({})", models_.size() + 1,
                                                 module->name()));
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
  runtime::Environment environment_;
  runtime::ProcessInfo process_;
  std::unique_ptr<runtime::ProcessGroup> group_;
  torch::Device device_;
  detail::GradientState gradients_;
  parallel::Strategy<parallelism_policy> strategy_;
  std::vector<std::shared_ptr<torch::nn::Module>> models_;
  bool accumulating_ = false;  // gradients of an unfinished window are in .grad
  bool end_of_data_ = false;
  std::int64_t real_in_final_round_ = -1;
  bool trigger_ = false;
};

}  // namespace accel
