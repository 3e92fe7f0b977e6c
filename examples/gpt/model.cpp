#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

namespace gpt {

namespace F = torch::nn::functional;

BlockImpl::BlockImpl(std::int64_t hidden, std::int64_t heads, std::int64_t layers)
    : heads(heads) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
  qkv = register_module("qkv", accel::Fp8Linear(hidden, 3 * hidden));
  attention_out = register_module("attention_out", accel::Fp8Linear(hidden, hidden));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
  mlp_in = register_module("mlp_in", accel::Fp8Linear(hidden, 4 * hidden));
  mlp_out = register_module("mlp_out", accel::Fp8Linear(4 * hidden, hidden));
  // GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the two projections that add
  // into the residual stream scaled down by sqrt(2 x layers).
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  for (auto* linear : {qkv.get(), attention_out.get(), mlp_in.get(), mlp_out.get()}) {
    const bool residual = linear == attention_out.get() || linear == mlp_out.get();
    linear->weight.normal_(0.0, residual ? residual_std : 0.02);
    linear->bias.zero_();
  }
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& causal_mask) {
  const std::int64_t batch = x.size(0), time = x.size(1), hidden = x.size(2);
  const std::int64_t head_size = hidden / heads;

  // Causal self-attention, heads split by view and transpose: [batch, heads, time, head_size].
  const auto qkv_out = qkv(ln1(x)).chunk(3, /*dim=*/-1);
  auto split = [&](const torch::Tensor& t) {
    return t.view({batch, time, heads, head_size}).transpose(1, 2);
  };
  const torch::Tensor q = split(qkv_out[0]) * (1.0 / std::sqrt(static_cast<double>(head_size)));
  const torch::Tensor k = split(qkv_out[1]), v = split(qkv_out[2]);
  torch::Tensor scores = q.matmul(k.transpose(-2, -1));  // [batch, heads, time, time]
  scores = scores.masked_fill(causal_mask, -std::numeric_limits<double>::infinity());
  // Softmax in fp32 whatever autocast made the scores (bf16 under Bf16), then back.
  const torch::Tensor weights = torch::softmax(scores, -1, torch::kFloat).to(v.scalar_type());
  const torch::Tensor attended =
      weights.matmul(v).transpose(1, 2).contiguous().view({batch, time, hidden});
  const torch::Tensor h = x + attention_out(attended);

  return h + mlp_out(F::gelu(mlp_in(ln2(h))));
}

GptImpl::GptImpl(const ModelOptions& options_) : options(options_) {
  token_embedding = register_module(
      "token_embedding", torch::nn::Embedding(kVocabulary, options.hidden));
  position_embedding = register_module(
      "position_embedding", torch::nn::Embedding(options.context, options.hidden));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options.layers; ++i) {
    accel::Sharded<Block> block(options.hidden, options.heads, options.layers);
    blocks->push_back(block);
    block_at.push_back(block);
  }
  final_norm = register_module(
      "final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.hidden})));
  if (!options.tied_head)
    head = register_module("head",
                           torch::nn::Linear(torch::nn::LinearOptions(options.hidden, kVocabulary)
                                                 .bias(false)));
  torch::NoGradGuard no_grad;
  token_embedding->weight.normal_(0.0, 0.02);
  position_embedding->weight.normal_(0.0, 0.02);
  if (head) head->weight.normal_(0.0, 0.02);
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const std::int64_t time = tokens.size(1);
  TORCH_CHECK(time <= options.context, "gpt: a sequence of ", time,
              " bytes is longer than the model's context of ", options.context);
  const auto on = torch::TensorOptions().device(tokens.device());
  const torch::Tensor positions = torch::arange(time, on.dtype(torch::kLong));
  const torch::Tensor causal_mask = torch::ones({time, time}, on.dtype(torch::kBool)).triu(1);

  torch::Tensor x = token_embedding(tokens) + position_embedding(positions);
  for (auto& block : block_at) x = block->forward(x, causal_mask);
  x = final_norm(x);
  return options.tied_head ? F::linear(x, token_embedding->weight) : head(x);
}

ParamGroups weight_decay_groups(const torch::nn::Module& model) {
  std::unordered_set<const void*> matrices;
  for (const auto& module : model.modules())
    if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(module.get()))
      if (linear->weight.dim() == 2) matrices.insert(linear->weight.unsafeGetTensorImpl());
  ParamGroups groups;
  for (const torch::Tensor& p : model.parameters())
    (matrices.count(p.unsafeGetTensorImpl()) != 0 ? groups.decayed : groups.not_decayed)
        .push_back(p);
  return groups;
}

std::int64_t parameter_count(const torch::nn::Module& model) {
  std::int64_t count = 0;
  for (const torch::Tensor& p : model.parameters()) count += p.numel();
  return count;
}

namespace {
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

int sample_byte(const torch::Tensor& logits, double temperature, std::int64_t top_k,
                std::uint64_t& state) {
  const torch::Tensor values = logits.detach().to(torch::kCPU, torch::kDouble).contiguous();
  const double* v = values.data_ptr<double>();
  std::vector<int> order(static_cast<std::size_t>(values.numel()));
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by byte value, so the order is the same everywhere.
  std::stable_sort(order.begin(), order.end(), [v](int a, int b) { return v[a] > v[b]; });
  const std::size_t kept =
      top_k > 0 ? std::min(order.size(), static_cast<std::size_t>(top_k)) : order.size();
  std::vector<double> weights(kept);
  double total = 0;
  for (std::size_t i = 0; i < kept; ++i)
    total += weights[i] = std::exp((v[order[i]] - v[order[0]]) / temperature);
  const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53 * total;
  double sum = 0;
  for (std::size_t i = 0; i < kept; ++i)
    if ((sum += weights[i]) > u) return order[i];
  return order[kept - 1];
}

}  // namespace gpt
