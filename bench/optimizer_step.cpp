// libtorch's optimizer step against accel's fused one (parallel/fused_step.hpp,
// Options::fused_optimizer) on the gpt example's parameters: milliseconds per step each way, at
// the thread count given, and how far apart their results are (ulps; 0: bitwise).
//
//   accel_optimizer_step [--hidden 512] [--layers 8] [--heads 8] [--seq 128]
//                        [--optimizer adamw|adam|sgd|sgd-momentum|all] [--steps 5] [--rounds 5]
//                        [--threads 1] [--pin] [--no-heap-tuning]
//
// Two copies of the model's parameters with the same random gradients, one stepped by libtorch's
// step(), the other by accel::parallel::fused_step(); each round times --steps steps of each, the
// two in alternating order, after a first step that creates the state. glibc's heap is tuned as
// an Accelerator tunes it (Options::tune_cpu_heap: libtorch's temporaries are not faulted in
// again every step) unless --no-heap-tuning. Prints, per optimizer,
//   optimizer=<o> parameters=<n> threads=<t> libtorch_ms=<median> fused_ms=<median>
//   speedup=<libtorch/fused> libtorch_cpu_ms=<median> fused_cpu_ms=<median> cpu_speedup=<...>
//   max_ulps=<largest difference over every parameter and state tensor>
// (wall-clock and this thread's CPU time per step; at one thread the CPU time is the step's
// whole work, and holds on a machine shared with other work, where the wall clock does not).
#include <accel/parallel/fused_step.hpp>
#include <accel/runtime/cpu_heap.hpp>
#include <fmt/format.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpt/model.hpp"

namespace {

struct Config {
  std::int64_t hidden = 512, layers = 8, heads = 8, seq = 128;
  std::string optimizer = "all";
  int steps = 5, rounds = 5, threads = 1;
  bool pin = false;
  bool heap_tuning = true;
};

[[noreturn]] void usage(const std::string& message) {
  fmt::print(stderr,
             "accel_optimizer_step: {}\nusage: accel_optimizer_step [--hidden H] [--layers L] "
             "[--heads A] [--seq S] [--optimizer adamw|adam|sgd|sgd-momentum|all] [--steps N] "
             "[--rounds R] [--threads T] [--pin] [--no-heap-tuning]\n",
             message);
  std::exit(2);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--pin" || flag == "--no-heap-tuning") {
      (flag == "--pin" ? c.pin : c.heap_tuning) = flag == "--pin";
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    const auto number = [&] {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || v < 1)
        usage(flag + " '" + value + "' is not a positive count");
      return v;
    };
    if (flag == "--hidden") c.hidden = number();
    else if (flag == "--layers") c.layers = number();
    else if (flag == "--heads") c.heads = number();
    else if (flag == "--seq") c.seq = number();
    else if (flag == "--optimizer") c.optimizer = value;
    else if (flag == "--steps") c.steps = static_cast<int>(number());
    else if (flag == "--rounds") c.rounds = static_cast<int>(number());
    else if (flag == "--threads") c.threads = static_cast<int>(number());
    else usage("unknown flag " + flag);
  }
  return c;
}

// Floats in an order where neighbours differ by 1: the distance between two is in ulps.
std::int64_t ordered(float value) {
  std::int32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits < 0 ? std::int64_t{INT32_MIN} - bits : bits;
}

std::int64_t max_ulps(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.contiguous(), y = b.contiguous();
  const float* p = x.data_ptr<float>();
  const float* q = y.data_ptr<float>();
  std::int64_t worst = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i)
    worst = std::max<std::int64_t>(worst, std::llabs(ordered(p[i]) - ordered(q[i])));
  return worst;
}

// Every state tensor of an optimizer, in the order of its parameters.
std::vector<torch::Tensor> state_tensors(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> tensors;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      const auto found = optimizer.state().find(accel::detail::optimizer_state_key(p));
      if (found == optimizer.state().end()) continue;
      const auto* state = found->second.get();
      if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
        tensors.push_back(s->exp_avg());
        tensors.push_back(s->exp_avg_sq());
      } else if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
        tensors.push_back(a->exp_avg());
        tensors.push_back(a->exp_avg_sq());
      } else if (const auto* m = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
        tensors.push_back(m->momentum_buffer());
      }
    }
  return tensors;
}

// The optimizer named, over `parameters` (gpt's two AdamW groups for adamw).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const gpt::Gpt& model,
                                                        const std::vector<torch::Tensor>& own) {
  // `own` holds copies of model->parameters(), in the same order: map the groups onto them.
  const auto originals = model->parameters();
  const auto copy_of = [&](const torch::Tensor& p) {
    for (std::size_t i = 0; i < originals.size(); ++i)
      if (originals[i].is_same(p)) return own[i];
    usage("internal: a parameter of the groups is not among the model's");
  };
  if (name == "adamw") {
    const gpt::ParamGroups groups = gpt::weight_decay_groups(*model);
    std::vector<torch::Tensor> decayed, not_decayed;
    for (const auto& p : groups.decayed) decayed.push_back(copy_of(p));
    for (const auto& p : groups.not_decayed) not_decayed.push_back(copy_of(p));
    const auto options = [](double wd) {
      return torch::optim::AdamWOptions(6e-3).betas({0.9, 0.95}).weight_decay(wd);
    };
    std::vector<torch::optim::OptimizerParamGroup> param_groups;
    param_groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(options(0.1)));
    param_groups.emplace_back(not_decayed,
                              std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
    return std::make_unique<torch::optim::AdamW>(std::move(param_groups), options(0.0));
  }
  if (name == "adam")
    return std::make_unique<torch::optim::Adam>(own, torch::optim::AdamOptions(1e-3));
  if (name == "sgd")
    return std::make_unique<torch::optim::SGD>(own, torch::optim::SGDOptions(0.01));
  if (name == "sgd-momentum")
    return std::make_unique<torch::optim::SGD>(
        own, torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
  usage("--optimizer '" + name + "': use adamw, adam, sgd, sgd-momentum or all");
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void measure(const Config& c, const std::string& name) {
  torch::manual_seed(0);
  gpt::Gpt model(gpt::ModelOptions{
      .layers = c.layers, .hidden = c.hidden, .heads = c.heads, .context = c.seq});
  std::vector<torch::Tensor> reference, fused;
  std::int64_t count = 0;
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : model->parameters()) {
      const torch::Tensor gradient = torch::randn_like(p) * 1e-2;
      reference.push_back(p.detach().clone().requires_grad_());
      fused.push_back(p.detach().clone().requires_grad_());
      reference.back().mutable_grad() = gradient.clone();
      fused.back().mutable_grad() = gradient.clone();
      count += p.numel();
    }
  }
  auto libtorch_optimizer = make_optimizer(name, model, reference);
  auto fused_optimizer = make_optimizer(name, model, fused);
  const std::string refusal = accel::parallel::fused_step_refusal(*fused_optimizer);
  if (!refusal.empty()) usage("the fused step refuses " + name + ": " + refusal);

  const std::function<void()> libtorch_step = [&] { libtorch_optimizer->step(); };
  const std::function<void()> fused_step = [&] { accel::parallel::fused_step(*fused_optimizer); };
  const auto thread_cpu_ms = [] {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
  };
  // Per step: wall-clock ms into `wall`, this thread's CPU ms into `cpu`.
  const auto time_steps = [&](const std::function<void()>& step, std::vector<double>& wall,
                              std::vector<double>& cpu) {
    const double cpu_start = thread_cpu_ms();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < c.steps; ++i) step();
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
        c.steps);
    cpu.push_back((thread_cpu_ms() - cpu_start) / c.steps);
  };
  libtorch_step();  // the state is created
  fused_step();
  std::vector<double> libtorch_ms, fused_ms, libtorch_cpu, fused_cpu;
  for (int round = 0; round < c.rounds; ++round) {
    if (round % 2 == 0) {
      time_steps(libtorch_step, libtorch_ms, libtorch_cpu);
      time_steps(fused_step, fused_ms, fused_cpu);
    } else {
      time_steps(fused_step, fused_ms, fused_cpu);
      time_steps(libtorch_step, libtorch_ms, libtorch_cpu);
    }
  }
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < reference.size(); ++i)
    worst = std::max(worst, max_ulps(reference[i].detach(), fused[i].detach()));
  const auto reference_state = state_tensors(*libtorch_optimizer);
  const auto fused_state = state_tensors(*fused_optimizer);
  if (reference_state.size() != fused_state.size()) usage("internal: the states differ in size");
  for (std::size_t i = 0; i < reference_state.size(); ++i)
    worst = std::max(worst, max_ulps(reference_state[i], fused_state[i]));
  const double a = median(libtorch_ms), b = median(fused_ms);
  const double ca = median(libtorch_cpu), cb = median(fused_cpu);
  fmt::print("optimizer={} parameters={} threads={} libtorch_ms={:.2f} fused_ms={:.2f} "
             "speedup={:.2f} libtorch_cpu_ms={:.2f} fused_cpu_ms={:.2f} cpu_speedup={:.2f} "
             "max_ulps={}\n",
             name, count, c.threads, a, b, a / b, ca, cb, ca / cb, worst);
}

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  if (c.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("accel_optimizer_step: pin");
  }
  torch::set_num_threads(c.threads);
  if (c.heap_tuning) accel::runtime::keep_freed_cpu_memory();
  const std::vector<std::string> names =
      c.optimizer == "all" ? std::vector<std::string>{"adamw", "adam", "sgd", "sgd-momentum"}
                           : std::vector<std::string>{c.optimizer};
  for (const auto& name : names) measure(c, name);
}
