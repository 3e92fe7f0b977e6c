#!/usr/bin/env bash
# Starts N ranks of a command with torchrun-style variables set by hand (no launcher), the
# rendezvous in a private folder, and fails if any rank fails. Proves the runtime works without
# accel-launch, under any launcher that sets these variables.
#   run-by-hand.sh N CMD [ARGS...]
set -u
n=$1; shift
dir=$(mktemp -d); chmod 700 "$dir"
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n GROUP_RANK=0 \
    ACCEL_STORE_DIR=$dir "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
rm -rf "$dir"
exit $status
