#!/usr/bin/env bash
# --tp against one process on the same global batch: the same model, the same windows in the same
# order, a few steps, then a sample from the prepared model (under --sequence-parallel its
# contexts padded to a multiple of --tp); the final validation loss (metrics.jsonl's, all its
# digits) within 1e-5 relative. Not the param_digest: split, the layers' matrix products add up their terms in
# another order (a row layer's partial products are summed across the group), so the weights
# differ in the last bits.
#   tensor-parallel.sh CASE GPT [ARGS...]   (ARGS: the model and batch of every run)
#   CASE  nproc2             --tp 2 on 2 processes (one group) against --nproc 1
#         zero3.nproc4       --tp 2 --strategy zero3 on 4 processes (two groups) against
#                            --nproc 1 with the two groups' batches in one
#         sequence.nproc2    nproc2 with --sequence-parallel
set -euo pipefail
case=$1 gpt=$2; shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "tensor-parallel.sh: $*" >&2; exit 1; }
batch=$(printf '%s\n' "$@" | grep -A1 -x -- --batch-size | tail -1)
[ -n "$batch" ] || fail "ARGS must give --batch-size"
case $case in
  nproc2) reference=(--batch-size "$batch"); split=(--nproc 2 --tp 2) ;;
  zero3.nproc4) reference=(--batch-size $((2 * batch))); split=(--nproc 4 --tp 2 --strategy zero3) ;;
  sequence.nproc2) reference=(--batch-size "$batch"); split=(--nproc 2 --tp 2 --sequence-parallel) ;;
  *) fail "unknown case '$case'" ;;
esac
# The last validation loss a run logged, as metrics.jsonl holds it.
val_loss() {
  grep -ho '"val_loss": *[-0-9.e+]*' "$dir/$1"/gpt/run/metrics.jsonl | tail -1 | sed 's/.*: *//'
}
run() {
  local name=$1; shift
  out=$("$gpt" "$@" --log-dir "$dir/$name" --run-name run 2>&1) ||
    { printf '%s\n' "$out"; fail "the $name run failed: $gpt $*"; }
  printf '%s\n' "$out" | grep -E "^training|val_loss="
}
# A weight decay large enough that the split layers' weights left out of it (the param groups
# of model.cpp's weight_decay_groups) move the loss well past the bound: 0 against 10 moves it
# by about 2e-4 of itself in these 4 steps, 0.1 by 2e-6.
run one "$@" --weight-decay 10 "${reference[@]}"
run split "$@" --weight-decay 10 "${split[@]}"
want=$(val_loss one) got=$(val_loss split)
awk -v a="$want" -v b="$got" 'BEGIN {
  d = (a - b) / a; exit !(a != "" && b != "" && a > 0 && d < 1e-5 && d > -1e-5) }' ||
  fail "val_loss $got with ${split[*]}, $want on one process: more than 1e-5 apart (relative)"
echo "tensor-parallel.sh: val_loss $got with ${split[*]}, $want on one process"
