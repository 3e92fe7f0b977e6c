#!/usr/bin/env bash
# accel's Ddp against PyTorch's DistributedDataParallel, model by model, at world sizes 1 and 2;
# and on the gpt example's model, accel's strategies against PyTorch's DDP and FSDP.
#
#   bench/run.sh [--leg host|debian13|all] [--root DIR] [--turns N]
#                [--models "mlp xfmr tiny gpt"] [--build-dir DIR] [--wait-quiet]
#                [--steps-scale X] [--best-only] [--no-pin] [--no-plain]
#                [--gpt-turns N] [--gpt-size "--hidden 512 --layers 8 --heads 8 --seq 128
#                --batch 4"] [--gpt-steps N] [--gpt-warmup N] [--two-nodes]
#                [-- extra flags for both benchmarks, e.g. --precision bf16]
#
# The reference is PyTorch at its best, with the heap accel gives itself. Each comparison is
# three rows, measured in the same alternating turns:
#   1. accel against PyTorch at its best, equal heaps: bench/reference/ddp.py --reference best
#      (Adam's and AdamW's fused step where this torch has one on CPU, else their foreach step;
#      SGD's default step, no slower on CPU; DDP's gradient_as_bucket_view=True; FSDP's
#      limit_all_gathers, backward_prefetch=BACKWARD_PRE and forward_prefetch=True) with MALLOC_MMAP_THRESHOLD_=33554432 and
#      MALLOC_TRIM_THRESHOLD_=1073741824 in its environment: the heap accel sets itself
#      (Options::tune_cpu_heap; 8 MiB mmap threshold under zero3 and fsdp, docs/concepts/performance.md,
#      "The CPU heap").
#   2. accel against PyTorch with its defaults: ddp.py --reference defaults (the for-loop
#      optimizer step, no bucket views, FSDP's defaults) on glibc's default heap.
#   3. accel without its heap tuning (accel_bench --no-heap-tuning) against PyTorch with its
#      defaults: both on glibc's default heap.
# Their "where it comes from" column gives, per turn, PyTorch at its best over PyTorch's defaults
# (row 2) and accel over accel without its heap tuning (row 3). --best-only measures row 1 only.
# Every ratio is the median of the per-turn ratios, with their spread (min-max over the turns);
# samples/s and tokens/s are medians over the turns. Each table first prints its conditions:
# machine, leg, date, commit, load at its start and end, this command line, the heaps, the
# optimizer step each side ran, PyTorch's DDP / FSDP settings. accel's processes run with
# MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ removed from their environment (accel leaves
# glibc alone where either is set).
#
# --leg host (default) runs on this machine (Debian 12: libtorch 1.13, /usr/bin/python3's torch);
# --leg debian13 runs this same script inside the Debian 13 root (libtorch 2.6 and Debian 13's
# python3-torch; scripts/in-debian13.sh, --root DIR for a root elsewhere), building into
# build-debian13-bench/ (with CMAKE_BUILD_PARALLEL_LEVEL's jobs where it is set); --leg all runs
# both, one after the other. The root needs python3-torch,
# which the test root does not carry:
#   scripts/in-debian13.sh -e DEBIAN_FRONTEND=noninteractive -- 'apt-get update &&
#     apt-get install -y --no-upgrade python3-torch'
#
# gpt (examples/gpt/model.hpp, bench/reference/gpt_model.py: byte vocabulary, AdamW, warmup cosine)
# runs at world size 2 only, --gpt-turns alternating turns (default 3) of accel_bench --strategy
# ddp, zero2, zero3 and fsdp against ddp.py --strategy ddp, fsdp-grad-op, fsdp-full and
# fsdp-no-shard, each turn ending with the ceiling: two independent one-process accel_bench --model
# gpt runs at once, one per core. Its table gives median tokens/s, every rank's median peak RSS, and
# accel over its PyTorch counterpart (Ddp: DDP and FSDP NO_SHARD; Zero2: SHARD_GRAD_OP; Zero3 and
# Fsdp<FullShard>: FULL_SHARD) and over the ceiling and the lockstep ceiling (both as for the other
# models, below). Where the Python torch has no FSDP on CPU (Debian 12's 1.13 under Python 3.11),
# ddp.py prints why and the table says "skipped". Size: --gpt-size (default: hidden 512,
# 8 blocks, seq 128, batch 4 per rank, 25.5M parameters), --gpt-steps timed steps (default 5, x
# --steps-scale) after --gpt-warmup (default 2).
#
# For mlp, xfmr and tiny it runs build/bench/accel_bench and bench/reference/ddp.py in alternating
# turns (--turns, default 5), each turn at world size 1 and then 2, and prints a table: accel over
# PyTorch and, from the same turn's runs, the scaling efficiency of each (samples/s at 2 ranks /
# (2 x samples/s at 1 rank)), the ceiling that two independent one-process accel_bench runs at the
# same time reach (no communication at all: what sharing the cores alone costs), and accel over it;
# then the lockstep ceiling, twice the slower of those two processes (what training whose every
# step waits for the slower rank can reach when one core runs slower than the other), and accel
# over that. At world size 1 it also runs accel_bench --plain (the same training in a plain
# libtorch loop, no Accelerator, with the heap variables above: accel's heap) in the same turns,
# for the Accelerator's own cost per model; --no-plain skips it. Then it runs
# build/bench/accel_overhead (the Accelerator against a plain libtorch loop, one process) and
# prints its overhead_pct line. Raw output goes to $BUILD_DIR/bench-results/<date>/.
#
# One thread per rank (--threads 1 in both benchmarks limits OpenBLAS's own pool too), and each
# rank pinned to its own core (--pin; --no-pin leaves placement to the scheduler: a one-thread
# process here then runs at either about 60% or 100% of its speed, from one run to the next).
#
# Between the ranks of one node accel's CPU tensors go through shared memory; run with
# ACCEL_SHARED_MEMORY=0 in the environment for accel over Gloo, as PyTorch's DDP is.
#
# --two-nodes (gpt only) runs each world-size-2 run as two "nodes": two network namespaces joined
# by a veth pair (made at the start, removed at the end; needs root, ip and nsenter), one rank per
# namespace pinned to its own core, both sides meeting over TCP on the link (accel: torchrun's
# variables and its TCP store; PyTorch: a tcp:// rendezvous) with Gloo's connections on the veth
# ends (GLOO_SOCKET_IFNAME). Nothing goes through shared memory: what multi-node training on one
# link looks like, the regime where accel's shared-memory transport does not help. accel's Zero3
# and Fsdp then prefetch (accel_bench --prefetch: Options::prefetch_units), as FSDP at its best.
#
# Needs Debian's python3-torch under /usr/bin/python3 (scripts/setup-debian.sh installs it).
# --wait-quiet first waits (up to 20 minutes) for a 1-minute load below 0.7 with no compiler,
# ninja or ctest running: two ranks share two cores here, so anything else running skews it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Inside the Debian 13 root (this script started by its own --leg debian13) the leg is set.
leg=${ACCEL_BENCH_LEG:-host}
build_dir=
root_args=()
turns=5
best_only=0
pin=(--pin)
plain=1
models="mlp xfmr tiny gpt"
wait_quiet=0
scale=1
extra=()
python=/usr/bin/python3
gpt_turns=3
gpt_size=(--hidden 512 --layers 8 --heads 8 --seq 128 --batch 4)
gpt_steps=5
gpt_warmup=2
two_nodes=0

# This command line, for the tables (kept from the host when this script runs itself in the root).
cmdline=${ACCEL_BENCH_CMDLINE:-$(printf '%q ' bench/run.sh "$@")}
cmdline=${cmdline% }
export ACCEL_BENCH_CMDLINE="$cmdline"

# The arguments again, without --leg, --root and --build-dir: what this script passes to itself
# for each leg (a build folder is the leg's own).
again=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --) again+=("${args[@]:i}"); break ;;
    --leg|--root|--build-dir) i=$((i + 1)) ;;
    *) again+=("${args[i]}") ;;
  esac
done

while [ $# -gt 0 ]; do
  case "$1" in
    --leg) leg=$2; shift 2 ;;
    --root) root_args=(--root "$2"); shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --build-dir) build_dir=$(cd "$2" && pwd); shift 2 ;;
    --gpt-turns) gpt_turns=$2; shift 2 ;;
    --gpt-size) read -r -a gpt_size <<<"$2"; shift 2 ;;
    --gpt-steps) gpt_steps=$2; shift 2 ;;
    --gpt-warmup) gpt_warmup=$2; shift 2 ;;
    --wait-quiet) wait_quiet=1; shift ;;
    --steps-scale) scale=$2; shift 2 ;;
    --best-only) best_only=1; shift ;;
    --malloc)
      echo "run.sh: --malloc: each table measures both heaps in the same turns: PyTorch at its" \
        "best with accel's (row 1), PyTorch's defaults and accel --no-heap-tuning with glibc's" \
        "(rows 2 and 3); drop --malloc (see --help)" >&2
      exit 2 ;;
    --no-pin) pin=(); shift ;;
    --two-nodes) two_nodes=1; shift ;;
    --no-plain) plain=0; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$turns" -ge 1 ] 2>/dev/null || { echo "run.sh: --turns '$turns' must be a whole number >= 1" >&2; exit 2; }
[ "$gpt_turns" -ge 1 ] 2>/dev/null || { echo "run.sh: --gpt-turns '$gpt_turns' must be a whole number >= 1" >&2; exit 2; }
for value in "$gpt_steps" "$gpt_warmup"; do
  [ "$value" -ge 0 ] 2>/dev/null || { echo "run.sh: --gpt-steps/--gpt-warmup '$value' must be a whole number" >&2; exit 2; }
done
for model in $models; do
  case "$model" in
    mlp|xfmr|tiny|gpt) ;;
    *) echo "run.sh: --models: unknown model '$model'; use mlp, xfmr, tiny and/or gpt" >&2; exit 2 ;;
  esac
done

if [ "$two_nodes" = 1 ] && [ "$(printf '%s\n' $models | tr -d ' ')" != gpt ]; then
  echo "run.sh: --two-nodes measures the gpt table only: add --models gpt" >&2; exit 2
fi

# The commit every row names: HEAD, "-dirty" with uncommitted changes. Inside the root git may be
# missing (and a worktree's .git points outside /src), so the host passes it in.
commit=${ACCEL_BENCH_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -z "${ACCEL_BENCH_COMMIT:-}" ] && [ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi
case "$leg" in
  host) ;;
  debian13)
    if [ -z "${ACCEL_BENCH_LEG:-}" ]; then  # on the host: the same run inside the root
      exec "$repo/scripts/in-debian13.sh" "${root_args[@]}" -e ACCEL_BENCH_LEG=debian13 \
        -e ACCEL_BENCH_COMMIT="$commit" -e ACCEL_BENCH_CMDLINE="$cmdline" \
        ${CMAKE_BUILD_PARALLEL_LEVEL:+-e CMAKE_BUILD_PARALLEL_LEVEL="$CMAKE_BUILD_PARALLEL_LEVEL"} \
        -- bench/run.sh "${again[@]}"
    fi ;;
  all)
    "$0" --leg host ${build_dir:+--build-dir "$build_dir"} "${again[@]}"
    exec "$0" --leg debian13 "${root_args[@]}" "${again[@]}" ;;
  *) echo "run.sh: --leg '$leg': use host, debian13 or all" >&2; exit 2 ;;
esac
[ -n "$build_dir" ] || build_dir="$repo/$([ "$leg" = host ] && echo build || echo build-debian13-bench)"

# The two heaps: accel's (what an Accelerator sets itself; PyTorch and the plain loop get it from
# glibc's variables) and glibc's defaults (accel then tunes its own unless --no-heap-tuning).
heap_accel=(env MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824)
heap_glibc=(env -u MALLOC_MMAP_THRESHOLD_ -u MALLOC_TRIM_THRESHOLD_)
accel_optimizer="accel's fused step (Options::fused_optimizer)"
case " ${extra[*]} " in
  *" --no-fused-optimizer "*) accel_optimizer="libtorch's step (--no-fused-optimizer)" ;;
esac

if ! "$python" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  if [ "$leg" = debian13 ]; then
    cat >&2 <<EOF
run.sh: the Debian 13 root has no python3-torch (with Gloo), so there is no PyTorch to compare
against. Install it there (the test root does not carry it), from the repository on the host:
  scripts/in-debian13.sh ${root_args[*]} -e DEBIAN_FRONTEND=noninteractive -- 'apt-get update && apt-get install -y --no-upgrade python3-torch'
EOF
    exit 1
  fi
  cat >&2 <<EOF
run.sh: $python cannot import torch (with Gloo), so there is no PyTorch DDP to compare against.
Install Debian's python3-torch, e.g. with: sudo scripts/setup-debian.sh
(the python3 first on PATH may be another interpreter without torch; this script uses $python)
EOF
  exit 1
fi

# Release at -O3, as users build: also in a folder scripts/test.sh built (ACCEL_QUICK_PROGRAMS
# there), whose other settings stay.
generator=()
[ -f "$build_dir/CMakeCache.txt" ] || generator=(-G Ninja)
cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DACCEL_QUICK_PROGRAMS=OFF >/dev/null
# accel_overhead goes with the mlp / xfmr / tiny table only.
targets=(accel_bench)
[ -n "$(printf '%s\n' $models | grep -vx gpt)" ] && targets+=(accel_overhead)
cmake --build "$build_dir" --target "${targets[@]}" >/dev/null

# What every row names: the machine, the leg (Debian release, libtorch, Python torch), the commit.
machine="$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1 | tr -s ' '), $(nproc) cores"
# shellcheck disable=SC1091
debian=$(. /etc/os-release && echo "Debian ${VERSION_ID:-?}")
libtorch=$(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null | sed 's/[+~].*//' || true)
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
leg_text="$leg ($debian, libtorch ${libtorch:-?}, Python torch $torch_version)"

# Whether a compiler, ninja or ctest runs anywhere on the machine: read from /proc, not pgrep,
# which the Debian 13 root (minbase) lacks; its /proc is the host's, so it sees every process.
building() {
  cat /proc/[0-9]*/comm 2>/dev/null | grep -qxE 'cc1plus|ctest|ninja'
}

if [ "$wait_quiet" = 1 ]; then
  for i in $(seq 0 40); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" 'BEGIN { exit !(l < 0.7) }' && ! building; then
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
raw_gpt="$results/raw-gpt.txt"
: >"$raw"
: >"$raw_gpt"

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

# The command that runs IMPL (accel, accel-glibc: --no-heap-tuning, plain, torch: PyTorch at its
# best, torch-defaults: PyTorch's defaults), each with its heap, into the array `cmd`.
command_for() {  # impl
  case "$1" in
    accel) cmd=("${heap_glibc[@]}" "$build_dir/bench/accel_bench") ;;
    accel-glibc) cmd=("${heap_glibc[@]}" "$build_dir/bench/accel_bench" --no-heap-tuning) ;;
    plain) cmd=("${heap_accel[@]}" "$build_dir/bench/accel_bench" --plain) ;;
    torch) cmd=("${heap_accel[@]}" "$python" "$repo/bench/reference/ddp.py" --reference best) ;;
    torch-defaults) cmd=("${heap_glibc[@]}" "$python" "$repo/bench/reference/ddp.py"
                         --reference defaults) ;;
  esac
}

run_one() {  # impl model world turn
  local impl=$1 model=$2 world=$3 turn=$4 out cmd
  local args=(--model "$model" --nproc "$world" --steps "$(steps "$model" "$world")" "${pin[@]}" "${extra[@]}")
  command_for "$impl"
  out=$("${cmd[@]}" "${args[@]}" 2>>"$results/stderr.txt")
  local last
  last=$(printf '%s\n' "$out" | tail -n 1)
  case "$last" in
    steps_per_s=*) ;;
    *) echo "run.sh: $impl $model world $world gave no result line; see $results/stderr.txt" >&2; exit 1 ;;
  esac
  echo "turn=$turn impl=$impl model=$model world=$world $last" | tee -a "$raw" >&2
}

# Two independent one-process accel_bench runs at once, one per core (pinned when --pin): prints
# the sum of their last lines' FIELD (samples_per_s, tokens_per_s) and twice the smaller of the
# two, or fails naming WHAT. The sum is the ceiling; twice the slower process is what training
# in lockstep can reach on those two cores at that time (each step waits for the slower rank),
# which is lower when one core runs slower than the other, as a VM's cores may.
two_at_once() {  # field what accel_bench-args...
  local field=$1 what=$2 a b cpu0=() cpu1=(); shift 2
  [ ${#pin[@]} -gt 0 ] && { cpu0=(taskset -c 0); cpu1=(taskset -c 1); }
  "${heap_glibc[@]}" "${cpu0[@]}" "$build_dir/bench/accel_bench" "$@" >"$results/pair0.txt" 2>>"$results/stderr.txt" &
  local first=$!
  "${heap_glibc[@]}" "${cpu1[@]}" "$build_dir/bench/accel_bench" "$@" >"$results/pair1.txt" 2>>"$results/stderr.txt"
  wait "$first"
  a=$(tail -n 1 "$results/pair0.txt" | sed -n "s/.*$field=\([0-9.]*\).*/\1/p")
  b=$(tail -n 1 "$results/pair1.txt" | sed -n "s/.*$field=\([0-9.]*\).*/\1/p")
  [ -n "$a" ] && [ -n "$b" ] || { echo "run.sh: the pair run of $what failed; see $results/stderr.txt" >&2; exit 1; }
  awk -v a="$a" -v b="$b" 'BEGIN { print a + b, 2 * (a < b ? a : b) }'
}

run_pair() {  # model turn
  local model=$1 turn=$2 both sum lockstep
  both=$(two_at_once samples_per_s "$model" --model "$model" --nproc 1 \
    --steps "$(steps "$model" 1)" "${extra[@]}")
  read -r sum lockstep <<<"$both"
  echo "turn=$turn impl=pair model=$model world=2 samples_per_s=$sum" | tee -a "$raw" >&2
  echo "turn=$turn impl=lockstep model=$model world=2 samples_per_s=$lockstep" | tee -a "$raw" >&2
}

# --- gpt: world size 2, accel's strategies and PyTorch's, and the ceiling ---------------------------
gpt_accel=(ddp zero2 zero3 fsdp)
gpt_torch=(ddp fsdp-grad-op fsdp-full fsdp-no-shard)
gpt_skipped=" "  # PyTorch strategies this torch cannot run (ddp.py said why once)

gpt_timed_steps() {
  awk -v s="$gpt_steps" -v x="$scale" 'BEGIN { v = int(s * x); print (v < 1 ? 1 : v) }'
}

# --two-nodes: the namespaces, their link and the run of `cmd` on both.
node_ns=(); node_if=(); node_ip=(10.231.0.1 10.231.0.2)
make_two_nodes() {
  local i id=$$
  command -v ip >/dev/null && command -v nsenter >/dev/null ||
    { echo "run.sh: --two-nodes needs ip (iproute2) and nsenter (util-linux)" >&2; exit 1; }
  node_ns=("accel-bench0-$id" "accel-bench1-$id"); node_if=("ba$id" "bb$id")
  trap 'for n in "${node_ns[@]}"; do ip netns del "$n" 2>/dev/null; done' EXIT
  for i in 0 1; do
    ip netns add "${node_ns[i]}" || { echo "run.sh: --two-nodes: cannot make a network namespace (root?)" >&2; exit 1; }
  done
  ip link add "${node_if[0]}" type veth peer name "${node_if[1]}" ||
    { echo "run.sh: --two-nodes: cannot make a veth pair" >&2; exit 1; }
  for i in 0 1; do
    # nsenter rather than `ip netns exec`, which remounts /sys and fails inside a chroot.
    ip link set "${node_if[i]}" netns "${node_ns[i]}" &&
      nsenter --net="/run/netns/${node_ns[i]}" ip addr add "${node_ip[i]}/24" dev "${node_if[i]}" &&
      nsenter --net="/run/netns/${node_ns[i]}" ip link set "${node_if[i]}" up &&
      nsenter --net="/run/netns/${node_ns[i]}" ip link set lo up ||
      { echo "run.sh: --two-nodes: cannot configure the link" >&2; exit 1; }
  done
}

# Runs `cmd` with ARGS (which carry --nproc 2 and --pin: taken out here) as rank 0 in node 0 and
# rank 1 in node 1, each on its own core; prints rank 0's output.
on_two_nodes() {  # args...
  local args=() skip=0 a port first second
  for a in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$a" in --nproc) skip=1 ;; --pin) ;; *) args+=("$a") ;; esac
  done
  port=$(( 30000 + RANDOM % 20000 ))
  node_env() {  # rank
    echo env RANK="$1" LOCAL_RANK=0 GROUP_RANK="$1" WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR="${node_ip[0]}" MASTER_PORT="$port" GLOO_SOCKET_IFNAME="${node_if[$1]}" \
      ACCEL_BENCH_INIT="tcp://${node_ip[0]}:$port" USE_LIBUV=0  # Debian's torch has no libuv
  }
  # shellcheck disable=SC2046  # node_env's words
  nsenter --net="/run/netns/${node_ns[0]}" $(node_env 0) taskset -c 0 "${cmd[@]}" "${args[@]}" \
    >"$results/node0.txt" 2>>"$results/stderr.txt" &
  first=$!
  # shellcheck disable=SC2046
  nsenter --net="/run/netns/${node_ns[1]}" $(node_env 1) taskset -c 1 "${cmd[@]}" "${args[@]}" \
    >"$results/node1.txt" 2>>"$results/stderr.txt"
  second=$?
  wait "$first"; first=$?
  [ "$first" = 0 ] && [ "$second" = 0 ] ||
    { echo "run.sh: --two-nodes: node 0 exited $first, node 1 exited $second; see $results/stderr.txt" >&2; exit 1; }
  cat "$results/node0.txt"
}

run_gpt() {  # impl strategy turn
  local impl=$1 strategy=$2 turn=$3 out last cmd
  local args=(--model gpt --nproc 2 --strategy "$strategy" --steps "$(gpt_timed_steps)"
              --warmup "$gpt_warmup" "${gpt_size[@]}" "${pin[@]}" "${extra[@]}")
  case "$impl:$gpt_skipped" in torch*:*" $strategy "*) return 0 ;; esac
  # Between nodes accel's Zero3 and Fsdp prefetch the next unit, as FSDP at its best does: the
  # all-gather then overlaps computation (on one node it would only take a core from it).
  case "$two_nodes:$impl:$strategy" in 1:accel*:zero3 | 1:accel*:fsdp) args+=(--prefetch) ;; esac
  command_for "$impl"
  if [ "$two_nodes" = 1 ]; then
    out=$(on_two_nodes "${args[@]}")
  else
    out=$("${cmd[@]}" "${args[@]}" 2>>"$results/stderr.txt")
  fi
  last=$(printf '%s\n' "$out" | tail -n 1)
  case "$last" in
    steps_per_s=*) echo "turn=$turn impl=$impl strategy=$strategy $last" | tee -a "$raw_gpt" >&2 ;;
    skipped:*)
      gpt_skipped="$gpt_skipped$strategy "
      echo "turn=$turn impl=$impl strategy=$strategy skipped=${last#skipped: }" | tee -a "$raw_gpt" >&2 ;;
    *) echo "run.sh: $impl gpt --strategy $strategy gave no result line; see $results/stderr.txt" >&2; exit 1 ;;
  esac
}

# The ceiling: two independent one-process accel_bench runs at once, one per core.
run_gpt_pair() {  # turn
  local both sum lockstep
  both=$(two_at_once tokens_per_s gpt --model gpt --nproc 1 --steps "$(gpt_timed_steps)" \
    --warmup "$gpt_warmup" "${gpt_size[@]}" "${extra[@]}")
  read -r sum lockstep <<<"$both"
  echo "turn=$1 impl=pair strategy=one-process tokens_per_s=$sum" | tee -a "$raw_gpt" >&2
  echo "turn=$1 impl=lockstep strategy=one-process tokens_per_s=$lockstep" | tee -a "$raw_gpt" >&2
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
nodes_text="one node: accel's ranks through shared memory, PyTorch's over Gloo on loopback"
[ "$two_nodes" = 1 ] && nodes_text="two nodes: two network namespaces joined by a veth pair, one rank each, both sides over Gloo TCP on the link (--two-nodes); accel's Zero3 and Fsdp with --prefetch"
now() { date -u '+%Y-%m-%d %H:%M UTC'; }

# What the tables print of their conditions, besides the loads and the date.
# (--name=value: a value may start with a dash.)
conditions=(--machine="$machine" --leg="$leg_text" --commit="$commit" --command="$cmdline"
            --accel-optimizer="$accel_optimizer" --pin="${pin[*]:-unpinned}"
            --extra="${extra[*]:-none}")

echo "run.sh: $(nproc) cores, load $(load); leg $leg_text; commit $commit; ${pin[*]:-unpinned}; extra flags: ${extra[*]:-none}" >&2
other_models=$(printf '%s\n' $models | grep -vx gpt | tr '\n' ' ' || true)
if [ -n "$other_models" ]; then
  table_start=(--date="$(now)" --load-start="$(load)")
  for model in $other_models; do
    for turn in $(seq "$turns"); do
      for world in 1 2; do
        run_one accel "$model" "$world" "$turn"
        run_one torch "$model" "$world" "$turn"
        if [ "$best_only" = 0 ]; then
          run_one torch-defaults "$model" "$world" "$turn"
          run_one accel-glibc "$model" "$world" "$turn"
        fi
        if [ "$world" = 1 ] && [ "$plain" = 1 ]; then run_one plain "$model" 1 "$turn"; fi
        if [ "$world" = 2 ]; then run_pair "$model" "$turn"; fi
      done
    done
  done
  # accel_overhead limits torch's threads only: OpenBLAS's pool is limited here, as above.
  overhead_pin=()
  [ ${#pin[@]} -gt 0 ] && overhead_pin=(taskset -c 0)
  overhead=$(OPENBLAS_NUM_THREADS=1 "${heap_glibc[@]}" "${overhead_pin[@]}" \
    "$build_dir/bench/accel_overhead" --steps 100 --rounds 7 | tee "$results/overhead.txt")
  "$python" "$repo/bench/tables.py" models "$raw" "${conditions[@]}" "${table_start[@]}" \
    --load-end="$(load)" --turns "$turns" | tee "$results/table.md"
  printf '%s\n' "$overhead" | tail -n 1 | tee -a "$results/table.md"
fi

case " $models " in
  *" gpt "*)
    [ "$two_nodes" = 1 ] && make_two_nodes
    table_start=(--date="$(now)" --load-start="$(load)")
    for turn in $(seq "$gpt_turns"); do
      for i in "${!gpt_accel[@]}"; do
        run_gpt accel "${gpt_accel[i]}" "$turn"
        run_gpt torch "${gpt_torch[i]}" "$turn"
        if [ "$best_only" = 0 ]; then
          run_gpt torch-defaults "${gpt_torch[i]}" "$turn"
          run_gpt accel-glibc "${gpt_accel[i]}" "$turn"
        fi
      done
      run_gpt_pair "$turn"
    done
    "$python" "$repo/bench/tables.py" gpt "$raw_gpt" "${conditions[@]}" "${table_start[@]}" \
      --load-end="$(load)" --turns "$gpt_turns" --size="${gpt_size[*]}" \
      --steps "$(gpt_timed_steps)" --nodes="$nodes_text" | tee "$results/table-gpt.md" ;;
esac
echo "run.sh: raw results in $results" >&2
