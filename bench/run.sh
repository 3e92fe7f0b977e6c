#!/usr/bin/env bash
# accel's Ddp against PyTorch's DistributedDataParallel, model by model, at world sizes 1 and 2.
#
#   bench/run.sh [--turns N] [--models "mlp xfmr tiny"] [--build-dir DIR] [--wait-quiet]
#                [--steps-scale X] [--malloc default|tuned] [--no-pin] [--no-plain]
#                [-- extra flags for both benchmarks, e.g. --precision bf16]
#
# For each model and world size it runs build/bench/accel_bench and bench/reference/ddp.py in
# alternating turns (accel, PyTorch, accel, PyTorch, ...; --turns each, default 5), takes the
# median samples/s of each, and prints a table: the ratio accel/PyTorch and, at world size 2, the
# scaling efficiency of each (samples/s at 2 ranks / (2 x samples/s at 1 rank)), and the ceiling
# that two independent one-process accel_bench runs at the same time reach (no communication at
# all: what sharing the cores alone costs). At world size 1 it also runs accel_bench --plain (the
# same training in a plain libtorch loop, no Accelerator; --no-plain skips it) in the same turns,
# for the Accelerator's own cost per model. Then it runs build/bench/accel_overhead (the
# Accelerator against a plain libtorch loop, one process) and prints its overhead_pct line.
# Raw output goes to $BUILD_DIR/bench-results/<date>/.
#
# One thread per rank (--threads 1 in both benchmarks limits OpenBLAS's own pool too), and each
# rank pinned to its own core (--pin; --no-pin leaves placement to the scheduler: a one-thread
# process here then runs at either about 60% or 100% of its speed, from one run to the next).
#
# --malloc tuned runs everything (both sides alike) with MALLOC_MMAP_THRESHOLD_=32 MiB and
# MALLOC_TRIM_THRESHOLD_=1 GiB, so that glibc keeps freed tensor memory instead of returning it
# to the kernel and faulting it in again at the next step (see docs/benchmarks.md).
#
# Between the ranks of one node accel's CPU tensors go through shared memory; run with
# ACCEL_SHARED_MEMORY=0 in the environment for accel over Gloo, as PyTorch's DDP is.
#
# Needs Debian's python3-torch under /usr/bin/python3 (scripts/setup-debian.sh installs it).
# --wait-quiet first waits (up to 20 minutes) for a 1-minute load below 0.7 with no compiler,
# ninja or ctest running: two ranks share two cores here, so anything else running skews it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo/build"
turns=5
malloc=default
pin=(--pin)
plain=1
models="mlp xfmr tiny"
wait_quiet=0
scale=1
extra=()
python=/usr/bin/python3

while [ $# -gt 0 ]; do
  case "$1" in
    --turns) turns=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --build-dir) build_dir=$(cd "$2" && pwd); shift 2 ;;
    --wait-quiet) wait_quiet=1; shift ;;
    --steps-scale) scale=$2; shift 2 ;;
    --malloc) malloc=$2; shift 2 ;;
    --no-pin) pin=(); shift ;;
    --no-plain) plain=0; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$turns" -ge 1 ] 2>/dev/null || { echo "run.sh: --turns '$turns' must be a whole number >= 1" >&2; exit 2; }
case "$malloc" in
  default) ;;
  tuned) export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 ;;
  *) echo "run.sh: --malloc '$malloc': use default or tuned" >&2; exit 2 ;;
esac

if ! "$python" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  cat >&2 <<EOF
run.sh: $python cannot import torch (with Gloo), so there is no PyTorch DDP to compare against.
Install Debian's python3-torch, e.g. with: sudo scripts/setup-debian.sh
(the python3 first on PATH may be another interpreter without torch; this script uses $python)
EOF
  exit 1
fi

if [ ! -f "$build_dir/build.ninja" ] && [ ! -f "$build_dir/Makefile" ]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build_dir" --target accel_bench accel_overhead >/dev/null

if [ "$wait_quiet" = 1 ]; then
  for i in $(seq 0 40); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" 'BEGIN { exit !(l < 0.7) }' && ! pgrep -x cc1plus >/dev/null && ! pgrep -x ctest >/dev/null && ! pgrep -x ninja >/dev/null; then
      break
    fi
    [ "$i" = 40 ] && { echo "run.sh: the machine did not become quiet in 20 minutes (load $load)" >&2; exit 1; }
    echo "run.sh: waiting for a quiet machine (load $load)" >&2
    sleep 30
  done
fi

results="$build_dir/bench-results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$results"
raw="$results/raw.txt"
: >"$raw"

# Timed optimizer steps per model and world size: about 2-3 s of training each on 2 cores.
steps() {  # model world
  local s
  case "$1:$2" in
    mlp:1) s=100 ;; mlp:2) s=40 ;;
    xfmr:1) s=60 ;; xfmr:2) s=60 ;;
    tiny:1) s=20000 ;; tiny:2) s=2000 ;;
  esac
  awk -v s="$s" -v x="$scale" 'BEGIN { v = int(s * x); print (v < 3 ? 3 : v) }'
}

run_one() {  # impl model world
  local impl=$1 model=$2 world=$3 out
  local args=(--model "$model" --nproc "$world" --steps "$(steps "$model" "$world")" "${pin[@]}" "${extra[@]}")
  if [ "$impl" = accel ]; then
    out=$("$build_dir/bench/accel_bench" "${args[@]}" 2>>"$results/stderr.txt")
  elif [ "$impl" = plain ]; then
    out=$("$build_dir/bench/accel_bench" --plain "${args[@]}" 2>>"$results/stderr.txt")
  else
    out=$("$python" "$repo/bench/reference/ddp.py" "${args[@]}" 2>>"$results/stderr.txt")
  fi
  local last
  last=$(printf '%s\n' "$out" | tail -n 1)
  case "$last" in
    steps_per_s=*) ;;
    *) echo "run.sh: $impl $model world $world gave no result line; see $results/stderr.txt" >&2; exit 1 ;;
  esac
  echo "impl=$impl model=$model world=$world $last" | tee -a "$raw" >&2
}

# Two independent one-process runs at the same time: the samples/s they reach together.
run_pair() {  # model
  local model=$1 a b
  local args=(--model "$model" --nproc 1 --steps "$(steps "$model" 1)" "${extra[@]}")
  local cpu0=() cpu1=()
  [ ${#pin[@]} -gt 0 ] && { cpu0=(taskset -c 0); cpu1=(taskset -c 1); }
  "${cpu0[@]}" "$build_dir/bench/accel_bench" "${args[@]}" >"$results/pair0.txt" 2>>"$results/stderr.txt" &
  local first=$!
  "${cpu1[@]}" "$build_dir/bench/accel_bench" "${args[@]}" >"$results/pair1.txt" 2>>"$results/stderr.txt"
  wait "$first"
  a=$(tail -n 1 "$results/pair0.txt" | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p')
  b=$(tail -n 1 "$results/pair1.txt" | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p')
  [ -n "$a" ] && [ -n "$b" ] || { echo "run.sh: the pair run of $model failed; see $results/stderr.txt" >&2; exit 1; }
  echo "impl=pair model=$model world=2 samples_per_s=$(awk -v a="$a" -v b="$b" 'BEGIN { print a + b }')" | tee -a "$raw" >&2
}

echo "run.sh: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); malloc $malloc; ${pin[*]:-unpinned}; extra flags: ${extra[*]:-none}" >&2
for model in $models; do
  for world in 1 2; do
    for turn in $(seq "$turns"); do
      run_one accel "$model" "$world"
      run_one torch "$model" "$world"
      if [ "$world" = 1 ] && [ "$plain" = 1 ]; then run_one plain "$model" 1; fi
      if [ "$world" = 2 ]; then run_pair "$model"; fi
    done
  done
done

# accel_overhead limits torch's threads only: OpenBLAS's pool is limited here, as above.
overhead_pin=()
[ ${#pin[@]} -gt 0 ] && overhead_pin=(taskset -c 0)
overhead=$(OPENBLAS_NUM_THREADS=1 "${overhead_pin[@]}" "$build_dir/bench/accel_overhead" --steps 100 --rounds 7 | tee "$results/overhead.txt")
echo "run.sh: load at the end $(cut -d' ' -f1-3 /proc/loadavg)" >&2

"$python" - "$raw" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    fields = dict(item.split("=", 1) for item in line.split())
    key = (fields["model"], int(fields["world"]), fields["impl"])
    runs.setdefault(key, []).append(float(fields["samples_per_s"]))
med = {k: statistics.median(v) for k, v in runs.items()}
models = list(dict.fromkeys(k[0] for k in runs))
print("| model | world size | accel samples/s | PyTorch samples/s | accel/PyTorch | "
      "scaling eff. accel | scaling eff. PyTorch | ceiling: 2 independent processes | "
      "accel overhead vs plain libtorch |")
print("|---|---|---|---|---|---|---|---|---|")
for m in models:
    for w in (1, 2):
        a, t = med.get((m, w, "accel")), med.get((m, w, "torch"))
        if a is None or t is None:
            continue
        eff = lambda impl: med[(m, 2, impl)] / (2 * med[(m, 1, impl)]) if w == 2 and (m, 1, impl) in med else None
        ea, et = eff("accel"), eff("torch")
        ceiling = med[(m, 2, "pair")] / (2 * med[(m, 1, "accel")]) if w == 2 and (m, 2, "pair") in med else None
        fmt = lambda e: "" if e is None else f"{100 * e:.0f}%"
        p = med.get((m, 1, "plain")) if w == 1 else None
        overhead = "" if p is None else f"{100 * (p / a - 1):+.1f}%"
        print(f"| {m} | {w} | {a:.1f} | {t:.1f} | {a / t:.2f} | {fmt(ea)} | {fmt(et)} | "
              f"{fmt(ceiling)} | {overhead} |")
EOF
printf '%s\n' "$overhead" | tail -n 1
echo "run.sh: raw results in $results" >&2
