// Activation checkpointing (memory/activation_checkpoint.hpp, checkpointed.hpp, activation_checkpoint_children.hpp):
// gradients bitwise equal to a run without it, dropout included, under each precision; nested
// and non-tensor arguments; a parameter or input modified before backward is an accel: error.
#include <accel/accelerator.hpp>
#include <accel/memory.hpp>
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_activation_checkpointing {

namespace {

// A block of several ops with dropout: what checkpointing is for.
struct BlockImpl : torch::nn::Module {
  torch::nn::Linear up{nullptr}, down{nullptr};
  torch::nn::Dropout dropout{nullptr};
  explicit BlockImpl(std::int64_t width = 16) {
    up = register_module("up", torch::nn::Linear(width, 2 * width));
    down = register_module("down", torch::nn::Linear(2 * width, width));
    dropout = register_module("dropout", torch::nn::Dropout(0.3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + down(dropout(torch::gelu(up(x))));
  }
};
TORCH_MODULE(Block);

torch::nn::Sequential blocks(std::uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), Block(), Block(), torch::nn::Dropout(0.2),
                               Block(), torch::nn::Linear(16, 1));
}

// A module with Checkpointed members, the same parameters as blocks() (same names, same order).
struct CheckpointedNetImpl : torch::nn::Module {
  torch::nn::Linear first{nullptr}, last{nullptr};
  accel::Checkpointed<Block> b1{nullptr}, b2{nullptr}, b3{nullptr};
  explicit CheckpointedNetImpl(std::uint64_t seed) {
    torch::manual_seed(seed);
    first = register_module("0", torch::nn::Linear(8, 16));
    b1 = register_module("1", accel::Checkpointed<Block>());
    b2 = register_module("2", accel::Checkpointed<Block>());
    b3 = register_module("4", accel::Checkpointed<Block>());
    last = register_module("5", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = b2(b1->forward(first(x)));
    return last(b3(torch::dropout(h, 0.2, is_training())));
  }
};
TORCH_MODULE(CheckpointedNet);

std::vector<torch::Tensor> gradients(torch::nn::Module& module) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : module.parameters()) grads.push_back(p.grad().clone());
  return grads;
}

void check_bitwise(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a[i].defined());
    CHECK(torch::equal(a[i], b[i]));
  }
}

struct Run {
  std::vector<torch::Tensor> grads;
  torch::Tensor after;  // the next random numbers after the step: the loop's RNG stream
  double loss = 0;
};

// Two steps (so that the second sees gradients accumulated in place and updated weights) of a
// prepared model under Accelerator<Ddp, Prec> with or without Options::activation_checkpointing.
using Wrapper = std::size_t (*)(const std::shared_ptr<torch::nn::Module>&);
template <class Prec>
Run train_sequential(bool checkpointing, std::uint64_t dropout_seed = 3,
                     Wrapper wrapper = &accel::memory::checkpoint_sequential_children) {
  accel::Accelerator<accel::Ddp, Prec> accelerator(
      {.activation_checkpointing = checkpointing ? wrapper : nullptr});
  auto net = blocks(11);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  torch::manual_seed(3);
  const auto x = torch::randn({12, 8});
  const auto y = torch::randn({12, 1});
  torch::manual_seed(dropout_seed);
  Run run;
  for (int step = 0; step < 2; ++step) {
    const auto loss = torch::mse_loss(model(x), y);
    accelerator.backward(loss);
    run.loss = loss.template item<double>();
    if (step == 0) optimizer.step();
    if (step == 0) optimizer.zero_grad();
  }
  run.grads = gradients(*net);
  run.after = torch::rand({4});
  return run;
}

template <class Prec>
void check_prepare_option() {
  const Run plain = train_sequential<Prec>(false);
  const Run checkpointed = train_sequential<Prec>(true);
  check_bitwise(plain.grads, checkpointed.grads);
  CHECK(plain.loss == checkpointed.loss);
  CHECK(torch::equal(plain.after, checkpointed.after));
  // The comparison sees dropout: other masks (another seed) give other gradients, as a recompute
  // that drew fresh masks would.
  const Run other_masks = train_sequential<Prec>(true, 4);
  CHECK(!torch::equal(plain.grads.front(), other_masks.grads.front()));
  const Run except_last =
      train_sequential<Prec>(true, 3, &accel::memory::checkpoint_sequential_children_except_last);
  check_bitwise(plain.grads, except_last.grads);
  CHECK(torch::equal(plain.after, except_last.after));
}

}  // namespace

TEST_CASE("activation checkpointing: prepare option, bitwise equal gradients with dropout, Fp32") {
  check_prepare_option<accel::Fp32>();
}

TEST_CASE("activation checkpointing: prepare option, bitwise equal gradients with dropout, Bf16") {
  check_prepare_option<accel::Bf16>();
}

// Registered only where libtorch has fp16 matmul on CPU (2.x; tests/skip.hpp): on 1.13 Fp16 is
// refused on CPU (test_precision.cpp tests the refusal).
TEST_CASE("activation checkpointing: prepare option, bitwise equal gradients with dropout, Fp16" *
          doctest::skip(!accel::detail::cpu_has_half_matmul)) {
  check_prepare_option<accel::Fp16>();
}

TEST_CASE("activation checkpointing: the prepare option wraps the Sequential's blocks, names unchanged") {
  auto net = blocks(11);
  std::vector<std::string> names_before;
  for (const auto& item : net->named_parameters()) names_before.push_back(item.key());
  accel::Accelerator<accel::Ddp> accelerator(
      {.activation_checkpointing = accel::memory::checkpoint_sequential_children});
  auto model = accelerator.prepare(net);
  std::vector<std::string> names_after;
  for (const auto& item : net->named_parameters()) names_after.push_back(item.key());
  CHECK(names_before == names_after);
  // Five children with parameters are wrapped; the Dropout between them is not.
  int wrapped = 0;
  for (std::size_t i = 0; i < net->size(); ++i)
    wrapped += std::dynamic_pointer_cast<accel::memory::detail::CheckpointCallImpl>(net->ptr(i)) != nullptr;
  CHECK(wrapped == 5);
  // The output's node is the last child's checkpoint.
  const auto out = model(torch::randn({2, 8}));
  REQUIRE(out.grad_fn());
  CHECK(out.grad_fn()->name().find("CheckpointFunction") != std::string::npos);
}

TEST_CASE("activation checkpointing: the except-last option leaves each Sequential's last child with parameters alone") {
  // Two Sequentials in one model: each keeps its own last child.
  struct TwoStacks : torch::nn::Module {
    torch::nn::Sequential first = register_module("first", torch::nn::Sequential(Block(), Block()));
    torch::nn::Sequential second =
        register_module("second", torch::nn::Sequential(Block(), torch::nn::Linear(16, 1)));
  };
  const auto stacks = std::make_shared<TwoStacks>();
  CHECK(accel::memory::checkpoint_sequential_children_except_last(stacks) == 2);
  const auto wrapped = [](const torch::nn::Sequential& seq, std::size_t i) {
    return std::dynamic_pointer_cast<accel::memory::detail::CheckpointCallImpl>(seq->ptr(i)) != nullptr;
  };
  CHECK(wrapped(stacks->first, 0));
  CHECK(!wrapped(stacks->first, 1));
  CHECK(wrapped(stacks->second, 0));
  CHECK(!wrapped(stacks->second, 1));
  auto net = blocks(11);
  CHECK(accel::memory::checkpoint_sequential_children_except_last(net.ptr()) == 4);
  const auto out = net->forward(torch::randn({2, 8}));
  REQUIRE(out.grad_fn());
  CHECK(out.grad_fn()->name().find("CheckpointFunction") == std::string::npos);
}

TEST_CASE("activation checkpointing: Checkpointed<Block> members, bitwise equal to the plain model") {
  for (const bool bf16 : {false, true}) {
    CAPTURE(bf16);
    auto plain = blocks(21);
    CheckpointedNet checkpointed(22);
    {
      torch::NoGradGuard no_grad;  // the same weights (the names match one to one)
      const auto from = plain->named_parameters();
      for (auto& item : checkpointed->named_parameters()) item.value().copy_(from[item.key()]);
    }
    const auto x = torch::randn({6, 8});
    auto step = [&](auto& module) {
      torch::manual_seed(5);
      std::optional<accel::precision::Autocast<accel::Bf16>> autocast;
      if (bf16) autocast.emplace(torch::Device(torch::kCPU));
      auto loss = module->forward(x).to(torch::kFloat).pow(2).sum();
      autocast.reset();
      loss.backward();
      return torch::rand({3});
    };
    const auto after_plain = step(plain);
    const auto after_checkpointed = step(checkpointed);
    check_bitwise(gradients(*plain), gradients(*checkpointed));
    CHECK(torch::equal(after_plain, after_checkpointed));
  }
  // The wrapper is the module: same names, ->as<Impl>() and member access work.
  accel::Checkpointed<torch::nn::Linear> linear(3, 2);
  CHECK(linear->as<torch::nn::LinearImpl>() != nullptr);
  CHECK(linear->named_parameters().contains("weight"));
  CHECK(linear->weight.size(0) == 2);
  const auto y = linear(torch::randn({4, 3}, torch::requires_grad()));
  CHECK(y.grad_fn()->name().find("CheckpointFunction") != std::string::npos);
}

TEST_CASE("activation checkpointing: without grad mode the function simply runs") {
  torch::nn::Linear linear(3, 2);
  torch::NoGradGuard no_grad;
  const auto y = accel::checkpoint([&](const torch::Tensor& x) { return linear(x); }, torch::ones({1, 3}));
  CHECK(!y.requires_grad());
}

namespace {
struct Pair {
  torch::Tensor a;
  std::vector<torch::Tensor> rest;
};
}  // namespace

TEST_CASE("activation checkpointing: nested and non-tensor arguments, several outputs, nesting") {
  torch::manual_seed(9);
  torch::nn::Linear linear(4, 4);
  const auto a0 = torch::randn({3, 4}, torch::requires_grad());
  const auto b0 = torch::randn({3, 4}, torch::requires_grad());
  const auto c0 = torch::randn({3, 4});  // no gradient wanted
  auto fn = [&](const std::tuple<torch::Tensor, double>& first, const Pair& pair, int power,
                const std::string& mode) {
    const auto& [t, scale] = first;
    auto h = linear(t * scale + pair.a) + pair.rest[0] * pair.rest[1];
    if (mode == "square") h = h.pow(power);
    return std::pair{h.sum(1), h.argmax(1)};  // a float output and an integer one
  };
  auto run = [&](bool checkpointed) {
    linear->zero_grad();
    const auto a = a0.detach().requires_grad_(true), b = b0.detach().requires_grad_(true);
    const std::tuple<torch::Tensor, double> first{a, 0.5};
    const Pair pair{b, {b.sin(), c0}};
    auto [sums, index] = checkpointed
                             ? accel::checkpoint(fn, first, pair, 2, std::string("square"))
                             : fn(first, pair, 2, std::string("square"));
    CHECK(!index.requires_grad());
    CHECK((index.scalar_type() == torch::kLong));
    sums.sum().backward();
    return std::vector<torch::Tensor>{a.grad(), b.grad(), linear->weight.grad().clone(),
                                      linear->bias.grad().clone()};
  };
  check_bitwise(run(false), run(true));

  // A checkpoint inside a checkpoint.
  auto nested = [&](bool checkpointed) {
    linear->zero_grad();
    const auto a = a0.detach().requires_grad_(true);
    auto inner = [&](const torch::Tensor& x) { return torch::tanh(linear(x)); };
    auto outer = [&](const torch::Tensor& x) {
      return checkpointed ? accel::checkpoint(inner, x * 2).pow(2) : inner(x * 2).pow(2);
    };
    (checkpointed ? accel::checkpoint(outer, a) : outer(a)).sum().backward();
    return std::vector<torch::Tensor>{a.grad(), linear->weight.grad().clone()};
  };
  check_bitwise(nested(false), nested(true));
}

TEST_CASE("activation checkpointing: a parameter modified between forward and backward is an error") {
  Block block;
  accel::Checkpointed<Block> checkpointed;
  const auto x = torch::randn({2, 16});
  auto loss = checkpointed(x).sum();
  {
    torch::NoGradGuard no_grad;
    checkpointed->up->weight.add_(1.0);
  }
  CHECK_THROWS_WITH_AS(loss.backward(),
                       doctest::Contains("accel: checkpoint: parameter 'up.weight' was modified in "
                                         "place between the checkpointed forward and its backward"),
                       std::exception);

  // The same through accel::checkpoint (no names: the tensor is described), and for an input.
  torch::nn::Linear linear(16, 2);
  auto y = accel::checkpoint([&](const torch::Tensor& t) { return linear(t); }, x).sum();
  {
    torch::NoGradGuard no_grad;
    linear->bias.mul_(2.0);
  }
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("accel: checkpoint: parameter #1 (Float [2])"),
                       std::exception);
  auto input = torch::randn({2, 16}, torch::requires_grad()).clone();
  auto z = accel::checkpoint([&](const torch::Tensor& t) { return linear(t); }, input).sum();
  {
    torch::NoGradGuard no_grad;
    input.zero_();
  }
  CHECK_THROWS_WITH_AS(z.backward(), doctest::Contains("accel: checkpoint: input #0 (Float [2, 16])"),
                       std::exception);
}

TEST_CASE("activation checkpointing: a tensor with history read without being an input is an error") {
  torch::nn::Linear linear(4, 4);
  const auto h = linear(torch::randn({2, 4}));  // has a graph, not passed in
  CHECK_THROWS_WITH_AS(
      accel::checkpoint([&](const torch::Tensor& t) { return t * h; }, torch::randn({2, 4})),
      doctest::Contains("accel: checkpoint: the function reads a tensor whose autograd history "
                        "began before the checkpoint"),
      accel::Error);
}

}  // namespace unit_activation_checkpointing
