#!/usr/bin/python3
"""PyTorch reference for accel_bench: the same flags, the same models (parameter for parameter,
in the same registration order), the same synthetic data sizes and optimizer (SGD, or Adam with
--optimizer adam; the gpt model: the example's AdamW and schedule), trained with
torch.nn.parallel.DistributedDataParallel over Gloo, one thread per rank; --strategy zero1 shards
the optimizer state with ZeroRedundancyOptimizer, and --strategy fsdp-full | fsdp-grad-op |
fsdp-no-shard trains with FullyShardedDataParallel (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD; torch
2.x: on Debian 12's torch 1.13 under Python 3.11 torch.distributed.fsdp does not import, and the
run prints "skipped: <why>" as its last line instead of a result), each child of the model's
Sequential (each transformer block) its own FSDP unit, as accel's Zero3 cuts it.

    /usr/bin/python3 bench/reference/ddp.py [--nproc N] [--precision fp32|bf16] [--accum 1|2|4]
        [--model mlp|xfmr|tiny|gpt] [--hidden H] [--layers L] [--batch B] [--seq S] [--heads A]
        [--steps N] [--warmup N] [--threads T] [--bucket-mb MB] [--reference best|defaults]
        [--optimizer-impl auto|fused|foreach|for-loop|default] [--[no-]bucket-views]
        [--[no-]limit-all-gathers] [--backward-prefetch pre|post|none] [--[no-]forward-prefetch]

--reference best (the default) runs PyTorch as a careful user would: Adam's and AdamW's fused step
where this torch has one for the device (torch 2.x on CPU; found by trying one step on a probe
parameter), else their foreach step, and SGD's default step (--optimizer-impl auto: on CPU SGD's
fused and foreach steps are no faster); DDP with gradient_as_bucket_view=True;
FSDP with limit_all_gathers, backward_prefetch=BACKWARD_PRE and forward_prefetch=True, where this
torch's FSDP has them. --reference defaults runs PyTorch's own defaults: no implementation asked of
the optimizer (the for-loop step on CPU), gradient_as_bucket_view=False, FSDP's own defaults.
Each setting has its own flag, which wins over --reference. FSDP keeps use_orig_params=True in
both (the gpt model's AdamW has two param groups). The heap is the caller's: bench/run.sh sets
MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ for --reference best, as accel tunes its own.

--model gpt is the gpt example's model (bench/reference/gpt_model.py, module for module with
examples/gpt/model.cpp) on random bytes, with AdamW in two param groups and a warmup-cosine
schedule, as accel_bench --model gpt.

Last line, from rank 0: steps_per_s=<x> samples_per_s=<y> [tokens_per_s=<t>] peak_rss_mb=<z>
rank_peak_rss_mb=<a,b,...> (as accel_bench), then what ran: reference=<best|defaults>
optimizer_impl=<fused|foreach|for-loop|torch-default> and bucket_views=<True|False> (DDP) or
fsdp=<setting:value,...> (FSDP).

With --nproc 1 the model is trained by a plain loop, without DDP or a process group: what a
PyTorch user (and Accelerate, and accel) runs on one process. With --nproc N > 1 this script
starts N copies of itself (RANK, WORLD_SIZE, ... in their environment, like torchrun) and waits
for them; if one fails, the others are stopped. Run it with Debian's /usr/bin/python3
(python3-torch), not a Python without torch.
"""
import argparse
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def _early_setup(argv):
    """Before torch loads OpenBLAS, whose own thread pool (as large as the machine)
    torch.set_num_threads does not limit, and before any thread starts, so that every thread
    inherits the pinning. parse() checks the same flags properly afterwards."""
    def value(flag, default):
        for i, arg in enumerate(argv):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return default
    os.environ["OPENBLAS_NUM_THREADS"] = value("--threads", "1")
    nproc = value("--nproc", os.environ.get("ACCEL_NPROC", "1"))
    if "--pin" in argv and ("RANK" in os.environ or nproc == "1"):
        os.sched_setaffinity(0, {int(os.environ.get("LOCAL_RANK", "0")) % os.cpu_count()})


_early_setup(sys.argv[1:])
# --model gpt imports bench/reference/gpt_model.py: no __pycache__ left in the source tree.
sys.dont_write_bytecode = True

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=int(os.environ.get("ACCEL_NPROC", "1")))
    p.add_argument("--strategy", default="ddp",
                   choices=["ddp", "zero1", "fsdp-full", "fsdp-grad-op", "fsdp-no-shard"],
                   help="ddp (PyTorch's DistributedDataParallel), or zero1: DDP with the "
                        "optimizer wrapped in torch.distributed.optim.ZeroRedundancyOptimizer "
                        "(optimizer state sharded, as ZeRO stage 1)")
    p.add_argument("--optimizer", default=None, choices=["sgd", "adam", "adamw"],
                   help="sgd (lr 0.01) or adam (lr 0.001), as accel_bench; adamw (the gpt "
                        "example's, and gpt's default and only one)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="cuda: each rank on cuda:<local rank>, DDP over NCCL even at world size 1 "
                        "(the reference for accel on a GPU, scripts/device-check.sh)")
    p.add_argument("--checkpoint", default="",
                   help="after training, time torch.save of the model's and the optimizer's "
                        "state_dict into this folder from rank 0 (as Accelerate's save_state "
                        "under DDP), then torch.load and load_state_dict on every rank; prints "
                        "checkpoint: save_s=... load_s=... bytes=...")
    p.add_argument("--accum", type=int, default=1, choices=[1, 2, 4])
    p.add_argument("--model", default="mlp", choices=["mlp", "tiny", "xfmr", "gpt"])
    p.add_argument("--hidden", type=int, default=0)
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--seq", type=int, default=0)
    p.add_argument("--heads", type=int, default=0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--threads", type=int, default=1,
                   help="threads per rank: torch.set_num_threads and OpenBLAS's own pool")
    p.add_argument("--pin", action="store_true", help="pin rank r to core r (mod the core count)")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--small-bucket-kb", type=float, default=0.0,
                   help="accepted so that one command line runs both sides; PyTorch's DDP "
                        "sends every bucket through c10d")
    p.add_argument("--no-heap-tuning", action="store_true",
                   help="accepted so that one command line runs both sides; PyTorch's heap "
                        "is its environment's (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_)")
    p.add_argument("--compress", default="none", choices=["none", "fp16", "bf16"],
                   help="DDP comm hook fp16_compress_hook / bf16_compress_hook")
    p.add_argument("--comm-grads", default="none", choices=["none", "fp16", "bf16"],
                   help="FSDP: MixedPrecision(reduce_dtype=...), gradients reduce-scattered in "
                        "it (accel_bench's --comm-grads)")
    p.add_argument("--comm-params", default="none", choices=["none", "fp16", "bf16"],
                   help="FSDP: MixedPrecision(param_dtype=...), parameters all-gathered in it; "
                        "FSDP then computes in it too, where accel's --comm-params only rounds "
                        "the gathered fp32 weights")
    p.add_argument("--reference", default="best", choices=["best", "defaults"],
                   help="best (default): PyTorch as a careful user runs it (fused or foreach "
                        "optimizer step, bucket views, FSDP's prefetching); defaults: PyTorch's "
                        "own defaults. The flags below each override one setting")
    p.add_argument("--optimizer-impl", default=None,
                   choices=["auto", "fused", "foreach", "for-loop", "default"],
                   help="the optimizer's step: auto (--reference best: Adam and AdamW fused "
                        "where this torch runs it on the device, else foreach; SGD torch's "
                        "default), fused (fused=True), foreach "
                        "(foreach=True), for-loop (foreach=False), default (--reference "
                        "defaults: nothing asked, torch's choice: the for-loop on CPU)")
    p.add_argument("--bucket-views", dest="bucket_views", action="store_true", default=None,
                   help="gradient_as_bucket_view=True (--reference best)")
    p.add_argument("--no-bucket-views", dest="bucket_views", action="store_false",
                   help="gradient_as_bucket_view=False (PyTorch's default)")
    p.add_argument("--limit-all-gathers", dest="limit_all_gathers", action="store_true",
                   default=None, help="FSDP: limit_all_gathers=True (--reference best)")
    p.add_argument("--no-limit-all-gathers", dest="limit_all_gathers", action="store_false",
                   help="FSDP: limit_all_gathers=False")
    p.add_argument("--backward-prefetch", default=None, choices=["pre", "post", "none"],
                   help="FSDP: backward_prefetch=BACKWARD_PRE (--reference best), BACKWARD_POST "
                        "or None")
    p.add_argument("--forward-prefetch", dest="forward_prefetch", action="store_true",
                   default=None, help="FSDP: forward_prefetch=True (--reference best)")
    p.add_argument("--no-forward-prefetch", dest="forward_prefetch", action="store_false",
                   help="FSDP: forward_prefetch=False (FSDP's default)")
    p.add_argument("--breakdown", action="store_true",
                   help="also time forward, backward (DDP's all-reduce waits included), "
                        "optimizer step and zero_grad per step, printed before the last line")
    a = p.parse_args()
    defaults = {
        "mlp": dict(hidden=1024, layers=4, batch=64, steps=60),
        "tiny": dict(hidden=32, layers=1, batch=8, steps=3000),
        "xfmr": dict(hidden=128, layers=2, batch=16, seq=32, heads=4, steps=60),
        "gpt": dict(hidden=128, layers=4, batch=8, seq=64, heads=4, steps=20),
    }[a.model]
    for key, value in defaults.items():
        if not getattr(a, key):
            setattr(a, key, value)
    if a.warmup < 0:
        a.warmup = max(3, a.steps // 10)
    if a.model in ("xfmr", "gpt") and a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    if a.model == "gpt" and a.strategy == "zero1":
        p.error("--strategy zero1 shards one optimizer's state; --model gpt's AdamW has two "
                "param groups: use ddp or an fsdp strategy")
    if (a.comm_grads != "none" or a.comm_params != "none") and not a.strategy.startswith("fsdp"):
        p.error("--comm-grads and --comm-params set FSDP's MixedPrecision: use an fsdp strategy "
                "(DDP compresses with --compress)")
    if a.optimizer is None:
        a.optimizer = "adamw" if a.model == "gpt" else "sgd"
    if (a.optimizer == "adamw") != (a.model == "gpt"):
        p.error(f"--optimizer {a.optimizer} with --model {a.model}: gpt trains with the "
                "example's AdamW (--optimizer adamw), the other models with sgd or adam")
    if a.nproc < 1:
        p.error("--nproc must be at least 1")
    # --reference fills in what no flag set; None left for FSDP's settings means FSDP's default.
    best = a.reference == "best"
    if a.optimizer_impl is None:
        a.optimizer_impl = "auto" if best else "default"
    if a.bucket_views is None:
        a.bucket_views = best
    if best:
        for key, value in (("limit_all_gathers", True), ("backward_prefetch", "pre"),
                           ("forward_prefetch", True)):
            if getattr(a, key) is None:
                setattr(a, key, value)
    return a


# --- Models: the same as accel_bench.cpp ---------------------------------------------------------

class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, 4 * hidden)
        self.ff2 = nn.Linear(4 * hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        parts = self.qkv(x).view(b, s, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = parts[0], parts[1], parts[2]  # [b, heads, s, d]
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d)), -1)
        mixed = torch.matmul(weights, v).transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.proj(mixed))
        return self.norm2(x + self.ff2(torch.relu(self.ff1(x))))


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.blocks = nn.ModuleList(Block(a.hidden, a.heads) for _ in range(a.layers))
        self.head = nn.Linear(a.hidden, 10)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(1))


class Mlp(nn.Module):
    def __init__(self, a):
        super().__init__()
        width = 784 if a.model == "mlp" else 32
        layers = []
        for _ in range(a.layers):
            layers += [nn.Linear(width, a.hidden), nn.ReLU()]
            width = a.hidden
        layers.append(nn.Linear(width, 10))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def optimizer_implementation(a, optimizer_class, device):
    """The keyword arguments that ask optimizer_class for --optimizer-impl's step, and its name
    for the result line. auto tries fused=True, then foreach=True, on a probe parameter (one step
    each): torch 1.13's Adam has fused=True for CUDA only, its AdamW and SGD have no fused, torch
    2.x runs fused on CPU too. auto leaves SGD (without momentum: one add_ per parameter) at
    torch's default step, which on CPU at one thread measured no slower than its fused and
    foreach steps (torch 2.6; faster on tiny). An explicit choice that this torch refuses fails
    here."""
    if a.optimizer_impl == "default" or (a.optimizer_impl == "auto"
                                         and optimizer_class is torch.optim.SGD):
        return {}, "for-loop" if device.type == "cpu" else "torch-default"
    if a.optimizer_impl == "for-loop":
        return {"foreach": False}, "for-loop"

    def runs(kwargs):
        try:
            probe = nn.Parameter(torch.zeros(4, device=device))
            optimizer = optimizer_class([probe], lr=0.01, **kwargs)
            probe.grad = torch.ones_like(probe)
            optimizer.step()
            return None
        except (TypeError, RuntimeError, ValueError) as error:
            return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"

    wanted = ["fused", "foreach"] if a.optimizer_impl == "auto" else [a.optimizer_impl]
    for name in wanted:
        why = runs({name: True})
        if why is None:
            return {name: True}, name
        if a.optimizer_impl != "auto":
            sys.exit(f"ddp.py: --optimizer-impl {name}: torch {torch.__version__}'s "
                     f"{optimizer_class.__name__} does not run {name}=True on {device.type} "
                     f"({why}); use --optimizer-impl auto")
    return {}, "for-loop" if device.type == "cpu" else "torch-default"


def fsdp_settings(a):
    """FSDP's keyword arguments for the --limit-all-gathers, --backward-prefetch and
    --forward-prefetch settings this torch's FSDP has (one it lacks is left out), and their
    effective values (FSDP's defaults for the ones not set) for the result line."""
    import inspect
    from torch.distributed.fsdp import BackwardPrefetch, FullyShardedDataParallel
    accepted = inspect.signature(FullyShardedDataParallel.__init__).parameters
    prefetch = {"pre": BackwardPrefetch.BACKWARD_PRE, "post": BackwardPrefetch.BACKWARD_POST,
                "none": None}
    wanted = {"limit_all_gathers": a.limit_all_gathers,
              "backward_prefetch": None if a.backward_prefetch is None
              else prefetch[a.backward_prefetch],
              "forward_prefetch": a.forward_prefetch}
    chosen = {"backward_prefetch": a.backward_prefetch}
    kwargs, shown = {}, []
    for key, value in wanted.items():
        if key not in accepted:
            shown.append(f"{key}:absent")
            continue
        if value is not None or chosen.get(key) == "none":
            kwargs[key] = value
        else:
            value = accepted[key].default
        text = getattr(value, "name", value)
        shown.append(f"{key}:{text}")
    return kwargs, ",".join(shown)


def fsdp_unavailable():
    """Why this torch cannot run the FSDP benchmark on CPU, or None when it can."""
    try:
        import inspect
        from torch.distributed.fsdp import FullyShardedDataParallel
    except Exception as error:  # torch 1.13 under Python 3.11: a dataclass error at import
        return (f"torch {torch.__version__}: torch.distributed.fsdp does not import "
                f"({type(error).__name__}: {str(error).splitlines()[0]})")
    wanted = {"device_id", "use_orig_params"}
    missing = wanted - set(inspect.signature(FullyShardedDataParallel.__init__).parameters)
    if missing:
        return (f"torch {torch.__version__}: FullyShardedDataParallel has no "
                f"{', '.join(sorted(missing))} (CPU units, and per-parameter AdamW groups)")
    return None


def make_input(a):
    if a.model == "xfmr":
        return torch.randn(a.batch, a.seq, a.hidden)
    return torch.randn(a.batch, 784 if a.model == "mlp" else 32)


def peak_rss_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    return -1.0


def checkpoint(a, net, optimizer, rank, world):
    """torch.save / torch.load of the training state, timed from barrier to barrier."""
    import torch.distributed as dist

    def barrier():
        if world > 1:
            dist.barrier()

    os.makedirs(a.checkpoint, exist_ok=True)
    path = os.path.join(a.checkpoint, "state.pt")
    barrier()
    start = time.perf_counter()
    if rank == 0:
        torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict()}, path)
    barrier()
    save_s = time.perf_counter() - start
    barrier()
    start = time.perf_counter()
    state = torch.load(path, map_location="cpu")
    net.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    barrier()
    load_s = time.perf_counter() - start
    if rank == 0:
        print(f"checkpoint: save_s={save_s:.3f} load_s={load_s:.3f} "
              f"bytes={os.path.getsize(path)}", flush=True)


def train(a):
    import torch.distributed as dist

    torch.set_num_threads(a.threads)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = a.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        import tempfile
        init = os.environ.get("ACCEL_BENCH_INIT") or f"file://{tempfile.mkdtemp()}/store"
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    elif world > 1:
        dist.init_process_group("gloo", init_method=os.environ["ACCEL_BENCH_INIT"],
                                rank=rank, world_size=world)

    torch.manual_seed(0)
    if a.model == "gpt":
        import gpt_model
        net = gpt_model.Gpt(a.layers, a.hidden, a.heads, a.seq).to(device)
    else:
        net = (Transformer(a) if a.model == "xfmr" else Mlp(a)).to(device)
    parameters = sum(p.numel() for p in net.parameters())
    model = net
    settings_text = ""  # what the result line says of DDP's or FSDP's settings
    fsdp = a.strategy.startswith("fsdp") and world > 1
    if fsdp:
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        sharding = {"fsdp-full": ShardingStrategy.FULL_SHARD,
                    "fsdp-grad-op": ShardingStrategy.SHARD_GRAD_OP,
                    "fsdp-no-shard": ShardingStrategy.NO_SHARD}[a.strategy]
        # Units as accel's Zero3 makes them: each child of a Sequential (the Linear layers), or
        # each block (accel::Sharded in accel_bench and the gpt example), the rest in the root.
        units = {nn.Linear} if a.model not in ("xfmr", "gpt") else {type(b) for b in net.blocks}
        dtypes = {"none": None, "fp16": torch.float16, "bf16": torch.bfloat16}
        mixed = None
        if a.comm_grads != "none" or a.comm_params != "none":
            from torch.distributed.fsdp import MixedPrecision
            mixed = MixedPrecision(param_dtype=dtypes[a.comm_params],
                                   reduce_dtype=dtypes[a.comm_grads])
        prefetching, settings_text = fsdp_settings(a)
        settings_text = f" fsdp=use_orig_params:True,{settings_text}"
        model = FullyShardedDataParallel(net, sharding_strategy=sharding,
                                         auto_wrap_policy=ModuleWrapPolicy(units),
                                         device_id=torch.device("cpu"), use_orig_params=True,
                                         mixed_precision=mixed, **prefetching)
        net = model
    elif world > 1 or cuda:
        model = nn.parallel.DistributedDataParallel(
            net, device_ids=[device.index] if cuda else None, bucket_cap_mb=a.bucket_mb,
            gradient_as_bucket_view=a.bucket_views)
        settings_text = f" bucket_views={a.bucket_views}"
        if a.compress != "none":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            model.register_comm_hook(None, default_hooks.fp16_compress_hook if a.compress == "fp16"
                                     else default_hooks.bf16_compress_hook)
    optimizer_class, lr = (torch.optim.Adam, 0.001) if a.optimizer == "adam" else (torch.optim.SGD, 0.01)
    if a.model == "gpt":
        optimizer_class = torch.optim.AdamW
    implementation, optimizer_impl = optimizer_implementation(a, optimizer_class, device)
    schedule = None
    if a.model == "gpt":
        # Over the wrapped model's parameters (FSDP's use_orig_params keeps them per parameter,
        # so the two weight-decay groups survive sharding); warmup over the untimed steps, the
        # cosine's end at the last timed one (accel_bench's GptSchedule).
        import gpt_model
        optimizer = gpt_model.adamw(net, **implementation)
        schedule = gpt_model.cosine_with_warmup(optimizer, a.warmup, a.warmup + a.steps)
    elif a.strategy == "zero1" and world > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        optimizer = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=optimizer_class,
                                            lr=lr, **implementation)
    else:
        optimizer = optimizer_class(net.parameters(), lr=lr, **implementation)
    if rank == 0:
        print(f"ddp.py: model={a.model} parameters={parameters} world_size={world} "
              f"strategy={a.strategy} optimizer={a.optimizer} precision={a.precision} "
              f"accum={a.accum} compress={a.compress} reference={a.reference} "
              f"optimizer_impl={optimizer_impl}{settings_text} param_groups="
              f"{'+'.join(str(len(g['params'])) for g in optimizer.param_groups)}",
              file=sys.stderr, flush=True)

    torch.manual_seed(1000 + rank)  # synthetic data, once per rank, deterministic
    if a.model == "gpt":
        import gpt_model
        batches = [tuple(t.to(device) for t in gpt_model.make_batch(a.batch, a.seq))
                   for _ in range(8)]
    else:
        batches = [(make_input(a).to(device), torch.randint(10, (a.batch,)).to(device))
                   for _ in range(8)]
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) \
        if a.precision == "bf16" else contextlib.nullcontext
    wait_for_device = torch.cuda.synchronize if cuda else (lambda: None)
    cursor = 0
    clock = time.perf_counter
    parts = [0.0, 0.0, 0.0, 0.0]  # forward, backward, step, zero_grad

    def optimizer_step(timed=False):
        nonlocal cursor
        for m in range(a.accum):
            x, y = batches[cursor % len(batches)]
            cursor += 1
            last = m == a.accum - 1
            sync = contextlib.nullcontext() if last or world == 1 else model.no_sync()
            with sync:
                t0 = clock()
                with autocast():
                    logits = model(x)
                logits = logits.float()
                if a.model == "gpt":  # the next byte at every position
                    logits = logits.reshape(-1, logits.size(-1))
                loss = F.cross_entropy(logits, y)
                t1 = clock()
                (loss if a.accum == 1 else loss / a.accum).backward()
                t2 = clock()
            if timed and a.breakdown:
                parts[0] += t1 - t0
                parts[1] += t2 - t1
        t2 = clock()
        optimizer.step()
        if schedule is not None:
            schedule.step()  # counted with the optimizer step, as accel_bench does
        t3 = clock()
        optimizer.zero_grad(set_to_none=False)  # in place, as accel's zero_grad
        if timed and a.breakdown:
            parts[2] += t3 - t2
            parts[3] += clock() - t3

    for _ in range(a.warmup):
        optimizer_step()
    if world > 1:
        dist.barrier()
    wait_for_device()
    start = time.perf_counter()
    for _ in range(a.steps):
        optimizer_step(timed=True)
    wait_for_device()
    elapsed = time.perf_counter() - start
    if world > 1:
        dist.barrier()
    steps_per_s = a.steps / elapsed
    samples_per_s = steps_per_s * a.batch * world * a.accum
    if a.breakdown:
        mine = torch.tensor([v / a.steps for v in parts] + [elapsed / a.steps], dtype=torch.float64)
        rows = [mine]
        if world > 1:
            rows = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(rows, mine)
        if rank == 0:
            print(f"breakdown: model={a.model} world_size={world} accum={a.accum} per optimizer "
                  "step, milliseconds (backward includes DDP's hooks and its wait for the "
                  "all-reduces)")
            for r, v in enumerate(rows):
                v = [1e3 * float(x) for x in v]
                print(f"breakdown: rank={r} forward={v[0]:.3f} backward={v[1]:.3f} "
                      f"optimizer_step={v[2]:.3f} zero_grad={v[3]:.3f} "
                      f"other={v[4] - sum(v[:4]):.3f} total={v[4]:.3f}")
    if a.checkpoint:
        checkpoint(a, net, optimizer, rank, world)
    if rank == 0 and a.model in ("xfmr", "gpt"):  # as accel_bench prints them
        tokens_per_s = samples_per_s * a.seq
        flops_per_token = 6.0 * parameters + 12.0 * a.layers * a.seq * a.hidden
        print(f"tokens: tokens_per_s={tokens_per_s:.0f} "
              f"model_tflops_per_s_per_rank={tokens_per_s * flops_per_token / 1e12 / world:.2f}")
    if rank == 0 and cuda:
        print(f"device_memory: peak_allocated_mb={torch.cuda.max_memory_allocated(device) / 1e6:.1f}")
    peaks = [peak_rss_mb()]  # every rank's, as accel_bench's rank_peak_rss_mb
    if world > 1:
        peaks = [None] * world
        dist.all_gather_object(peaks, peak_rss_mb())
    if rank == 0:
        tokens = f" tokens_per_s={samples_per_s * a.seq:.1f}" if a.model == "gpt" else ""
        print(f"steps_per_s={steps_per_s:.3f} samples_per_s={samples_per_s:.1f}{tokens} "
              f"peak_rss_mb={peak_rss_mb():.1f} "
              f"rank_peak_rss_mb={','.join(f'{p:.1f}' for p in peaks)} "
              f"reference={a.reference} optimizer_impl={optimizer_impl}{settings_text}",
              flush=True)
    if world > 1:
        # PyTorch 1.13 can deadlock tearing DDP down at interpreter exit (the Reducer's
        # ProcessGroupGloo joins a worker thread that waits for the GIL the main thread holds):
        # every collective is done, so leave without the teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def launch(a):
    """Starts --nproc copies of this script as ranks 0..N-1 and supervises them."""
    with tempfile.TemporaryDirectory(prefix="ddp-bench-") as folder:
        env = dict(os.environ)
        with socket.socket() as s:  # MASTER_PORT for the record; the rendezvous is a file
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env.update(WORLD_SIZE=str(a.nproc), LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), ACCEL_BENCH_INIT=f"file://{folder}/store",
                   GLOO_SOCKET_IFNAME=env.get("GLOO_SOCKET_IFNAME", "lo"))
        argv = [a for a in sys.argv[1:]]
        # --nproc is the launcher's; the workers see the rest.
        filtered, skip = [], False
        for arg in argv:
            if skip:
                skip = False
            elif arg == "--nproc":
                skip = True
            elif not arg.startswith("--nproc="):
                filtered.append(arg)
        workers = []
        for rank in range(a.nproc):
            worker_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
            workers.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + filtered,
                                            env=worker_env, stdin=subprocess.DEVNULL))
        status = 0
        try:
            remaining = list(workers)
            while remaining:
                for w in list(remaining):
                    code = w.poll()
                    if code is None:
                        continue
                    remaining.remove(w)
                    if code != 0 and status == 0:
                        status = code if code > 0 else 128 - code
                        print(f"ddp.py: rank {workers.index(w)} failed with status {code}; "
                              "stopping the others", file=sys.stderr)
                        for other in remaining:
                            other.send_signal(signal.SIGTERM)
                time.sleep(0.02)
        except KeyboardInterrupt:
            for w in workers:
                if w.poll() is None:
                    w.kill()
            raise
        return status


def main():
    a = parse()
    world = int(os.environ.get("WORLD_SIZE", a.nproc))
    if a.strategy.startswith("fsdp") and world > 1:
        why = fsdp_unavailable()
        if why is not None:  # every rank (and the launcher) finds the same: none starts
            if int(os.environ.get("RANK", "0")) == 0:
                print(f"skipped: --strategy {a.strategy}: {why}", flush=True)
            return 0
    if "RANK" in os.environ or a.nproc == 1:
        return train(a)
    return launch(a)


if __name__ == "__main__":
    sys.exit(main())
