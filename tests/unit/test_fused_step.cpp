// The fused optimizer step (parallel/fused_step.hpp) against libtorch's own step(): SGD in each
// of its forms, Adam and AdamW with and without weight decay, two param groups of different
// options, parameters of sizes around the kernels' vector width, their 512-element blocks and
// the 32768-element chunks of the intra-op threads, one without a gradient on one step. After
// every step each parameter and state tensor is within 1 ulp of libtorch's (the contract; where
// measured it is bitwise, which a warning would say otherwise), the step counters are equal, and
// the state is libtorch's own objects: a libtorch optimizer loaded from a fused one's archive, or
// a fused optimizer handed to libtorch's step(), goes on as if libtorch had stepped throughout.
#include <accel/detail/torch_compat.hpp>
#include <accel/parallel/fused_step.hpp>
#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_fused_step {

namespace {

using namespace torch::optim;

std::int64_t ordered(float value) {
  std::int32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits < 0 ? std::int64_t{INT32_MIN} - bits : bits;
}

struct Distance {
  std::int64_t max_ulps = 0;
  std::int64_t differing = 0;  // elements not bitwise equal
  void add(const torch::Tensor& a, const torch::Tensor& b) {
    REQUIRE(a.sizes() == b.sizes());
    const torch::Tensor x = a.detach().contiguous(), y = b.detach().contiguous();
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t d =
          std::llabs(ordered(x.data_ptr<float>()[i]) - ordered(y.data_ptr<float>()[i]));
      max_ulps = std::max(max_ulps, d);
      differing += d != 0;
    }
  }
};

// Sizes: one element, less than a vector, a vector and a tail, a 2-D matrix across blocks, and
// more than one intra-op chunk.
const std::vector<std::vector<std::int64_t>> kShapes{{1}, {7}, {67}, {3, 333}, {70001}};

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& initial) {
  std::vector<torch::Tensor> out;
  for (const auto& t : initial) out.push_back(t.clone().requires_grad_());
  return out;
}

// Two param groups: the first three shapes with `first`, the rest with `second`.
template <class Options>
std::vector<OptimizerParamGroup> two_groups(const std::vector<torch::Tensor>& params,
                                            const Options& first, const Options& second) {
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>(params.begin(), params.begin() + 3),
                      std::make_unique<Options>(first));
  groups.emplace_back(std::vector<torch::Tensor>(params.begin() + 3, params.end()),
                      std::make_unique<Options>(second));
  return groups;
}

// The state tensors and step counters of one parameter, whatever the optimizer.
struct StateView {
  std::vector<torch::Tensor> tensors;
  std::int64_t step = -1;
};
StateView state_of(const Optimizer& optimizer, const torch::Tensor& parameter) {
  StateView view;
  const auto found = optimizer.state().find(accel::detail::optimizer_state_key(parameter));
  if (found == optimizer.state().end()) return view;
  const auto* state = found->second.get();
  if (const auto* s = dynamic_cast<const AdamParamState*>(state)) {
    view.tensors = {s->exp_avg(), s->exp_avg_sq()};
    view.step = s->step();
  } else if (const auto* w = dynamic_cast<const AdamWParamState*>(state)) {
    view.tensors = {w->exp_avg(), w->exp_avg_sq()};
    view.step = w->step();
  } else if (const auto* m = dynamic_cast<const SGDParamState*>(state)) {
    view.tensors = {m->momentum_buffer()};
  }
  return view;
}

// libtorch and the fused step side by side for `steps` steps from the same parameters and
// gradients; then one more step by libtorch's own step() of the fused optimizer and of one loaded
// from its archive.
template <class Opt, class Options>
void compare(const Options& first, const Options& second, int steps = 5) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> initial;
  for (const auto& shape : kShapes) initial.push_back(torch::randn(shape));
  auto reference_params = copies(initial), fused_params = copies(initial);
  Opt reference(two_groups(reference_params, first, second), first);
  Opt fused(two_groups(fused_params, first, second), first);
  const std::int64_t before = accel::parallel::fused_steps_taken();

  const auto give_gradients = [&](int step) {
    for (std::size_t i = 0; i < initial.size(); ++i) {
      // The first parameter has no gradient on step 2: skipped, its step counter behind.
      if (step == 2 && i == 0) {
        reference_params[i].mutable_grad() = torch::Tensor();
        fused_params[i].mutable_grad() = torch::Tensor();
        continue;
      }
      const torch::Tensor gradient = torch::randn(initial[i].sizes());
      reference_params[i].mutable_grad() = gradient.clone();
      fused_params[i].mutable_grad() = gradient.clone();
    }
  };
  const auto check_equal = [&](int step) {
    Distance distance;
    for (std::size_t i = 0; i < initial.size(); ++i) {
      distance.add(reference_params[i], fused_params[i]);
      const StateView a = state_of(reference, reference_params[i]);
      const StateView b = state_of(fused, fused_params[i]);
      REQUIRE(a.tensors.size() == b.tensors.size());
      CHECK(a.step == b.step);
      for (std::size_t k = 0; k < a.tensors.size(); ++k) distance.add(a.tensors[k], b.tensors[k]);
    }
    CAPTURE(step);
    CHECK(distance.max_ulps <= 1);
    WARN_MESSAGE(distance.differing == 0,
                 "the fused step is within 1 ulp of libtorch's, but not bitwise, on "
                 << distance.differing << " elements");
  };

  for (int step = 0; step < steps; ++step) {
    give_gradients(step);
    reference.step();
    REQUIRE(accel::parallel::fused_step(fused));
    check_equal(step);
  }
  CHECK(accel::parallel::fused_steps_taken() == before + steps);
  CHECK(reference.state().size() == fused.state().size());

  // The fused optimizer's state is libtorch's: saved and loaded into a new optimizer, or stepped
  // by libtorch's own step(), it goes on as the reference does.
  std::stringstream archive;
  torch::save(fused, archive);
  std::vector<torch::Tensor> loaded_params;
  for (const auto& p : fused_params) loaded_params.push_back(p.detach().clone().requires_grad_());
  Opt loaded(two_groups(loaded_params, first, second), first);
  torch::load(loaded, archive);
  give_gradients(steps);
  for (std::size_t i = 0; i < initial.size(); ++i)
    loaded_params[i].mutable_grad() = reference_params[i].grad().clone();
  reference.step();
  fused.step();  // libtorch's own step on the state the fused step left
  loaded.step();
  Distance distance;
  for (std::size_t i = 0; i < initial.size(); ++i) {
    distance.add(reference_params[i], fused_params[i]);
    distance.add(reference_params[i], loaded_params[i]);
  }
  CHECK(distance.max_ulps <= 1);
}

}  // namespace

TEST_CASE("fused step: SGD without momentum, with weight decay in one group") {
  compare<SGD>(SGDOptions(0.1), SGDOptions(0.05).weight_decay(0.01));
}

TEST_CASE("fused step: SGD with momentum and dampening") {
  compare<SGD>(SGDOptions(0.1).momentum(0.9),
               SGDOptions(0.05).momentum(0.8).dampening(0.1).weight_decay(0.01));
}

TEST_CASE("fused step: SGD with Nesterov momentum") {
  compare<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true),
               SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(0.01));
}

TEST_CASE("fused step: Adam, weight decay in one group, other betas and eps") {
  compare<Adam>(AdamOptions(0.01),
                AdamOptions(0.02).weight_decay(0.1).betas({0.8, 0.99}).eps(1e-6));
}

TEST_CASE("fused step: AdamW, its default decay and none") {
  compare<AdamW>(AdamWOptions(0.01), AdamWOptions(0.02).weight_decay(0).betas({0.9, 0.95}));
}

// A parameter listed twice (as a weight shared by two modules is in module.parameters()) steps
// twice per step under libtorch, the second time on the state the first created or updated.
template <class Opt, class Options>
void compare_listed_twice(const Options& options) {
  torch::manual_seed(5);
  const torch::Tensor shared = torch::randn({37}), other = torch::randn({5});
  auto a = shared.clone().requires_grad_(), b = other.clone().requires_grad_();
  auto c = shared.clone().requires_grad_(), d = other.clone().requires_grad_();
  Opt reference({a, b, a}, options), fused({c, d, c}, options);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor g = torch::randn({37}), h = torch::randn({5});
    a.mutable_grad() = g.clone();
    c.mutable_grad() = g.clone();
    b.mutable_grad() = h.clone();
    d.mutable_grad() = h.clone();
    reference.step();
    REQUIRE(accel::parallel::fused_step(fused));
    Distance distance;
    distance.add(a, c);
    distance.add(b, d);
    CHECK(distance.max_ulps <= 1);
    CHECK(state_of(reference, a).step == state_of(fused, c).step);
  }
}

TEST_CASE("fused step: a parameter listed twice steps twice, as under libtorch") {
  compare_listed_twice<Adam>(AdamOptions(0.01).weight_decay(0.01));
  compare_listed_twice<AdamW>(AdamWOptions(0.01));
  compare_listed_twice<SGD>(SGDOptions(0.1).momentum(0.9));
}

TEST_CASE("fused step: what it leaves to libtorch, untouched") {
  torch::manual_seed(1);
  const auto with_gradient = [](torch::Tensor p) {
    p.mutable_grad() = torch::ones_like(p);
    return p;
  };
  const auto untouched = [](Optimizer& optimizer, const std::string& why) {
    const torch::Tensor p = optimizer.param_groups()[0].params()[0];
    const torch::Tensor before = p.detach().clone();
    CHECK(accel::parallel::fused_step_refusal(optimizer).find(why) != std::string::npos);
    CHECK_FALSE(accel::parallel::fused_step(optimizer));
    CHECK(torch::equal(p.detach(), before));
    CHECK(optimizer.state().empty());
  };

  SUBCASE("amsgrad") {
    auto p = with_gradient(torch::randn({4}).requires_grad_());
    std::vector<OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{p}, std::make_unique<AdamOptions>(0.1));
    auto q = with_gradient(torch::randn({4}).requires_grad_());
    groups.emplace_back(std::vector<torch::Tensor>{q},
                        std::make_unique<AdamOptions>(AdamOptions(0.1).amsgrad(true)));
    Adam adam(std::move(groups), AdamOptions(0.1));
    untouched(adam, "amsgrad");
  }
  SUBCASE("a bf16 parameter") {
    Adam adam({with_gradient(torch::randn({4}, torch::kBFloat16).requires_grad_())},
              AdamOptions(0.1));
    untouched(adam, "float32");
  }
  SUBCASE("a non-contiguous parameter") {
    auto base = torch::randn({4, 3});
    SGD sgd({with_gradient(base.t().requires_grad_())}, SGDOptions(0.1).momentum(0.9));
    untouched(sgd, "contiguous");
  }
  SUBCASE("another optimizer, or a subclass of one of the three") {
    RMSprop rmsprop({with_gradient(torch::randn({4}).requires_grad_())}, RMSpropOptions(0.1));
    untouched(rmsprop, "SGD, Adam or AdamW");
    struct MyAdam : Adam {
      using Adam::Adam;
    };
    MyAdam mine({with_gradient(torch::randn({4}).requires_grad_())}, AdamOptions(0.1));
    untouched(mine, "SGD, Adam or AdamW");
  }
  SUBCASE("step_optimizer falls back to libtorch's step") {
    auto p = with_gradient(torch::randn({4}, torch::kDouble).requires_grad_());
    const torch::Tensor before = p.detach().clone();
    SGD sgd({p}, SGDOptions(0.5));
    accel::parallel::step_optimizer(sgd, true);
    CHECK(torch::allclose(p.detach(), before - 0.5));
  }
}

TEST_CASE("fused step: parameters without gradients get no state, as under libtorch") {
  auto p = torch::randn({5}).requires_grad_();
  auto q = torch::randn({5}).requires_grad_();
  q.mutable_grad() = torch::ones_like(q);
  Adam adam({p, q}, AdamOptions(0.1));
  REQUIRE(accel::parallel::fused_step(adam));
  CHECK(adam.state().size() == 1);
  CHECK(state_of(adam, q).step == 1);
  CHECK(state_of(adam, p).step == -1);
}

}  // namespace unit_fused_step
