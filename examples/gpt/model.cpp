#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

namespace gpt {

namespace F = torch::nn::functional;

namespace {

torch::nn::AnyModule layer_norm(std::int64_t hidden, bool sequence_parallel) {
  const torch::nn::LayerNormOptions options({hidden});
  if (sequence_parallel)
    return torch::nn::AnyModule(accel::SequenceParallel<torch::nn::LayerNorm>(options));
  return torch::nn::AnyModule(torch::nn::LayerNorm(options));
}

// A Linear layer of the block: accel::Fp8Linear, or split by output features (column) or input
// features (row). Each makes the same draws as torch::nn::Linear.
enum class Split { none, column, row };
torch::nn::AnyModule linear(std::int64_t in, std::int64_t out, Split split,
                            std::int64_t fused = 1) {
  if (split == Split::column)
    return torch::nn::AnyModule(accel::ColumnParallelLinear(torch::nn::LinearOptions(in, out),
                                                            accel::FusedOutputs{fused}));
  if (split == Split::row) return torch::nn::AnyModule(accel::RowParallelLinear(in, out));
  return torch::nn::AnyModule(accel::Fp8Linear(in, out));
}

// The parameter by value: a handle to the module's own tensor (the dictionary is a copy).
torch::Tensor parameter(torch::nn::AnyModule& module, const char* name) {
  return module.ptr()->named_parameters(/*recurse=*/false)[name];
}

}  // namespace

BlockImpl::BlockImpl(std::int64_t hidden, std::int64_t heads, std::int64_t layers,
                     const ModelOptions& split)
    : head_size(hidden / heads) {
  const bool tp = split.tensor_parallel;
  ln1 = layer_norm(hidden, split.sequence_parallel);
  register_module("ln1", ln1.ptr());
  // The fused projection as three outputs of `hidden` rows each, in head order: split, each rank
  // holds the query, key and value rows of its own heads.
  qkv = linear(hidden, 3 * hidden, tp ? Split::column : Split::none, 3);
  register_module("qkv", qkv.ptr());
  attention_out = linear(hidden, hidden, tp ? Split::row : Split::none);
  register_module("attention_out", attention_out.ptr());
  ln2 = layer_norm(hidden, split.sequence_parallel);
  register_module("ln2", ln2.ptr());
  mlp_in = linear(hidden, 4 * hidden, tp ? Split::column : Split::none);
  register_module("mlp_in", mlp_in.ptr());
  mlp_out = linear(4 * hidden, hidden, tp ? Split::row : Split::none);
  register_module("mlp_out", mlp_out.ptr());
  // GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the two projections that add
  // into the residual stream scaled down by sqrt(2 x layers).
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  for (auto* linear : {&qkv, &attention_out, &mlp_in, &mlp_out}) {
    const bool residual = linear == &attention_out || linear == &mlp_out;
    parameter(*linear, "weight").normal_(0.0, residual ? residual_std : 0.02);
    parameter(*linear, "bias").zero_();
  }
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& causal_mask) {
  // Causal self-attention, heads split by view and transpose: [batch, heads, time, head_size].
  // Split, the projection returns this rank's heads (and, under sequence parallelism, the whole
  // sequence): the local head count and the time are read from its output.
  const torch::Tensor projected = qkv.forward(ln1.forward(x));
  const std::int64_t batch = projected.size(0), time = projected.size(1);
  const std::int64_t width = projected.size(2) / 3, heads = width / head_size;
  const auto qkv_out = projected.chunk(3, /*dim=*/-1);
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
      weights.matmul(v).transpose(1, 2).contiguous().view({batch, time, width});
  const torch::Tensor h = x + attention_out.forward(attended);

  return h + mlp_out.forward(F::gelu(mlp_in.forward(ln2.forward(h))));
}

GptImpl::GptImpl(const ModelOptions& options_) : options(options_) {
  token_embedding = register_module(
      "token_embedding", torch::nn::Embedding(kVocabulary, options.hidden));
  position_embedding = register_module(
      "position_embedding", torch::nn::Embedding(options.context, options.hidden));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options.layers; ++i) {
    accel::Sharded<Block> block(options.hidden, options.heads, options.layers, options);
    blocks->push_back(block);
    block_at.push_back(block);
  }
  final_norm = layer_norm(options.hidden, options.sequence_parallel);
  register_module("final_norm", final_norm.ptr());
  if (options.sequence_parallel) {
    scatter_sequence = register_module("scatter_sequence", accel::ScatterSequence());
    gather_sequence = register_module("gather_sequence", accel::GatherSequence());
  }
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
  if (scatter_sequence) x = scatter_sequence(x);
  for (auto& block : block_at) x = block->forward(x, causal_mask);
  x = final_norm.forward(x);
  if (gather_sequence) x = gather_sequence(x);
  return options.tied_head ? F::linear(x, token_embedding->weight) : head(x);
}

ParamGroups weight_decay_groups(const torch::nn::Module& model) {
  std::unordered_set<const void*> matrices;
  auto add = [&](const torch::Tensor& weight) {
    if (weight.dim() == 2) matrices.insert(weight.unsafeGetTensorImpl());
  };
  for (const auto& module : model.modules()) {
    if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(module.get()))
      add(linear->weight);
    else if (const auto* column =
                 dynamic_cast<const accel::ColumnParallelLinearImpl*>(module.get()))
      add(column->weight);
    else if (const auto* row = dynamic_cast<const accel::RowParallelLinearImpl*>(module.get()))
      add(row->weight);
  }
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
