// fused_step() and fused_step_refusal(); fused_step.hpp includes this file in header-only mode.
// Longer than accel's files should be: three optimizers' kernels, each in two roundings, with
// their scalars and their checks, kept in one file so that the one pragma that fixes their
// rounding (below) covers them all and nothing else.
//
// The kernels are plain float loops over __restrict pointers, which GCC vectorizes, compiled
// with -ffp-contract=off (the pragma below): a multiply and an add that libtorch rounds apart
// must not become one FMA here, and those its kernels fuse are written as __builtin_fmaf. The
// same pragma vectorizes them at -O1 and -O2 too (GCC 12's -O2 cost model and its lack of loop
// unswitching left SGD's loops scalar), where a program is built so. The
// square root is the one exception: under -fmath-errno (GCC's default) GCC vectorizes no loop
// that calls sqrt, so Adam's blocks of 512 second moments go through SSE's sqrtps
// (square_roots() below), correctly rounded as libtorch's vsqrtps. Each parameter is cut into
// at::parallel_for chunks of 32768 elements, as libtorch's own element-wise kernels are, so that
// the step uses the intra-op threads libtorch's would.
#pragma once

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../../detail/optimizer_types.hpp"
#include "../../detail/torch_compat.hpp"
#include "../fused_step.hpp"

namespace accel::parallel::detail {

// The row of the optimizer's exact type (a subclass may step differently) where the optimizer
// table marks it fused (detail/optimizer_table.hpp); `other` for every other.
inline OptimizerKind fused_kind(const torch::optim::Optimizer& optimizer) {
  OptimizerKind kind = OptimizerKind::other;
  accel::detail::for_each_optimizer_type([&](auto row) {
    constexpr OptimizerKind candidate = decltype(row)::value;
    using Type = typename accel::detail::OptimizerTypes<candidate>::optimizer;
    if (accel::detail::known_optimizer(candidate)->fused && typeid(optimizer) == typeid(Type))
      kind = candidate;
  });
  return kind;
}

// How libtorch's CPU kernels round a * b + c in add(other, alpha) and addcmul(): once (FMA: its
// AVX2 and AVX512 kernels, vec::fmadd and the compiler's contraction) or twice (its default
// kernels). Asked of libtorch itself, once, on 67 elements (its vector body and its scalar tail):
// (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 in float, so adding -(1 + 2^-11) to it
// gives 0 when the product was rounded first and 2^-24 when it was not.
struct FusedRounding {
  bool fma = false;
  bool consistent = true;  // both operations, body and tail, round alike
  bool runnable = true;    // this build can run the kernels rounding so (x86-64: AVX2 and FMA)
};

ACCEL_DECL FusedRounding probe_libtorch_rounding() {
  torch::NoGradGuard no_grad;
  const float factor = 1.0f + 0x1p-12f;
  const torch::Tensor base = torch::full({67}, -(1.0f + 0x1p-11f));
  const torch::Tensor operand = torch::full({67}, factor);
  const torch::Tensor added = base.add(operand, factor);
  const torch::Tensor multiplied = base.addcmul(operand, operand, 1.0);
  const auto one_rounding = [](const torch::Tensor& t, std::int64_t i) {
    return t[i].item<float>() != 0.0f;
  };
  FusedRounding rounding;
  rounding.fma = one_rounding(added, 0);
  rounding.consistent = one_rounding(added, 66) == rounding.fma &&
                        one_rounding(multiplied, 0) == rounding.fma &&
                        one_rounding(multiplied, 66) == rounding.fma;
#if defined(__x86_64__) && defined(__GNUC__)
  if (rounding.fma)
    rounding.runnable = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return rounding;
}

ACCEL_DECL const FusedRounding& libtorch_rounding() {
  static const FusedRounding rounding = probe_libtorch_rounding();
  return rounding;
}

// The scalars of one parameter's step, rounded to float as libtorch's kernels round them.
struct SgdScalars {
  float weight_decay = 0;  // grad + weight_decay * p, where decay
  float momentum = 0;
  float dampening = 0;     // 1 - dampening
  float step = 0;          // -lr
  bool decay = false;
  bool nesterov = false;
  int momentum_mode = 0;   // 0: no momentum; 1: the buffer's first step (a copy of d_p); 2: later
};

enum class AdamMode { plain, l2, decoupled };  // no weight decay; Adam's (in grad); AdamW's (on p)

struct AdamScalars {
  float weight_decay = 0;  // Adam: grad + weight_decay * p
  float decay = 1;         // AdamW: p * (1 - lr * weight_decay)
  float beta1 = 0;
  float one_minus_beta1 = 0;
  float beta2 = 0;
  float one_minus_beta2 = 0;
  float root_correction2 = 1;  // sqrt(bias_correction2)
  float eps = 0;
  float step = 0;              // -lr / bias_correction1
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off", "tree-vectorize", "vect-cost-model=dynamic", \
                     "unswitch-loops")
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define ACCEL_FUSED_FMA_TARGET __attribute__((target("avx2,fma")))
#else
#define ACCEL_FUSED_FMA_TARGET
#endif

// a * b + c, rounded once where libtorch's kernels fuse it (Fma), else twice.
template <bool Fma>
[[gnu::always_inline]] inline float multiply_add(float a, float b, float c) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  if constexpr (Fma) {
    return __builtin_fmaf(a, b, c);
  } else {
    const float product = a * b;
    return product + c;
  }
}

// libtorch's SGD::step for one parameter:
//   d_p = grad (+ weight_decay * p);
//   buf = d_p (its first step) or buf * momentum + (1 - dampening) * d_p;
//   d_p = nesterov ? d_p + momentum * buf : buf; p += -lr * d_p.
template <bool Fma>
[[gnu::always_inline]] inline void sgd_body(float* __restrict p, const float* __restrict g,
                                            float* __restrict buffer, std::int64_t n,
                                            const SgdScalars& s) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  const float weight_decay = s.weight_decay, momentum = s.momentum, dampening = s.dampening,
              step = s.step;
  const bool decay = s.decay, nesterov = s.nesterov;
  if (s.momentum_mode == 0) {
    for (std::int64_t i = 0; i < n; ++i) {
      float d = g[i];
      if (decay) d = multiply_add<Fma>(p[i], weight_decay, d);
      p[i] = multiply_add<Fma>(d, step, p[i]);
    }
  } else if (s.momentum_mode == 1) {
    for (std::int64_t i = 0; i < n; ++i) {
      float d = g[i];
      if (decay) d = multiply_add<Fma>(p[i], weight_decay, d);
      buffer[i] = d;
      if (nesterov) d = multiply_add<Fma>(d, momentum, d);
      p[i] = multiply_add<Fma>(d, step, p[i]);
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      float d = g[i];
      if (decay) d = multiply_add<Fma>(p[i], weight_decay, d);
      const float kept = buffer[i] * momentum;
      const float b = multiply_add<Fma>(d, dampening, kept);
      buffer[i] = b;
      d = nesterov ? multiply_add<Fma>(b, momentum, d) : b;
      p[i] = multiply_add<Fma>(d, step, p[i]);
    }
  }
}

// The square roots of n floats, correctly rounded (IEEE), as libtorch's sqrt.
[[gnu::always_inline]] inline void square_roots(const float* __restrict in, float* __restrict out,
                                                std::int64_t n) {
  std::int64_t i = 0;
#if defined(__x86_64__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(in + i)));
#endif
  for (; i < n; ++i) out[i] = __builtin_sqrtf(in[i]);
}

inline constexpr std::int64_t adam_block = 512;

// libtorch's Adam::step and AdamW::step for one parameter (amsgrad off):
//   AdamW: p *= 1 - lr * weight_decay.  Adam: grad += weight_decay * p.
//   exp_avg = exp_avg * beta1 + (1 - beta1) * grad
//   exp_avg_sq = exp_avg_sq * beta2 + ((1 - beta2) * grad) * grad
//   denom = sqrt(exp_avg_sq) / sqrt(bias_correction2) + eps
//   p += (-lr / bias_correction1) * exp_avg / denom
// in blocks of adam_block: the moments, their square roots, the parameters, while the block is
// in L1.
template <bool Fma, AdamMode Mode>
[[gnu::always_inline]] inline void adam_body(float* __restrict p, const float* __restrict g,
                                             float* __restrict m, float* __restrict v,
                                             std::int64_t n, const AdamScalars& s) {
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
  const float weight_decay = s.weight_decay, decay = s.decay, beta1 = s.beta1,
              one_minus_beta1 = s.one_minus_beta1, beta2 = s.beta2,
              one_minus_beta2 = s.one_minus_beta2, root_correction2 = s.root_correction2,
              eps = s.eps, step = s.step;
  alignas(64) float roots[adam_block];
  for (std::int64_t start = 0; start < n; start += adam_block) {
    const std::int64_t count = std::min(adam_block, n - start);
    float* __restrict pb = p + start;
    const float* __restrict gb = g + start;
    float* __restrict mb = m + start;
    float* __restrict vb = v + start;
    for (std::int64_t i = 0; i < count; ++i) {
      float grad = gb[i];
      if constexpr (Mode == AdamMode::l2) grad = multiply_add<Fma>(pb[i], weight_decay, grad);
      const float kept_m = mb[i] * beta1;
      mb[i] = multiply_add<Fma>(grad, one_minus_beta1, kept_m);
      const float kept_v = vb[i] * beta2;
      const float scaled = one_minus_beta2 * grad;
      vb[i] = multiply_add<Fma>(scaled, grad, kept_v);
    }
    square_roots(vb, roots, count);
    for (std::int64_t i = 0; i < count; ++i) {
      const float denom = roots[i] / root_correction2 + eps;
      float param = pb[i];
      if constexpr (Mode == AdamMode::decoupled) param = param * decay;
      const float update = (step * mb[i]) / denom;
      pb[i] = param + update;
    }
  }
}

using SgdKernel = void (*)(float*, const float*, float*, std::int64_t, const SgdScalars&);
using AdamKernel = void (*)(float*, const float*, float*, float*, std::int64_t,
                            const AdamScalars&);

// Each body twice: as this build compiles it, and for AVX2 with FMA (on x86-64), picked by
// libtorch_rounding() at run time.
inline void sgd_rounded_twice(float* p, const float* g, float* buffer, std::int64_t n,
                              const SgdScalars& s) {
  sgd_body<false>(p, g, buffer, n, s);
}
ACCEL_FUSED_FMA_TARGET inline void sgd_rounded_once(float* p, const float* g, float* buffer,
                                                    std::int64_t n, const SgdScalars& s) {
  sgd_body<true>(p, g, buffer, n, s);
}
template <AdamMode Mode>
void adam_rounded_twice(float* p, const float* g, float* m, float* v, std::int64_t n,
                        const AdamScalars& s) {
  adam_body<false, Mode>(p, g, m, v, n, s);
}
template <AdamMode Mode>
ACCEL_FUSED_FMA_TARGET void adam_rounded_once(float* p, const float* g, float* m, float* v,
                                              std::int64_t n, const AdamScalars& s) {
  adam_body<true, Mode>(p, g, m, v, n, s);
}

#undef ACCEL_FUSED_FMA_TARGET

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

inline AdamKernel adam_kernel(bool fma, AdamMode mode) {
  switch (mode) {
    case AdamMode::l2:
      return fma ? adam_rounded_once<AdamMode::l2> : adam_rounded_twice<AdamMode::l2>;
    case AdamMode::decoupled:
      return fma ? adam_rounded_once<AdamMode::decoupled>
                 : adam_rounded_twice<AdamMode::decoupled>;
    case AdamMode::plain: break;
  }
  return fma ? adam_rounded_once<AdamMode::plain> : adam_rounded_twice<AdamMode::plain>;
}

// Chunks of a parameter for the intra-op threads (one, inline, below the grain).
inline constexpr std::int64_t fused_grain = 32768;

template <class Kernel>
void over_chunks(std::int64_t n, const Kernel& kernel) {
  at::parallel_for(0, n, fused_grain,
                   [&](std::int64_t begin, std::int64_t end) { kernel(begin, end - begin); });
}

// One parameter with a gradient, in the order libtorch steps them.
struct FusedItem {
  torch::Tensor parameter;
  torch::Tensor gradient;
  // Null where it had none when the step began: an earlier item of the same step may create it
  // (a parameter listed twice, as a shared weight is in module.parameters(), steps twice, the
  // second time on the state the first made, as under libtorch), else this one does.
  torch::optim::OptimizerParamState* state = nullptr;
  std::size_t group = 0;
};

// The state an earlier item of this step created for `parameter`, or null.
inline torch::optim::OptimizerParamState* created_state(torch::optim::Optimizer& optimizer,
                                                        const torch::Tensor& parameter) {
  const auto found = optimizer.state().find(accel::detail::optimizer_state_key(parameter));
  return found == optimizer.state().end() ? nullptr : found->second.get();
}

inline bool is_plain_float(const torch::Tensor& t) {
  return t.defined() && t.layout() == torch::kStrided && t.device().is_cpu() &&
         t.scalar_type() == torch::kFloat && t.is_contiguous();
}

inline bool is_state_of(const torch::Tensor& state, const torch::Tensor& parameter) {
  return is_plain_float(state) && state.numel() == parameter.numel();
}

// The parameters with a gradient, and their state, when the kernels can step every one of them;
// else why not (a message for fused_step_refusal()).
template <class Options, class State>
std::string_view plan_items(const torch::optim::Optimizer& optimizer,
                            std::vector<FusedItem>& items) {
  const auto& groups = optimizer.param_groups();
  const auto& states = optimizer.state();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto* options = dynamic_cast<const Options*>(&groups[g].options());
    if (options == nullptr)
      return "a param group's options are not of the optimizer's own options type";
    bool needs_state = true;
    if constexpr (requires { options->amsgrad(); }) {
      if (options->amsgrad())
        return "amsgrad is on in a param group (the fused step has no max_exp_avg_sq)";
    } else {
      needs_state = options->momentum() != 0;
    }
    for (const torch::Tensor& parameter : groups[g].params()) {
      const torch::Tensor& gradient = parameter.grad();
      if (!gradient.defined()) continue;
      if (!is_plain_float(parameter) || !is_plain_float(gradient) ||
          !gradient.sizes().equals(parameter.sizes()))
        return "a parameter or its gradient is not a contiguous float32 CPU tensor (CUDA, bf16, "
               "fp16, fp64, sparse or non-contiguous)";
      FusedItem& item = items.emplace_back();
      item.parameter = parameter;
      item.gradient = gradient;
      item.group = g;
      if (!needs_state) continue;
      const auto found = states.find(accel::detail::optimizer_state_key(parameter));
      if (found == states.end()) continue;
      const auto* state = dynamic_cast<const State*>(found->second.get());
      bool usable = state != nullptr;
      if (usable) {
        if constexpr (requires { state->momentum_buffer(); })
          usable = is_state_of(state->momentum_buffer(), parameter);
        else
          usable = is_state_of(state->exp_avg(), parameter) &&
                   is_state_of(state->exp_avg_sq(), parameter);
      }
      if (!usable)
        return "a parameter's optimizer state is not a contiguous float32 CPU tensor of its size";
      item.state = found->second.get();
    }
  }
  return "";
}

ACCEL_DECL std::string_view fused_plan(const torch::optim::Optimizer& optimizer,
                                       std::vector<FusedItem>& items) {
  const OptimizerKind kind = fused_kind(optimizer);
  if (kind == OptimizerKind::other)
    return "not torch::optim::SGD, Adam or AdamW (the fused step takes those exact types only)";
  const FusedRounding& rounding = libtorch_rounding();
  if (!rounding.consistent)
    return "libtorch's CPU kernels round add(alpha) and addcmul() differently from each other "
           "on this machine";
  if (!rounding.runnable)
    return "libtorch's CPU kernels use FMA and this CPU lacks AVX2 or FMA";
  using namespace torch::optim;
  switch (kind) {
    case OptimizerKind::sgd: return plan_items<SGDOptions, SGDParamState>(optimizer, items);
    case OptimizerKind::adam: return plan_items<AdamOptions, AdamParamState>(optimizer, items);
    case OptimizerKind::adamw:
      return plan_items<AdamWOptions, AdamWParamState>(optimizer, items);
    default: break;  // no row the table marks fused is without its kernels here
  }
  return "";
}

ACCEL_DECL void step_sgd(torch::optim::SGD& optimizer, const std::vector<FusedItem>& items) {
  using namespace torch::optim;
  const SgdKernel kernel = libtorch_rounding().fma ? sgd_rounded_once : sgd_rounded_twice;
  for (const FusedItem& item : items) {
    const auto& options =
        static_cast<const SGDOptions&>(optimizer.param_groups()[item.group].options());
    SgdScalars s;
    s.decay = options.weight_decay() != 0;
    s.weight_decay = static_cast<float>(options.weight_decay());
    s.momentum = static_cast<float>(options.momentum());
    s.dampening = static_cast<float>(1 - options.dampening());
    s.nesterov = options.nesterov();
    s.step = static_cast<float>(-1 * options.lr());
    float* buffer = nullptr;
    if (options.momentum() != 0) {
      OptimizerParamState* existing =
          item.state != nullptr ? item.state : created_state(optimizer, item.parameter);
      if (existing != nullptr) {
        buffer = static_cast<SGDParamState&>(*existing).momentum_buffer().data_ptr<float>();
        s.momentum_mode = 2;
      } else {
        // libtorch's first step keeps a copy of d_p: written by the kernel.
        auto state = std::make_unique<SGDParamState>();
        state->momentum_buffer(torch::empty_like(item.parameter, torch::MemoryFormat::Contiguous));
        buffer = state->momentum_buffer().data_ptr<float>();
        optimizer.state()[accel::detail::optimizer_state_key(item.parameter)] = std::move(state);
        s.momentum_mode = 1;
      }
    }
    float* p = item.parameter.data_ptr<float>();
    const float* g = item.gradient.data_ptr<float>();
    over_chunks(item.parameter.numel(), [&](std::int64_t begin, std::int64_t count) {
      kernel(p + begin, g + begin, buffer == nullptr ? nullptr : buffer + begin, count, s);
    });
  }
}

template <class Optimizer, class Options, class State>
void step_adam(Optimizer& optimizer, const std::vector<FusedItem>& items, bool decoupled) {
  const bool fma = libtorch_rounding().fma;
  for (const FusedItem& item : items) {
    const auto& options =
        static_cast<const Options&>(optimizer.param_groups()[item.group].options());
    State* state = static_cast<State*>(
        item.state != nullptr ? item.state : created_state(optimizer, item.parameter));
    if (state == nullptr) {
      auto created = std::make_unique<State>();
      created->step(0);
      created->exp_avg(torch::zeros_like(item.parameter, torch::MemoryFormat::Preserve));
      created->exp_avg_sq(torch::zeros_like(item.parameter, torch::MemoryFormat::Preserve));
      state = created.get();
      optimizer.state()[accel::detail::optimizer_state_key(item.parameter)] = std::move(created);
    }
    state->step(state->step() + 1);
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    const double bias_correction1 = 1 - std::pow(beta1, state->step());
    const double bias_correction2 = 1 - std::pow(beta2, state->step());
    const double step_size = options.lr() / bias_correction1;

    AdamScalars s;
    AdamMode mode = AdamMode::plain;
    if (options.weight_decay() != 0) {
      mode = decoupled ? AdamMode::decoupled : AdamMode::l2;
      s.weight_decay = static_cast<float>(options.weight_decay());
      s.decay = static_cast<float>(1 - options.lr() * options.weight_decay());
    }
    s.beta1 = static_cast<float>(beta1);
    s.one_minus_beta1 = static_cast<float>(1 - beta1);
    s.beta2 = static_cast<float>(beta2);
    s.one_minus_beta2 = static_cast<float>(1 - beta2);
    s.root_correction2 = static_cast<float>(std::sqrt(bias_correction2));
    s.eps = static_cast<float>(options.eps());
    s.step = static_cast<float>(-step_size);

    const AdamKernel kernel = adam_kernel(fma, mode);
    float* p = item.parameter.data_ptr<float>();
    const float* g = item.gradient.data_ptr<float>();
    float* m = state->exp_avg().template data_ptr<float>();
    float* v = state->exp_avg_sq().template data_ptr<float>();
    over_chunks(item.parameter.numel(), [&](std::int64_t begin, std::int64_t count) {
      kernel(p + begin, g + begin, m + begin, v + begin, count, s);
    });
    // libtorch's in-place addcdiv_ counts as a change of p for autograd's saved-tensor checks.
    torch::autograd::impl::bump_version(item.parameter);
  }
}

}  // namespace accel::parallel::detail

namespace accel::parallel {

namespace detail {
ACCEL_DECL std::atomic<std::int64_t>& fused_step_counter() {
  static std::atomic<std::int64_t> counter{0};
  return counter;
}
}  // namespace detail

ACCEL_DECL std::int64_t fused_steps_taken() { return detail::fused_step_counter().load(); }

ACCEL_DECL std::string fused_step_refusal(const torch::optim::Optimizer& optimizer) {
  std::vector<detail::FusedItem> items;
  return std::string(detail::fused_plan(optimizer, items));
}

ACCEL_DECL bool fused_step(torch::optim::Optimizer& optimizer) {
  std::vector<detail::FusedItem> items;
  if (!detail::fused_plan(optimizer, items).empty()) return false;
  torch::NoGradGuard no_grad;
  using namespace torch::optim;
  switch (detail::fused_kind(optimizer)) {
    case OptimizerKind::sgd: detail::step_sgd(static_cast<SGD&>(optimizer), items); break;
    case OptimizerKind::adam:
      detail::step_adam<Adam, AdamOptions, AdamParamState>(static_cast<Adam&>(optimizer), items,
                                                           false);
      break;
    case OptimizerKind::adamw:
      detail::step_adam<AdamW, AdamWOptions, AdamWParamState>(static_cast<AdamW&>(optimizer),
                                                              items, true);
      break;
    default: return false;
  }
  detail::fused_step_counter().fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace accel::parallel
