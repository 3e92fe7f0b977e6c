"""The gpt example's model (examples/gpt/model.hpp, model.cpp) in Python torch, module for module
and in the same registration order, for bench/reference/ddp.py --model gpt and gpt_tp.py: token
and learned position embeddings, `layers` pre-norm blocks (a ModuleList) of causal
self-attention written from Linear + matmul + masked softmax and a 4x GELU MLP, a final
LayerNorm and a head tied to the token embedding. GPT-2's initialisation, as model.cpp: N(0,
0.02) weights and embeddings, zero biases, the two projections into the residual stream at
0.02 / sqrt(2 x layers).

Also the example's optimizer (AdamW with two param groups, examples/gpt/main.cpp) and its
schedule (accel::schedule::CosineWithWarmup: linear warmup, half a cosine to lr / 10)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCABULARY = 256  # bytes


class Block(nn.Module):
    """x + attention(ln1(x)), then + mlp(ln2(x)): gpt::BlockImpl."""

    def __init__(self, hidden, heads, layers):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attention_out = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp_in = nn.Linear(hidden, 4 * hidden)
        self.mlp_out = nn.Linear(4 * hidden, hidden)
        residual_std = 0.02 / math.sqrt(2.0 * layers)
        with torch.no_grad():
            for linear in (self.qkv, self.attention_out, self.mlp_in, self.mlp_out):
                residual = linear is self.attention_out or linear is self.mlp_out
                linear.weight.normal_(0.0, residual_std if residual else 0.02)
                linear.bias.zero_()

    def forward(self, x, causal_mask):
        head_size = x.size(-1) // self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        # The shape is q's: under tensor parallelism (gpt_tp.py) it holds this rank's heads over
        # the whole sequence, where x may hold this rank's positions only.
        batch, time, width = q.shape

        def split(t):  # [batch, heads, time, head_size]
            return t.view(batch, time, width // head_size, head_size).transpose(1, 2)

        q = split(q) * (1.0 / math.sqrt(head_size))
        k, v = split(k), split(v)
        scores = q.matmul(k.transpose(-2, -1)).masked_fill(causal_mask, float("-inf"))
        # Softmax in fp32 whatever autocast made the scores, then back (as model.cpp).
        weights = torch.softmax(scores, -1, dtype=torch.float).to(v.dtype)
        attended = weights.matmul(v).transpose(1, 2).contiguous().view(batch, time, width)
        h = x + self.attention_out(attended)
        return h + self.mlp_out(F.gelu(self.mlp_in(self.ln2(h))))


class Gpt(nn.Module):
    """gpt::GptImpl with its head tied to the token embedding."""

    def __init__(self, layers, hidden, heads, context):
        super().__init__()
        self.context = context
        self.token_embedding = nn.Embedding(VOCABULARY, hidden)
        self.position_embedding = nn.Embedding(context, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, layers) for _ in range(layers))
        self.final_norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.token_embedding.weight.normal_(0.0, 0.02)
            self.position_embedding.weight.normal_(0.0, 0.02)

    def forward(self, tokens):
        time = tokens.size(1)
        positions = torch.arange(time, device=tokens.device)
        causal_mask = torch.ones(time, time, dtype=torch.bool, device=tokens.device).triu(1)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x, causal_mask)
        return F.linear(self.final_norm(x), self.token_embedding.weight)


def weight_decay_groups(model):
    """gpt::weight_decay_groups: the weights of Linear layers (decayed) and everything else,
    each in registration order. By name, not identity: under FSDP (use_orig_params) the
    parameters are FSDP's views and a Linear's .weight between steps may be another tensor, and
    its names carry FSDP's wrapper prefix, which named_parameters() leaves out."""
    def plain(name):
        return name.replace("_fsdp_wrapped_module.", "")

    matrices = {plain(f"{name}.weight") for name, m in model.named_modules()
                if isinstance(m, nn.Linear)}
    decayed, not_decayed = [], []
    for name, p in model.named_parameters():
        (decayed if plain(name) in matrices else not_decayed).append(p)
    return decayed, not_decayed


def adamw(model, lr=6e-3, weight_decay=0.1, **implementation):
    """The example's AdamW: betas 0.9 / 0.95, weight decay on the Linear matrices only.
    implementation: torch's choice of step (fused=True, foreach=True, ...), ddp.py's to make."""
    decayed, not_decayed = weight_decay_groups(model)
    return torch.optim.AdamW([{"params": decayed, "weight_decay": weight_decay},
                              {"params": not_decayed, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), **implementation)


def cosine_with_warmup(optimizer, warmup_steps, total_steps, min_ratio=0.1):
    """accel::schedule::CosineWithWarmup (transformers' expression, the floor held from
    total_steps on) as a LambdaLR, stepped after each optimizer step."""
    def factor(step):
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        if step >= total_steps:
            return min_ratio
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - min_ratio) + min_ratio
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def make_batch(batch, seq):
    """Windows of seq + 1 random bytes: the input the first seq, the label the next byte at
    every position, flattened (accel_bench's make_batch)."""
    window = torch.randint(VOCABULARY, (batch, seq + 1))
    return window[:, :seq].contiguous(), window[:, 1:].reshape(-1)
