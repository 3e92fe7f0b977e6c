"""PyTorch's own tensor parallelism on the gpt example's model (bench/reference/gpt_model.py), for
bench/tensor_parallel.sh: torch.distributed.tensor.parallel's ColwiseParallel / RowwiseParallel
(and with --sequence-parallel its SequenceParallel) applied by parallelize_module over a
DeviceMesh of --nproc ranks on Gloo, as the example's `gpt --tp N` splits its blocks:

    qkv            ColwiseParallel   (this rank's heads: their query, key and value rows)
    attention_out  RowwiseParallel   (the heads' parts summed over the mesh)
    mlp_in         ColwiseParallel
    mlp_out        RowwiseParallel
    ln1, ln2, final_norm  SequenceParallel, with --sequence-parallel (else replicated)

The embeddings and the tied head stay replicated, as in the example. Under --sequence-parallel
the residual stream holds this rank's 1/N of the positions: the embeddings' sum is scattered
along the sequence (its gradient all-gathered) and the final LayerNorm's output gathered before
the head (its gradient kept for this rank's part), as accel::ScatterSequence / GatherSequence.

The qkv weight is one [3 x hidden, hidden] Linear (query, key, value, each in head order), and
ColwiseParallel gives rank i a contiguous 1/N of its rows: the rows are first put in the order
[q_0, k_0, v_0, q_1, k_1, v_1, ...] (q_i: rank i's heads' query rows) so that rank i's rows are
the query, key and value of its own heads and the model computes what the unsplit one does, as
accel::FusedOutputs{3} arranges it.

Training is the example's: cross entropy on the next byte, the global gradient norm clipped to
--clip (1.0, the example's default) every step, AdamW (betas 0.9 / 0.95, weight decay on the
Linear matrices, fused where this torch has it on CPU) and its warmup-cosine schedule, on random
bytes (the same batch on every rank of the mesh, as the example's tensor-parallel group reads
one batch). The parameters are a mix of DTensors (the split layers, and the LayerNorms under
--sequence-parallel) and plain tensors (the replicated rest): the clipping, the optimizer step
and zero_grad run under torch's implicit_replication(), which treats the plain ones as
replicated. The SequenceParallel LayerNorms' gradients are summed over the mesh after backward
(Megatron-LM's all-reduce of them; DTensor leaves them Partial).

    python3 gpt_tp.py --nproc 2 [--sequence-parallel] [--layers L] [--hidden H] [--heads A]
                      [--seq S] [--batch B] [--steps N] [--warmup N] [--threads T] [--breakdown]

--batch is the mesh's batch (the global batch). --warmup steps run untimed, then --steps timed.
Without RANK in the environment it starts --nproc copies of itself (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and waits for them. Last line, from rank 0: tokens_per_s=<t>
steps_per_s=<x> peak_rss_mb=<rank 0's VmHWM> rank_peak_rss_mb=<a,b,...> optimizer_impl=<...>
sequence_parallel=<...> first_loss=<the first step's loss> last_loss=<the last step's> (the
same on any --nproc, to rounding); with --breakdown, a line per rank of milliseconds per step
before it."""
import argparse
import os
import socket
import subprocess
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=8, help="the mesh's batch: the global batch")
    p.add_argument("--steps", type=int, default=4, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--breakdown", action="store_true")
    a = p.parse_args()
    if a.nproc < 1 or a.heads % a.nproc or a.hidden % a.heads:
        p.error(f"--nproc {a.nproc} must divide --heads {a.heads}, which must divide --hidden "
                f"{a.hidden}")
    if a.sequence_parallel and a.seq % a.nproc:
        p.error(f"--sequence-parallel: --nproc {a.nproc} does not divide --seq {a.seq}")
    return a


def launch(a):
    """--nproc copies of this script with torchrun's variables; if one fails, stop the others."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    children = []
    for rank in range(a.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(a.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        children.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    status = 0
    pending = list(children)
    while pending:
        for child in list(pending):
            code = child.poll()
            if code is None:
                continue
            pending.remove(child)
            if code != 0 and status == 0:
                status = code
                for other in pending:
                    other.terminate()
        time.sleep(0.05)
    return status


def peak_rss_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    return -1.0


def head_major_qkv(block, tp):
    """Rows of the fused qkv as [q_0, k_0, v_0, q_1, ...], q_i: rank i's heads' query rows."""
    import torch
    hidden = block.qkv.in_features
    part = hidden // tp
    order = [which * hidden + rank * part + row
             for rank in range(tp) for which in range(3) for row in range(part)]
    index = torch.tensor(order)
    with torch.no_grad():
        block.qkv.weight.copy_(block.qkv.weight[index])
        block.qkv.bias.copy_(block.qkv.bias[index])


def train(a):
    # OpenBLAS reads its pool's size as it loads, before torch's own limit applies.
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.experimental import implicit_replication
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    import gpt_model

    torch.set_num_threads(a.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # env:// rendezvous on torch's TCP store, without libuv (Debian's torch is built without it).
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    sp = a.sequence_parallel

    torch.manual_seed(0)
    net = gpt_model.Gpt(a.layers, a.hidden, a.heads, a.seq)
    for block in net.blocks:
        head_major_qkv(block, world)
        # Under sequence parallelism the block's LayerNorms read this rank's positions and the
        # column layers all-gather them; the row layers reduce-scatter back along the sequence.
        plan = {
            "qkv": ColwiseParallel(input_layouts=Shard(1)) if sp else ColwiseParallel(),
            "attention_out": RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel(),
            "mlp_in": ColwiseParallel(input_layouts=Shard(1)) if sp else ColwiseParallel(),
            "mlp_out": RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel(),
        }
        if sp:
            plan.update({"ln1": SequenceParallel(), "ln2": SequenceParallel()})
        parallelize_module(block, mesh, plan)
    if sp:
        parallelize_module(net, mesh, {"final_norm": SequenceParallel()})

    def forward(tokens):
        time_ = tokens.size(1)
        positions = torch.arange(time_)
        causal_mask = torch.ones(time_, time_, dtype=torch.bool).triu(1)
        x = net.token_embedding(tokens) + net.position_embedding(positions)
        if sp:  # this rank's positions; backward all-gathers their gradient
            x = DTensor.from_local(x, mesh, [Replicate()], run_check=False) \
                .redistribute(mesh, [Shard(1)]).to_local()
        for block in net.blocks:
            x = block(x, causal_mask)  # this rank's heads: the width of its qkv slice
        y = net.final_norm(x)
        if sp:  # the whole sequence for the replicated head; backward keeps this rank's part
            y = y.redistribute(mesh, [Replicate()]).to_local()
        return F.linear(y, net.token_embedding.weight)

    implementation, optimizer_impl = {}, "torch-default"
    try:  # fused AdamW on CPU where this torch has it (2.x), as bench/reference/ddp.py
        probe = torch.nn.Parameter(torch.zeros(2))
        probe.grad = torch.ones(2)
        torch.optim.AdamW([probe], fused=True).step()
        implementation, optimizer_impl = {"fused": True}, "fused"
    except (RuntimeError, TypeError, ValueError):
        implementation, optimizer_impl = {"foreach": True}, "foreach"
    optimizer = gpt_model.adamw(net, **implementation)
    schedule = gpt_model.cosine_with_warmup(optimizer, a.warmup, a.warmup + a.steps)
    parameters = list(net.parameters())

    torch.manual_seed(1000)  # the same batches on every rank: one tensor-parallel group
    batches = [gpt_model.make_batch(a.batch, a.seq) for _ in range(4)]
    clock = time.perf_counter
    parts = [0.0, 0.0, 0.0, 0.0]  # forward, backward, clip, optimizer step + zero_grad
    losses = []  # every step's loss: the same on any --nproc (to rounding) when the split is right

    def step(i, timed):
        x, y = batches[i % len(batches)]
        t0 = clock()
        logits = forward(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y)
        t1 = clock()
        losses.append(loss.detach())
        loss.backward()
        # The SequenceParallel LayerNorms' gradients come out Partial (each rank's from its own
        # positions): summed over the mesh here, as Megatron-LM does after backward. Left
        # Partial, clip_grad_norm_ and the fused AdamW step train other numbers than one
        # process does (the last loss differs from --nproc 1's in the fourth digit).
        for prm in parameters:
            if isinstance(prm.grad, DTensor) and prm.grad.placements[0].is_partial():
                prm.grad = prm.grad.redistribute(placements=[Replicate()])
        t2 = clock()
        with implicit_replication():
            torch.nn.utils.clip_grad_norm_(parameters, a.clip)
            t3 = clock()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=False)  # in place, as accel's zero_grad
        if timed:
            for n, v in enumerate((t1 - t0, t2 - t1, t3 - t2, clock() - t3)):
                parts[n] += v

    for i in range(a.warmup):
        step(i, False)
    dist.barrier()
    start = clock()
    for i in range(a.steps):
        step(a.warmup + i, True)
    elapsed = clock() - start
    dist.barrier()
    tokens_per_s = a.steps * a.batch * a.seq / elapsed
    if a.breakdown:
        mine = torch.tensor([v / a.steps for v in parts] + [elapsed / a.steps], dtype=torch.float64)
        rows = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(rows, mine)
        if rank == 0:
            for r, v in enumerate(rows):
                v = [1e3 * float(x) for x in v]
                print(f"breakdown: rank={r} forward={v[0]:.1f} backward={v[1]:.1f} "
                      f"clip={v[2]:.1f} optimizer_step={v[3]:.1f} other={v[4] - sum(v[:4]):.1f} "
                      f"total={v[4]:.1f} (ms per step)", flush=True)
    peaks = [None] * world
    dist.all_gather_object(peaks, peak_rss_mb())
    if rank == 0:
        print(f"tokens_per_s={tokens_per_s:.1f} steps_per_s={a.steps / elapsed:.4f} "
              f"peak_rss_mb={peaks[0]:.1f} rank_peak_rss_mb={','.join(f'{p:.1f}' for p in peaks)} "
              f"optimizer_impl={optimizer_impl} sequence_parallel={sp} "
              f"first_loss={losses[0].item():.6f} "
              f"last_loss={losses[-1].item():.6f}",
              flush=True)
    # Every collective is done (the all_gather_object above): leave without the teardown, in
    # which torch 2.6's Gloo process group can hang one rank at exit (as bench/reference/ddp.py).
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    a = parse()
    if "RANK" not in os.environ:
        return launch(a)
    return train(a)


if __name__ == "__main__":
    sys.exit(main())
