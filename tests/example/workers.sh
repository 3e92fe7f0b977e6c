#!/usr/bin/env bash
# The loader's worker threads change nothing but speed: the same run with --workers 0, 1 and 3
# ends with the same param_digest (the same batches in the same order, bitwise).
#   workers.sh FASHION_MNIST [ARGS...]   (ARGS: the rest of every run's flags)
set -euo pipefail
example=$1; shift
digest() { grep -o 'param_digest=[0-9a-f]*' <<<"$1"; }
reference=$("$example" --workers 0 "$@")
echo "--workers 0: $(digest "$reference")"
for workers in 1 3; do
  run=$("$example" --workers "$workers" "$@")
  echo "--workers $workers: $(digest "$run")"
  if [ -z "$(digest "$run")" ] || [ "$(digest "$run")" != "$(digest "$reference")" ]; then
    printf '%s\n--- with --workers 0\n%s\n' "$run" "$reference"
    echo "workers.sh: --workers $workers ends with $(digest "$run"), --workers 0 with $(digest "$reference")" >&2
    exit 1
  fi
done
