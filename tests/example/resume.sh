#!/usr/bin/env bash
# The example's resume is exact: 10 steps straight and 5 steps + checkpoint + 5 resumed steps (in
# new processes) end with the same param_digest.
#   resume.sh FASHION_MNIST [ARGS...]   (ARGS: the strategy, processes, ... of all three runs)
set -euo pipefail
example=$1; shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
digest() { grep -o 'param_digest=[0-9a-f]*' <<<"$1"; }
straight=$("$example" --steps 10 "$@")
first=$("$example" --steps 5 --checkpoint-dir "$dir" "$@")
resumed=$("$example" --steps 10 --checkpoint-dir "$dir" --resume "$@")
printf '%s\n--- first half\n%s\n--- resumed\n%s\n' "$straight" "$first" "$resumed"
grep -q "resumed from $dir/checkpoint_0 at step 5" <<<"$resumed"
if [ "$(digest "$straight")" != "$(digest "$resumed")" ]; then
  echo "resume.sh: $(digest "$resumed") after resuming, $(digest "$straight") straight" >&2
  exit 1
fi
echo "resume.sh: $(digest "$resumed") both ways"
