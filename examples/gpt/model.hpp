// A decoder-only transformer over bytes (GPT-2's layout, small): token and learned position
// embeddings, `layers` pre-norm blocks of causal self-attention and a 4x GELU MLP, a final
// LayerNorm, and a head tied to the token embedding (or a Linear of its own).
//
// Each block is an accel::Sharded<Block>: under Zero3 and Fsdp<FullShard|HybridShard> it is a
// unit of its own, its parameters gathered only for its forward and its backward (what the
// example shows: a unit whose forward takes two tensors), and under every other strategy it runs
// as it is. The embeddings, the final LayerNorm and the head form the model's root unit.
// The blocks' Linear layers are accel::Fp8Linear: a torch::nn::Linear that computes in fp8
// under an Fp8 Accelerator (a layer called by its parent's forward would otherwise stay bf16).
//
// With tensor parallelism (--tp) they are the split layers instead, Megatron-LM's layout: the
// fused query-key-value projection column-parallel by heads (accel::FusedOutputs{3}: each rank
// holds the query, key and value rows of its heads), the attention on this rank's heads, the
// output projection row-parallel; the MLP column then row. Unsplit (before prepare(), one
// process) they are Linear layers with the same parameters, names and initial numbers, so one
// model serves every degree. With sequence parallelism (--sequence-parallel) the LayerNorms and
// the residual stream between the blocks' split layers hold this rank's part of the sequence
// (accel::SequenceParallel, accel::ScatterSequence after the embeddings, accel::GatherSequence
// before the head).
#pragma once

#include <accel/parallel/sequence_parallel.hpp>
#include <accel/parallel/sharded.hpp>
#include <accel/parallel/tensor_parallel_linear.hpp>
#include <accel/precision/fp8_linear.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace gpt {

inline constexpr std::int64_t kVocabulary = 256;  // bytes

struct ModelOptions {
  std::int64_t layers = 4;
  std::int64_t hidden = 128;
  std::int64_t heads = 4;
  std::int64_t context = 128;  // positions: --seq
  bool tied_head = true;
  // The blocks' Linear layers split across a tensor-parallel group (heads must divide across
  // it), and with sequence_parallel the LayerNorms and the residual stream split by sequence.
  bool tensor_parallel = false;
  bool sequence_parallel = false;
};

// A pre-norm transformer block: x + attention(ln1(x)), then + mlp(ln2(x)).
struct BlockImpl : torch::nn::Module {
  BlockImpl(std::int64_t hidden, std::int64_t heads, std::int64_t layers,
            const ModelOptions& split = {});
  // x: [batch, time, hidden] (under sequence parallelism this rank's part of time);
  // causal_mask: [time, time] bool, true where a position may not look (above the diagonal).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal_mask);

  std::int64_t head_size;
  // torch::nn::LayerNorm, or its sequence-parallel mark.
  torch::nn::AnyModule ln1, ln2;
  // accel::Fp8Linear, or the split layers (ModelOptions::tensor_parallel).
  torch::nn::AnyModule qkv, attention_out, mlp_in, mlp_out;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const ModelOptions& options);
  // tokens: [batch, time] int64 byte values, time <= context; returns logits [batch, time, 256].
  torch::Tensor forward(const torch::Tensor& tokens);

  ModelOptions options;
  torch::nn::Embedding token_embedding{nullptr}, position_embedding{nullptr};
  torch::nn::ModuleList blocks{nullptr};       // registered: names, checkpoints, units
  std::vector<accel::Sharded<Block>> block_at;  // the same blocks, for typed calls
  torch::nn::AnyModule final_norm;  // as the blocks' LayerNorms
  torch::nn::Linear head{nullptr};  // only with tied_head == false
  // Only with sequence_parallel: the residual stream's entry into this rank's part of the
  // sequence, and its exit back to the whole.
  accel::ScatterSequence scatter_sequence{nullptr};
  accel::GatherSequence gather_sequence{nullptr};
};
TORCH_MODULE(Gpt);

// AdamW's two param groups: the 2-D weights of Linear layers, split or not (decayed), and
// everything else: biases, LayerNorm weights, the embeddings (not decayed). Each in registration
// order.
struct ParamGroups {
  std::vector<torch::Tensor> decayed, not_decayed;
};
ParamGroups weight_decay_groups(const torch::nn::Module& model);

std::int64_t parameter_count(const torch::nn::Module& model);

// One byte drawn from `logits` ([256], any device): softmax(logits / temperature) over the top_k
// largest (all with top_k 0), with a uniform number from `state` (splitmix64), so that the same
// state gives the same byte on every machine and libtorch version.
int sample_byte(const torch::Tensor& logits, double temperature, std::int64_t top_k,
                std::uint64_t& state);

}  // namespace gpt
