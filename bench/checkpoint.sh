#!/usr/bin/env bash
# save_state / load_state against PyTorch's torch.save / torch.load of the same training state
# (the mlp of accel_bench with Adam; default 3072 x 6, 49.6M parameters), at world size 2.
#
#   bench/checkpoint.sh [--turns N] [--strategies "ddp zero2 zero3"] [--hidden H] [--layers L]
#                       [--build-dir DIR] [--dir FOLDER] [--merge]
#
# --merge instead times consolidating a checkpoint's weights: `accel-launch checkpoint
# merge` of the folder save_state wrote (one process, wall time including its start) against
# what a training program does (load_state, then save_model: accel_bench --save-model, timed
# inside the running program, so without its start or the model's build), for each strategy of
# --strategies (default for --merge: zero3), and checks that both wrote the same bytes.
#
# In alternating turns (accel under each strategy, then PyTorch; --turns each, default 3) it runs
# build/bench/accel_bench --checkpoint and bench/reference/ddp.py --checkpoint, takes the median
# save and load times of each, and prints them with the ratio PyTorch / accel (above 1: accel is
# faster). PyTorch's side is what Accelerate's save_state does under DDP: rank 0 torch.save()s the
# model's and the optimizer's state_dict (no fsync), every rank torch.load()s it and calls
# load_state_dict. accel's side is the whole crash-safe protocol: every rank writes its file,
# fsyncs it, the manifest is written and fsynced, the folder renamed; on load every file is read,
# checksummed and staged before anything changes. --dir picks the folder (default: a new one in
# the build folder, on the same disk as a real run's checkpoints would be).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo/build"
turns=3
strategies="ddp zero2 zero3"
hidden=3072
layers=6
dir=""
merge=0
strategies_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --merge) merge=1; shift ;;
    --turns) turns=$2; shift 2 ;;
    --strategies) strategies=$2; strategies_given=1; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --build-dir) build_dir=$(cd "$2" && pwd); shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "bench/checkpoint.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || dir=$(mktemp -d "$build_dir/checkpoint-bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
common=(--nproc 2 --optimizer adam --model mlp --hidden "$hidden" --layers "$layers" --batch 32
        --steps 1 --warmup 1)

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { grep -o "$1=[0-9.]*" | cut -d= -f2; }

if [ "$merge" = 1 ]; then
  [ "$strategies_given" = 1 ] || strategies=zero3
  declare -A tool program
  for turn in $(seq "$turns"); do
    for s in $strategies; do
      rm -rf "${dir:?}"/*
      out=$("$build_dir/bench/accel_bench" "${common[@]}" --strategy "$s" --checkpoint "$dir" \
            --save-model)
      load_s=$(field load_s <<<"$out") save_model_s=$(field save_model_s <<<"$out")
      program[$s]+="$(awk -v l="$load_s" -v m="$save_model_s" 'BEGIN { print l + m }') "
      start=$(date +%s.%N)
      "$build_dir/tools/accel-launch" checkpoint merge "$dir/state" "$dir/merged" >/dev/null
      merge_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
      tool[$s]+="$merge_s "
      for f in "$dir"/model/*; do
        cmp -s "$f" "$dir/merged/$(basename "$f")" ||
          { echo "bench/checkpoint.sh: merge and save_model wrote different $(basename "$f")" >&2; exit 1; }
      done
      echo "turn $turn $s: load_state ${load_s} s + save_model ${save_model_s} s; checkpoint merge ${merge_s} s; same bytes"
    done
  done
  m() { tr ' ' '\n' <<<"$1" | grep . | median; }
  printf '\n| %-12s | %22s | %24s | %10s |\n' "median of $turns" "load_state + save_model" "accel-launch checkpoint merge" "merge vs"
  printf '|%s|%s|%s|%s|\n' "--------------" "------------------------" "-------------------------------" "------------"
  for s in $strategies; do
    p=$(m "${program[$s]}") t=$(m "${tool[$s]}")
    printf '| %-12s | %20.3f s | %27.3f s | %9.2fx |\n' "$s" "$p" "$t" \
      "$(awk -v p="$p" -v t="$t" 'BEGIN { print p / t }')"
  done
  exit 0
fi

declare -A save load
for turn in $(seq "$turns"); do
  for s in $strategies; do
    rm -rf "${dir:?}"/*
    out=$("$build_dir/bench/accel_bench" "${common[@]}" --strategy "$s" --checkpoint "$dir")
    save[$s]+="$(field save_s <<<"$out") "
    load[$s]+="$(field load_s <<<"$out") "
    echo "turn $turn accel $s: $(grep '^checkpoint:' <<<"$out")"
  done
  rm -rf "${dir:?}"/*
  out=$(/usr/bin/python3 "$repo/bench/reference/ddp.py" "${common[@]}" --checkpoint "$dir")
  save[torch]+="$(field save_s <<<"$out") "
  load[torch]+="$(field load_s <<<"$out") "
  echo "turn $turn torch.save/torch.load: $(grep '^checkpoint:' <<<"$out")"
done

m() { tr ' ' '\n' <<<"$1" | grep . | median; }
torch_save=$(m "${save[torch]}") torch_load=$(m "${load[torch]}")
printf '\n| %-28s | %8s | %8s | %14s | %14s |\n' "2 ranks, median of $turns" "save s" "load s" "save vs torch" "load vs torch"
printf '|%s|%s|%s|%s|%s|\n' "------------------------------" "----------" "----------" "----------------" "----------------"
printf '| %-28s | %8.3f | %8.3f | %14s | %14s |\n' "torch.save / torch.load" "$torch_save" "$torch_load" "1.00x" "1.00x"
for s in $strategies; do
  a_save=$(m "${save[$s]}") a_load=$(m "${load[$s]}")
  printf '| %-28s | %8.3f | %8.3f | %13.2fx | %13.2fx |\n' "accel $s" "$a_save" "$a_load" \
    "$(awk -v t="$torch_save" -v a="$a_save" 'BEGIN { print t / a }')" \
    "$(awk -v t="$torch_load" -v a="$a_load" 'BEGIN { print t / a }')"
done
