// Peak RSS of preparing a GPT-shaped model under Zero3, built eagerly or empty
// (accel::deferred_init): each rank prints its VmHWM after prepare() (docs/how-to/large-models.md, "Empty
// builds"; the numbers in docs/concepts/performance.md).
//
//   accel-launch --nproc 2 -- bench/accel_deferred_init_rss eager|deferred [--hidden H]
//       [--layers L] [--vocab V]
#include <accel/accelerator.hpp>
#include <accel/memory.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>

namespace {

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
  explicit BlockImpl(std::int64_t h)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})))),
        up(register_module("up", torch::nn::Linear(h, 4 * h))),
        down(register_module("down", torch::nn::Linear(4 * h, h))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + down(torch::gelu(up(norm(x)))); }
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  torch::nn::Embedding embed{nullptr};
  torch::nn::Sequential blocks{nullptr};
  torch::nn::Linear head{nullptr};
  GptImpl(std::int64_t vocab, std::int64_t h, int layers) {
    embed = register_module("embed", torch::nn::Embedding(vocab, h));
    blocks = register_module("blocks", torch::nn::Sequential());
    for (int i = 0; i < layers; ++i) blocks->push_back(Block(h));
    head = register_module("head", torch::nn::Linear(h, vocab));
    torch::NoGradGuard no_grad;  // GPT-2's init pass over every Linear
    for (auto& module : modules(/*include_self=*/false))
      if (auto* linear = module->as<torch::nn::Linear>()) linear->weight.normal_(0, 0.02);
  }
  torch::Tensor forward(const torch::Tensor& tokens) { return head(blocks->forward(embed(tokens))); }
};
TORCH_MODULE(Gpt);

std::string megabytes(std::optional<std::int64_t> bytes) {
  return bytes ? fmt::format("{:.1f} MB", static_cast<double>(*bytes) / 1e6) : "?";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "eager";
  std::int64_t hidden = 1024, vocab = 32000;
  int layers = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--hidden") hidden = std::stoll(argv[i + 1]);
    if (flag == "--layers") layers = std::stoi(argv[i + 1]);
    if (flag == "--vocab") vocab = std::stoll(argv[i + 1]);
  }
  accel::Accelerator<accel::Zero3> acc;
  torch::manual_seed(0);
  Gpt gpt = mode == "deferred" ? accel::deferred_init([&] { return Gpt(vocab, hidden, layers); })
                               : Gpt(vocab, hidden, layers);
  std::int64_t count = 0;
  for (const auto& p : gpt->parameters()) count += p.numel();
  const std::string built = megabytes(accel::memory::resident_bytes());
  auto model = acc.prepare(gpt);
  fmt::print("rank {} {} {:.1f}M parameters, {} units: after build {}; after prepare {}; peak {}\n",
             acc.process_index(), mode, count / 1e6, accel::testing::internals(acc).strategy().unit_count(), built,
             megabytes(accel::memory::resident_bytes()),
             megabytes(accel::memory::peak_resident_bytes()));
  return 0;
}
