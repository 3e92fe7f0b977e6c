#!/usr/bin/env bash
# Tensor and sequence parallelism on the GPT example against PyTorch 2.6's own, side by side, at
# a sequence length where activations dominate memory (docs/how-to/tensor-parallel.md,
# "Performance").
#
#   bench/tensor_parallel.sh [--turns N] [--steps N] [--warmup N] [--global-batch B] [--seq S]
#                            [--size "--layers 4 --hidden 256 --heads 4"] [--root DIR]
#                            [--build-dir DIR] [--no-breakdown]
#
# Runs in the Debian 13 root (libtorch 2.6 and python3-torch 2.6; scripts/in-debian13.sh, --root
# DIR for a root elsewhere), building the gpt example at -O3 (ACCEL_QUICK_PROGRAMS off) into
# build-debian13-bench/ (or --build-dir, a folder under the repository), reused when there.
# Every configuration trains the same model (default: 4 blocks, hidden 256, 4 heads, 3.4M
# parameters, AdamW, clipping at 1.0) on the same global batch (default 8 windows of seq 512:
# 4096 tokens a step) for --warmup untimed steps (default 2) and --steps timed ones (default 4):
#
#   1process   gpt --nproc 1                                   (the whole batch: 8)
#   ddp        gpt --nproc 2 --strategy ddp                    (batch 4 per process)
#   zero3      gpt --nproc 2 --strategy zero3                  (batch 4 per process)
#   tp2        gpt --nproc 2 --tp 2                            (one group: batch 8)
#   tp2+sp     gpt --nproc 2 --tp 2 --sequence-parallel        (one group: batch 8)
#   tp2xzero3  gpt --nproc 4 --tp 2 --strategy zero3           (two groups: batch 4 each)
#   torch-tp2      bench/reference/gpt_tp.py --nproc 2         (ColwiseParallel/RowwiseParallel)
#   torch-tp2+sp   bench/reference/gpt_tp.py --nproc 2 --sequence-parallel   (SequenceParallel)
#
# in alternating turns (--turns, default 3; every other turn in reverse order). PyTorch runs with
# the heap accel gives itself (MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824,
# as a Ddp or tensor-parallel Accelerator sets it) and fused AdamW; accel with its own defaults
# (those variables removed: accel leaves glibc alone where either is set). One thread per process
# on both sides. Per configuration: rank 0's peak RSS (VmHWM, read from /proc while it runs,
# the same way for both sides) and tokens/s over the timed steps (accel: the example's tracked
# metrics, the time from the end of the last warm-up step to the end of the last step; PyTorch:
# the same span, timed by gpt_tp.py). Prints each turn, then per configuration the medians with
# their range over the turns, and the ratios: tp2+sp's RSS over ddp's and accel's tensor
# parallelism's tokens/s over PyTorch's on the same mesh (medians of the per-turn ratios).
# Then (unless --no-breakdown) one more run of tp2 and tp2+sp with --profile and of PyTorch's
# with --breakdown: rank 0's milliseconds per step in forward, backward, communication, the
# optimizer and the rest (accel: the example's step timeline over the steps after its profiled
# ones; PyTorch: its timers, whose forward and backward include their collectives).
# Each turn's line (load average at its end in brackets) goes to
# <build folder>/bench-results/tensor_parallel-<date>.txt too. Run it on a quiet machine: the
# runs share two cores.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
turns=3
steps=4
warmup=2
global_batch=8
seq=512
size=(--layers 4 --hidden 256 --heads 4)
root_args=()
build_dir=
breakdown=1
cmdline=${TP_BENCH_CMDLINE:-$(printf '%q ' bench/tensor_parallel.sh "$@")}
cmdline=${cmdline% }
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --turns) turns=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --global-batch) global_batch=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --size) read -r -a size <<<"$2"; shift 2 ;;
    --root) root_args=(--root "$2"); shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --no-breakdown) breakdown=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "tensor_parallel.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
for value in "$turns" "$steps" "$warmup" "$seq"; do
  [ "$value" -ge 1 ] 2>/dev/null ||
    { echo "tensor_parallel.sh: '$value' must be a whole number >= 1 (--turns, --steps, --warmup, --seq)" >&2; exit 2; }
done
[ "$global_batch" -ge 2 ] 2>/dev/null && [ $((global_batch % 2)) = 0 ] ||
  { echo "tensor_parallel.sh: --global-batch '$global_batch' must be an even number (2 data-parallel processes share it)" >&2; exit 2; }

# On the host: the same command inside the Debian 13 root, with the commit (the worktree's .git
# points outside /src there).
if [ -z "${TP_BENCH_IN_ROOT:-}" ]; then
  commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ -z "$(git -C "$repo" status --porcelain 2>/dev/null)" ] || commit="$commit-dirty"
  root=${root_args[1]:-$repo/.cache/debian13-root}
  [ -x "$root/usr/bin/bash" ] || {
    echo "tensor_parallel.sh: no Debian 13 root at '$root'; make one with scripts/debian13-root.sh," \
      "or give --root DIR (a worktree can use its main checkout's .cache/debian13-root)" >&2
    exit 2; }
  exec "$repo/scripts/in-debian13.sh" "${root_args[@]}" -e TP_BENCH_IN_ROOT=1 \
    -e TP_BENCH_COMMIT="$commit" -e TP_BENCH_CMDLINE="$cmdline" \
    -- bench/tensor_parallel.sh "${args[@]}"
fi

python=/usr/bin/python3
"$python" -c 'import torch.distributed.tensor.parallel' 2>/dev/null || {
  echo "tensor_parallel.sh: the Debian 13 root has no python3-torch with torch.distributed.tensor.parallel; install it there:" >&2
  echo "  scripts/in-debian13.sh ${root_args[*]} -e DEBIAN_FRONTEND=noninteractive -- 'apt-get update && apt-get install -y --no-upgrade python3-torch'" >&2
  exit 1; }
build_dir=${build_dir:-$repo/build-debian13-bench}
generator=()
[ -f "$build_dir/CMakeCache.txt" ] || generator=(-G Ninja)
cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DACCEL_QUICK_PROGRAMS=OFF >/dev/null
cmake --build "$build_dir" --target gpt >/dev/null
gpt="$build_dir/examples/gpt/gpt"

work=$(mktemp -d "$build_dir/tensor_parallel.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_
heap_accel=(env MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824)
total=$((warmup + steps))
tokens_per_step=$((global_batch * seq))
# Every accel run: the same model, steps and global batch; the metrics every --warmup steps
# (the rows at the last warm-up step and at the last step time the timed steps); no progress
# bar, a validation of 2 windows and no sample at the end (both after the timed steps).
gpt_common=("${size[@]}" --seq "$seq" --warmup "$warmup" --eval-windows 2 --sample-tokens 0
            --no-progress --log-dir "$work/runs")
configs=(1process ddp zero3 tp2 tp2+sp tp2xzero3 torch-tp2 torch-tp2+sp)

command_for() {  # config [accel's steps, metrics every] -> the array `cmd`
  local half=$((global_batch / 2))
  case "$1" in
    1process) cmd=("$gpt" --nproc 1 --batch-size "$global_batch") ;;
    ddp) cmd=("$gpt" --nproc 2 --strategy ddp --batch-size "$half") ;;
    zero3) cmd=("$gpt" --nproc 2 --strategy zero3 --batch-size "$half") ;;
    tp2) cmd=("$gpt" --nproc 2 --tp 2 --batch-size "$global_batch") ;;
    tp2+sp) cmd=("$gpt" --nproc 2 --tp 2 --sequence-parallel --batch-size "$global_batch") ;;
    tp2xzero3) cmd=("$gpt" --nproc 4 --tp 2 --strategy zero3 --batch-size "$half") ;;
    torch-tp2) cmd=("${heap_accel[@]}" "$python" "$repo/bench/reference/gpt_tp.py" --nproc 2) ;;
    torch-tp2+sp) cmd=("${heap_accel[@]}" "$python" "$repo/bench/reference/gpt_tp.py" --nproc 2
                       --sequence-parallel) ;;
  esac
  case "$1" in
    torch-*) cmd+=("${size[@]}" --seq "$seq" --batch "$global_batch" --steps "$steps"
                   --warmup "$warmup") ;;
    *) cmd+=("${gpt_common[@]}" --steps "${2:-$total}" --log-every "${3:-$warmup}") ;;
  esac
}

# The process with RANK=0 among PID's descendants (the launcher's workers), or nothing yet.
rank0_of() {
  local pids=("$1") next p child
  for _ in 1 2 3; do
    next=()
    for p in "${pids[@]}"; do
      for child in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
        if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx 'RANK=0'; then
          echo "$child"; return; fi
        next+=("$child")
      done
    done
    [ ${#next[@]} -gt 0 ] || return 0
    pids=("${next[@]}")
  done
}

# Runs `cmd` (output to FILE) and prints rank 0's peak RSS in MB: its VmHWM, read every 0.1 s
# with the shell's own `read` (no process started while it trains) until it ends. ONE: the
# command trains in its own process (gpt --nproc 1 starts no worker).
run_measured() {  # file [one]
  local out=$1 pid r0= peak=0 key value _
  "${cmd[@]}" >"$out" 2>&1 &
  pid=$!
  [ -z "${2:-}" ] || r0=$pid
  while kill -0 "$pid" 2>/dev/null; do
    [ -n "$r0" ] || r0=$(rank0_of "$pid")
    if [ -n "$r0" ] && [ -r "/proc/$r0/status" ]; then
      while read -r key value _; do
        [ "$key" = VmHWM: ] && peak=$value
      done 2>/dev/null <"/proc/$r0/status" || true
    fi
    sleep 0.1
  done
  wait "$pid" || { cat "$out" >&2; echo "tensor_parallel.sh: '${cmd[*]}' failed" >&2; exit 1; }
  [ "$peak" -gt 0 ] || { echo "tensor_parallel.sh: never saw rank 0 of '${cmd[*]}'" >&2; exit 1; }
  awk -v k="$peak" 'BEGIN { printf "%.1f\n", k / 1024 }'
}

# tokens/s over the timed steps of a run: accel's from its metrics.jsonl rows (the time at the
# last warm-up step and at the last step), PyTorch's from its result line.
tokens_per_s() {  # config output-file run-folder
  case "$1" in
    torch-*) sed -n 's/^tokens_per_s=\([0-9.]*\) .*/\1/p' "$2" ;;
    *) "$python" - "$3/metrics.jsonl" "$warmup" "$total" "$tokens_per_step" <<'EOF'
import json, sys
rows, first, last, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
time = {r["step"]: r["time"] for r in map(json.loads, open(rows)) if "loss" in r}
print(f"{(last - first) * tokens / (time[last] - time[first]):.1f}")
EOF
    ;;
  esac
}

machine="$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1 | tr -s ' '), $(nproc) cores"
# shellcheck disable=SC1091
debian=$(. /etc/os-release && echo "Debian ${VERSION_ID:-?}")
libtorch=$(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null | sed 's/[+~].*//' || true)
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
echo "machine: $machine; $debian, libtorch ${libtorch:-?}, Python torch $torch_version"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit ${TP_BENCH_COMMIT:-unknown}; command: $cmdline"
echo "model: ${size[*]} --seq $seq, AdamW, clip 1.0; global batch $global_batch windows" \
     "($tokens_per_step tokens) a step; $warmup warm-up + $steps timed steps; load at start" \
     "$(cut -d' ' -f1-3 /proc/loadavg)"
results="$build_dir/bench-results"
mkdir -p "$results"
raw="$results/tensor_parallel-$(date -u +%Y%m%d-%H%M%S).txt"  # kept: turn config tokens/s MB
: >"$raw"
for ((turn = 1; turn <= turns; ++turn)); do
  order=("${configs[@]}")
  if [ $((turn % 2)) = 0 ]; then
    order=(); for ((i = ${#configs[@]} - 1; i >= 0; --i)); do order+=("${configs[i]}"); done
  fi
  for config in "${order[@]}"; do
    run="$config-$turn"
    command_for "$config"
    case "$config" in torch-*) ;; *) cmd+=(--run-name "$run") ;; esac
    rss=$(run_measured "$work/$run.out" $([ "$config" = 1process ] && echo one))
    tps=$(tokens_per_s "$config" "$work/$run.out" "$work/runs/gpt/$run")
    [ -n "$tps" ] || { cat "$work/$run.out" >&2; echo "tensor_parallel.sh: no tokens/s from $config" >&2; exit 1; }
    echo "$turn $config $tps $rss" >>"$raw"
    echo "turn $turn: $config: $tps tokens/s, rank 0 peak RSS $rss MB ($(cut -d' ' -f1 /proc/loadavg))"
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg); each turn's numbers: ${raw#"$repo"/}"
echo
"$python" - "$raw" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
runs = {}
for turn, config, tps, rss in rows:
    runs.setdefault(config, {})[int(turn)] = (float(tps), float(rss))
def median_range(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))} to {fmt.format(max(values))})"
print("| configuration | tokens/s | rank 0 peak RSS, MB |")
print("|---|---|---|")
for config, turns in runs.items():
    print(f"| {config} | {median_range([t for t, _ in turns.values()], '{:.0f}')} | "
          f"{median_range([r for _, r in turns.values()], '{:.0f}')} |")
def ratio(a, b, which):
    values = [runs[a][t][which] / runs[b][t][which] for t in runs[a] if t in runs[b]]
    return median_range(values, "{:.2f}")
print()
print(f"tp2+sp rank 0 peak RSS / ddp's: {ratio('tp2+sp', 'ddp', 1)} (target <= 0.6)")
print(f"tp2+sp rank 0 peak RSS / 1process's: {ratio('tp2+sp', '1process', 1)}")
print(f"tp2 tokens/s / PyTorch tp2's: {ratio('tp2', 'torch-tp2', 0)} (target >= 1.2)")
print(f"tp2+sp tokens/s / PyTorch tp2+sp's: {ratio('tp2+sp', 'torch-tp2+sp', 0)} (target >= 1.2)")
print("(medians of the per-turn ratios, min to max)")
EOF

[ "$breakdown" = 1 ] || exit 0
# The step's breakdown: the example's timeline with --profile (which traces steps 3 to 5: the
# rows after them are read) and PyTorch's timers with --breakdown.
echo
echo "breakdown, rank 0, milliseconds per step:"
profiled=5
for config in tp2 tp2+sp; do
  command_for "$config" $((profiled + steps)) 1
  cmd+=(--run-name "$config-breakdown" --profile)
  "${cmd[@]}" >"$work/$config-breakdown.out" 2>&1 ||
    { cat "$work/$config-breakdown.out" >&2; echo "tensor_parallel.sh: $config --profile failed" >&2; exit 1; }
  "$python" - "$work/runs/gpt/$config-breakdown/metrics.jsonl" "$profiled" "$config" <<'EOF'
import json, statistics, sys
path, after, config = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [r for r in map(json.loads, open(path)) if r.get("step", 0) > after
        and "timeline/rank0/step" in r]
parts = ["forward", "backward", "communication", "optimizer", "data", "idle", "step"]
mean = {p: 1e3 * statistics.mean(r[f"timeline/rank0/{p}"] for r in rows) for p in parts}
print(f"{config} (accel, steps {after + 1} to {after + len(rows)}): "
      + " ".join(f"{p}={mean[p]:.0f}" for p in parts))
EOF
done
for config in torch-tp2 torch-tp2+sp; do
  command_for "$config"
  cmd+=(--breakdown)
  "${cmd[@]}" 2>/dev/null | sed -n "s/^breakdown: rank=0 /$config (PyTorch, forward and backward with their collectives): /p"
done
