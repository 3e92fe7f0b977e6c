#!/usr/bin/python3
"""bench/run.sh's tables, from its raw result lines.

    tables.py models RAW [conditions]   the mlp / xfmr / tiny table
    tables.py gpt RAW [conditions]      the gpt table

RAW holds one line per run: turn=<t> impl=<impl> (model=<m> world=<w> | strategy=<s>) and the
benchmark's result line (or skipped=<why>). impl: accel, accel-glibc (accel_bench
--no-heap-tuning), plain (accel_bench --plain), torch (ddp.py --reference best), torch-defaults
(ddp.py --reference defaults), pair and lockstep (the ceilings). Every ratio is the median of the
per-turn ratios, both sides taken from the same turn, with their spread (min-max over the turns);
throughputs are medians over the turns.
"""
import argparse
import statistics
import sys

HEAP = ("accel: its own tuning (Options::tune_cpu_heap: M_MMAP_THRESHOLD 32 MiB, 8 MiB under "
        "Zero3 and Fsdp<FullShard>; M_TRIM_THRESHOLD 1 GiB). PyTorch at its best{plain}: "
        "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 (the same heap). "
        "PyTorch's defaults and accel --no-heap-tuning: glibc's default heap")

# The three rows of each comparison: (label, accel side, PyTorch side, the factor it isolates).
ROWS = [
    ("accel / PyTorch at its best, equal heaps", "accel", "torch", None),
    ("accel / PyTorch's defaults (ddp.py --reference defaults, glibc's default heap)", "accel",
     "torch-defaults", ("PyTorch at its best / its defaults", "torch", "torch-defaults")),
    ("accel --no-heap-tuning / PyTorch's defaults (both glibc's default heap)", "accel-glibc",
     "torch-defaults", ("accel's heap tuning: accel / accel --no-heap-tuning", "accel",
                        "accel-glibc")),
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("table", choices=["models", "gpt"])
    p.add_argument("raw")
    for name in ("machine", "leg", "commit", "command", "accel-optimizer", "pin", "extra", "date",
                 "load-start", "load-end", "size", "nodes"):
        p.add_argument(f"--{name}", default="?")
    p.add_argument("--turns", type=int, default=0)
    p.add_argument("--steps", default="?")
    return p.parse_args()


def spread(values, show):
    """The median of VALUES and their min-max, through SHOW; empty without values."""
    if not values:
        return ""
    values = sorted(values)
    if len(values) == 1:
        return f"{show(values[0])} (1 turn)"
    return f"{show(statistics.median(values))} ({show(values[0])} to {show(values[-1])})"


def ratio(x):
    return f"{x:.2f}"


def percent(x):
    return f"{100 * x:.0f}%"


def per_turn(num, den, combine=lambda a, b: a / b):
    """combine(num[t], den[t]) for every turn t in both."""
    return [combine(num[t], den[t]) for t in sorted(num) if t in den and den[t]]


def median(series):
    return statistics.median(series.values()) if series else None


def seen(lines, impl, key):
    """The values of KEY in IMPL's result lines, in order of appearance, or '?'."""
    values = list(dict.fromkeys(f[key] for f in lines if f.get("impl") == impl and key in f))
    return ", ".join(values) if values else "?"


def conditions(a, title, lines):
    print(f"### {title}")
    print()
    print(f"- machine: {a.machine}; leg: {a.leg}; {a.pin}; one thread per rank")
    print(f"- date: {a.date}; commit: {a.commit}; load (1, 5, 15 min) at the start "
          f"{a.load_start}, at the end {a.load_end}")
    print(f"- command: `{a.command}` (extra flags for both benchmarks: {a.extra})")
    if a.nodes != "?":
        print(f"- ranks: {a.nodes}")
    plain = ", the plain loop" if a.table == "models" else ""
    print(f"- heap: {HEAP.format(plain=plain)}")
    print(f"- optimizer step: accel: {a.accel_optimizer}; PyTorch at its best: "
          f"{seen(lines, 'torch', 'optimizer_impl')}; PyTorch's defaults: "
          f"{seen(lines, 'torch-defaults', 'optimizer_impl')}")
    settings = []
    for impl, name in (("torch", "at its best"), ("torch-defaults", "defaults")):
        views = seen(lines, impl, "bucket_views")
        fsdp = seen(lines, impl, "fsdp")
        if views != "?":
            settings.append(f"{name}: DDP gradient_as_bucket_view={views}")
        if fsdp != "?":
            settings.append(f"{name}: FSDP {fsdp.replace(':', '=')}")
    if settings:
        print(f"- PyTorch's settings: {'; '.join(settings)}")
    turns = f"{a.turns} turn{'s' if a.turns != 1 else ''}"
    print(f"- each ratio: the median of the per-turn ratios (min to max over {turns}); "
          "throughputs: medians over the turns")
    print()


def read(path):
    lines = []
    for line in open(path):
        head, _, why = line.rstrip("\n").partition(" skipped=")
        fields = dict(item.split("=", 1) for item in head.split())
        if why:
            fields["skipped"] = why
        lines.append(fields)
    return lines


def models_table(a, lines):
    runs = {}  # (model, world, impl) -> {turn: samples/s}
    for f in lines:
        runs.setdefault((f["model"], int(f["world"]), f["impl"]), {})[int(f["turn"])] = \
            float(f["samples_per_s"])
    models = list(dict.fromkeys(f["model"] for f in lines))
    conditions(a, f"accel against PyTorch: {', '.join(models)} (samples/s)", lines)
    print("| model | world size | comparison | accel samples/s | PyTorch samples/s | "
          "accel / PyTorch | where it comes from | scaling eff. accel | scaling eff. PyTorch | "
          "ceiling: 2 independent processes (as scaling eff.) | accel / ceiling | "
          "lockstep ceiling: 2 x the slower process (as scaling eff.) | accel / lockstep "
          "ceiling | accel overhead vs plain libtorch (equal heaps) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in models:
        for w in (1, 2):
            get = lambda impl, world=w: runs.get((m, world, impl), {})
            efficiency = lambda impl: per_turn(get(impl, 2), get(impl, 1),
                                               lambda two, one: two / (2 * one))
            for i, (label, mine, theirs, factor) in enumerate(ROWS):
                a_runs, t_runs = get(mine), get(theirs)
                if not a_runs or not t_runs:
                    continue
                cells = [m, str(w), label, f"{median(a_runs):.1f}", f"{median(t_runs):.1f}",
                         spread(per_turn(a_runs, t_runs), ratio)]
                cells.append("" if factor is None else
                             f"{factor[0]}: {spread(per_turn(get(factor[1]), get(factor[2])), ratio)}")
                if w == 2:
                    cells += [spread(efficiency(mine), percent), spread(efficiency(theirs), percent)]
                else:
                    cells += ["", ""]
                if i == 0 and w == 2:  # the ceilings against accel's own one-process runs
                    for bound in ("pair", "lockstep"):
                        cells += [spread(per_turn(get(bound), get("accel", 1),
                                                  lambda b, one: b / (2 * one)), percent),
                                  spread(per_turn(a_runs, get(bound)), ratio)]
                else:
                    cells += ["", "", "", ""]
                cells.append(spread(per_turn(get("plain"), a_runs, lambda p, x: p / x - 1),
                                    lambda x: f"{100 * x:+.1f}%") if i == 0 and w == 1 else "")
                print("| " + " | ".join(cells) + " |")


GPT_NAMES = {"ddp": "DDP", "fsdp-full": "FSDP FULL_SHARD", "fsdp-grad-op": "FSDP SHARD_GRAD_OP",
             "fsdp-no-shard": "FSDP NO_SHARD"}
ACCEL_NAMES = {"ddp": "Ddp", "zero2": "Zero2", "zero3": "Zero3", "fsdp": "Fsdp<FullShard>"}
GPT_PAIRS = [("ddp", "ddp"), ("ddp", "fsdp-no-shard"), ("zero2", "fsdp-grad-op"),
             ("zero3", "fsdp-full"), ("fsdp", "fsdp-full")]


def gpt_table(a, lines):
    tokens, rss, skipped = {}, {}, {}
    for f in lines:
        key, turn = (f["impl"], f["strategy"]), int(f["turn"])
        if "skipped" in f:
            skipped[f["strategy"]] = f["skipped"]
            continue
        tokens.setdefault(key, {})[turn] = float(f["tokens_per_s"])
        if "rank_peak_rss_mb" in f:
            rss.setdefault(key, {})[turn] = [float(x) for x in f["rank_peak_rss_mb"].split(",")]
    conditions(a, f"gpt ({a.size}), world size 2: accel's strategies against PyTorch's "
               f"(tokens/s global; {a.steps} timed steps a run; peak RSS MB rank 0 / rank 1, "
               "medians)", lines)
    ceiling, lockstep = tokens.get(("pair", "one-process"), {}), \
        tokens.get(("lockstep", "one-process"), {})
    if ceiling:
        print(f"Ceiling (2 independent one-process runs at once): {median(ceiling):.0f} tokens/s; "
              f"lockstep ceiling (2 x the slower): {median(lockstep):.0f} tokens/s.")
        print()

    def show_rss(runs):
        if not runs:
            return ""
        ranks = len(next(iter(runs.values())))
        return " / ".join(f"{statistics.median(r[i] for r in runs.values()):.0f}"
                          for i in range(ranks))

    print("| accel | PyTorch | comparison | accel tokens/s | accel peak RSS | PyTorch tokens/s | "
          "PyTorch peak RSS | accel / PyTorch tokens/s | where it comes from | accel / PyTorch "
          "peak RSS rank 0 | accel / ceiling | accel / lockstep ceiling |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for a_name, t_name in GPT_PAIRS:
        for i, (label, mine, theirs, factor) in enumerate(ROWS):
            a_runs = tokens.get((mine, a_name))
            if not a_runs:
                continue
            t_runs = tokens.get((theirs, t_name), {})
            if not t_runs and (t_name not in skipped or (factor and factor[1] == "torch")):
                continue  # where PyTorch skipped, row 2 would repeat row 1
            a_rss, t_rss = rss.get((mine, a_name), {}), rss.get((theirs, t_name), {})
            cells = [ACCEL_NAMES[a_name], GPT_NAMES[t_name], label, f"{median(a_runs):.0f}",
                     show_rss(a_rss)]
            if t_name in skipped:
                cells += ["skipped (below)", "", ""]
            else:
                cells += [f"{median(t_runs):.0f}", show_rss(t_rss),
                          spread(per_turn(a_runs, t_runs), ratio)]
            if factor is None:
                cells.append("")
            else:
                side = t_name if factor[1].startswith("torch") else a_name
                cells.append(f"{factor[0]}: " + spread(per_turn(
                    tokens.get((factor[1], side), {}), tokens.get((factor[2], side), {})), ratio))
            rank0 = per_turn({t: r[0] for t, r in a_rss.items()},
                             {t: r[0] for t, r in t_rss.items()})
            cells.append(spread(rank0, ratio))
            if i == 0:
                cells += [spread(per_turn(a_runs, ceiling), ratio),
                          spread(per_turn(a_runs, lockstep), ratio)]
            else:
                cells += ["", ""]
            print("| " + " | ".join(cells) + " |")
    for strategy, why in skipped.items():
        why = why.removeprefix(f"--strategy {strategy}: ")
        print(f"skipped: PyTorch {GPT_NAMES.get(strategy, strategy)} (ddp.py --strategy "
              f"{strategy}): {why}")
    if any(k[0].startswith("torch") and k[1].startswith("fsdp") for k in tokens):
        print("PyTorch FSDP over Gloo: its reduce_scatter_tensor is an all-reduce in disguise (the "
              "whole gradient all-reduced, each rank keeping its slice), so FULL_SHARD and "
              "SHARD_GRAD_OP move an all-reduce's bytes where accel's Zero2 / Zero3 reduce-scatter.")


def main():
    a = parse_args()
    lines = read(a.raw)
    if not lines:
        return 0
    (models_table if a.table == "models" else gpt_table)(a, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
