// Empty builds (accel::deferred_init) prepared on several processes: under Zero3,
// Fsdp<FullShard> and Fsdp<HybridShard> (one node: its shards are FullShard's) only the shards are
// made, and the parameters gathered after prepare are bitwise those of building eagerly; three
// Adam steps later they still are. Ddp and Zero2 take the eager path (the whole model replayed on
// every rank), with the same result.
#include <accel/accelerator.hpp>
#include <accel/memory.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "scenario.hpp"

namespace {

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc{nullptr};
  BlockImpl()
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({12})))),
        fc(register_module("fc", torch::nn::Linear(12, 12))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + torch::tanh(fc(norm(x))); }
};
TORCH_MODULE(Block);

// What GPT-style constructors do: layers with their own init, a parameter computed from a random
// factory, a buffer, a frozen parameter, and an init pass over the layers at the end.
struct NetImpl : torch::nn::Module {
  torch::nn::Embedding embed{nullptr};
  torch::nn::Sequential body{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor scale, frozen;
  NetImpl() {
    embed = register_module("embed", torch::nn::Embedding(50, 12));
    body = register_module("body", torch::nn::Sequential(Block(), Block(), Block()));
    head = register_module("head", torch::nn::Linear(12, 7));
    scale = register_parameter("scale", torch::randn({12}) * 0.02 + 1);
    frozen = register_parameter("frozen", torch::rand({3}), /*requires_grad=*/false);
    register_buffer("offsets", torch::arange(7).to(torch::kFloat) / 10);
    torch::NoGradGuard no_grad;
    for (auto& module : modules(/*include_self=*/false))
      if (auto* linear = module->as<torch::nn::Linear>()) linear->weight.normal_(0, 0.02);
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    return head(body->forward(embed(tokens) * scale)) + named_buffers()["offsets"] + frozen.sum();
  }
};
TORCH_MODULE(Net);

// The parameters gathered, after prepare and after three steps, of one build.
template <class Acc>
std::pair<std::uint64_t, std::uint64_t> run(bool deferred) {
  Acc acc(accel_test::test_options());
  torch::manual_seed(5);
  Net net = deferred ? accel::deferred_init([] { return Net(); }) : Net();
  EXPECT(accel::is_deferred(*net) == deferred);
  torch::optim::Adam adam(net->parameters(), 0.01);  // built before prepare: the same tensors
  auto [model, optimizer] = acc.prepare(net, adam);
  EXPECT(!accel::is_deferred(*net));

  std::uint64_t prepared = 0;
  {
    const auto full = acc.full_parameters(net);
    prepared = accel::state::parameter_digest(*net);
  }
  torch::manual_seed(11 + acc.process_index());
  for (int step = 0; step < 3; ++step) {
    const auto tokens = torch::randint(0, 50, {4, 5});
    const auto target = torch::randn({4, 5, 7});
    optimizer.zero_grad();
    acc.backward(torch::mse_loss(model(tokens), target));
    optimizer.step();
  }
  const auto full = acc.full_parameters(net);
  return {prepared, accel::state::parameter_digest(*net)};
}

template <class Acc>
void matches_eager() {
  const auto eager = run<Acc>(false);
  const auto deferred = run<Acc>(true);
  EXPECT(deferred.first == eager.first);
  EXPECT(deferred.second == eager.second);
}

// Each refusal names the operator and says what to do; nothing is left recording afterwards.
void refusals() {
  const auto message = [](auto&& factory) -> std::string {
    try {
      accel::deferred_init(factory);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  const auto contains = [](const std::string& text, const std::string& part) {
    if (text.find(part) != std::string::npos) return true;
    fmt::print("'{}' lacks '{}'\n", text, part);
    return false;
  };
  // Embedding's padding_idx row is zeroed through a view.
  EXPECT(contains(message([] { return torch::nn::Embedding(torch::nn::EmbeddingOptions(9, 4).padding_idx(0)); }),
                  "accel: deferred_init: aten::fill_ writes into a view (shape [4]) of a tensor made in the empty build (shape [9, 4])"));
  EXPECT(contains(message([] {
                    torch::nn::Linear linear(2, 3);
                    torch::NoGradGuard no_grad;
                    torch::empty({3}, torch::kCPU).uniform_();
                    return linear;
                  }),
                  "aten::uniform_ draws random numbers into a tensor made outside the empty build"));
  EXPECT(contains(message([] {
                    torch::nn::Linear linear(2, 3);
                    torch::NoGradGuard no_grad;
                    torch::Generator generator = at::detail::createCPUGenerator(3);
                    linear->weight.normal_(0, 1, generator);
                    return linear;
                  }),
                  "aten::normal_ is given a generator of its own"));
  EXPECT(contains(message([] { return accel::deferred_init([] { return torch::nn::Linear(2, 3); }); }),
                  "called inside another deferred_init"));
  // Out of the scope again: factories are real.
  EXPECT(!torch::empty({2}).is_meta());
  // A meta model no deferred_init made.
  auto meta = std::make_shared<torch::nn::Module>();
  meta->register_parameter("w", torch::empty({3, 2}, torch::kMeta));
  accel::Accelerator<accel::Zero3> acc(accel_test::test_options());
  std::string refused;
  try {
    acc.prepare(meta);
  } catch (const std::exception& e) {
    refused = e.what();
  }
  EXPECT(contains(refused, "has tensors on the meta device (one of shape [3, 2]) that "
                           "accel::deferred_init did not make"));
}

}  // namespace

int main(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"deferred_zero3", matches_eager<accel::Accelerator<accel::Zero3>>},
      {"deferred_fsdp_full_shard", matches_eager<accel::Accelerator<accel::Fsdp<accel::FullShard>>>},
      {"deferred_fsdp_hybrid_shard", matches_eager<accel::Accelerator<accel::Fsdp<accel::HybridShard>>>},
      {"deferred_ddp", matches_eager<accel::Accelerator<accel::Ddp>>},
      {"deferred_zero2", matches_eager<accel::Accelerator<accel::Zero2>>},
      {"deferred_refusals", refusals},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}
