#!/usr/bin/env bash
# The training loop's stall per checkpoint, background (--async-checkpoint) against blocking
# saves, on the GPT example's 25.4M-parameter model (hidden 512, 8 blocks, seq 128, batch 4 per
# rank, AdamW) on 2 ranks (docs/how-to/fault-tolerance.md).
#
#   bench/async_checkpoint.sh [--steps N] [--every K] [--turns T] [--strategy S] [--nproc P]
#                             [--threads T] [--build-dir DIR] [--dir FOLDER]
#
# Per turn (default 3) it runs the example three times, --steps N (default 40) each: without
# checkpoints, with a blocking save every K steps (default 5), and with a background save every K
# steps. The loop's stall per save is read directly: the example prints how long its loop waited
# for batches, and the prepared loader takes the periodic saves between two batches, so
# (wait with saves - wait without) / saves is all of a blocking save and a background save's
# snapshot (with any wait for the previous write). The step time comes from the example's
# "trained N steps in X s" (evaluation and the final save left out), less the waits: the
# background write's own CPU work shows there, when it takes a core from the steps beside it.
# Printed per turn and as medians (with the range over the turns): the background stall as a
# share of the blocking one (target: at most 15%), and the mean step time of the background run
# against the run without saves (target: within 10%). --dir picks the checkpoint folder's disk
# (default: the build folder).
# --nproc picks the ranks (default 2) and --threads each rank's OMP_NUM_THREADS (default: the
# launcher's share of the cores): `--nproc 1 --threads 1` on two cores leaves the background
# writer a core of its own, as a GPU run leaves it the host's cores.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo/build"
steps=40
every=5
turns=3
strategy=ddp
nproc=2
threads=""
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --strategy) strategy=$2; shift 2 ;;
    --nproc) nproc=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "async_checkpoint.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
gpt="$build_dir/examples/gpt/gpt"
[ -x "$gpt" ] || { echo "async_checkpoint.sh: build the gpt target first ($gpt)" >&2; exit 2; }
work=$(mktemp -d "${dir:-$build_dir}/async_checkpoint.XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -n "$threads" ] && export OMP_NUM_THREADS=$threads
model=(--nproc "$nproc" --strategy "$strategy" --layers 8 --hidden 512 --heads 8 --seq 128
       --batch-size 4 --steps "$steps" --eval-windows 64 --sample-tokens 0 --no-progress)
saves=$(( (steps - 1) / every ))

trained() { grep -o 'trained [0-9]* steps in [0-9.]* s' <<<"$1" | awk '{print $5}'; }
waited() { grep -o 'waited [0-9.]* s for batches' <<<"$1" | awk '{print $2}'; }
# A run's stall (its waits) and its step time less the waits, as "wait step".
measure() {
  local out
  out=$("$gpt" "${model[@]}" "$@")
  awk -v t="$(trained "$out")" -v w="$(waited "$out")" -v steps="$steps" \
    'BEGIN { printf "%.4f %.4f\n", w, (t - w) / steps }'
}
stats() {  # median (min to max) of the numbers on stdin
  sort -g | awk '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f (%.3f to %.3f)", m, v[1], v[NR] }'
}

shares=() slowdowns=() sync_stalls=() async_stalls=()
for ((turn = 1; turn <= turns; ++turn)); do
  read -r w0 s0 < <(measure)
  rm -rf "$work/ck"
  read -r wb sb < <(measure --checkpoint-dir "$work/ck" --checkpoint-every "$every")
  rm -rf "$work/ck"
  read -r wa sa < <(measure --checkpoint-dir "$work/ck" --checkpoint-every "$every" --async-checkpoint)
  read -r sync async share slowdown < <(awk -v w0="$w0" -v wb="$wb" -v wa="$wa" -v s0="$s0" \
    -v sa="$sa" -v saves="$saves" 'BEGIN {
      sync = (wb - w0) / saves; async = (wa - w0) / saves
      printf "%.4f %.4f %.2f %.2f\n", sync, async, 100 * async / sync, 100 * (sa - s0) / s0 }')
  sync_stalls+=("$sync") async_stalls+=("$async") shares+=("$share") slowdowns+=("$slowdown")
  echo "turn $turn: stall per save blocking ${sync} s, background ${async} s (${share}%);" \
       "step ${s0} s without saves, ${sa} s with background saves (${slowdown}%)"
done
echo "stall per save ($saves saves a run, medians of $turns turns, min to max):" \
     "blocking $(printf '%s\n' "${sync_stalls[@]}" | stats) s," \
     "background $(printf '%s\n' "${async_stalls[@]}" | stats) s"
echo "background stall / blocking stall: $(printf '%s\n' "${shares[@]}" | stats)% (target <= 15%)"
echo "step time with background saves against none: $(printf '%s\n' "${slowdowns[@]}" | stats)%" \
     "(target within 10%)"
