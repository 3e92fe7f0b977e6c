#!/usr/bin/env bash
# Checkpoint phases in new processes each (worker_checkpoint.cpp):
#   checkpoint.sh LAUNCHER WORKER resume STRATEGY NPROC   save, then resume in new processes
#   checkpoint.sh LAUNCHER WORKER reshard                 saved by each strategy at one world
#                                                         size, loaded by others at others
#   checkpoint.sh LAUNCHER WORKER kill                    rank 0 killed mid-save, then resumed
#   checkpoint.sh LAUNCHER WORKER groups                  AdamW param groups saved by Zero3 on
#                                                         2 ranks, loaded by Zero2 on 3 and 1
#                                                         and by Zero3 on 3
set -euo pipefail
launcher=$1 worker=$2 mode=$3
shift 3
ACCEL_TEST_DIR=$(mktemp -d)
export ACCEL_TEST_DIR
trap 'rm -rf "$ACCEL_TEST_DIR"' EXIT
run() {  # run NPROC SCENARIO
  echo "--- $2 on $1 processes"
  "$launcher" --nproc "$1" -- "$worker" "$2"
}

case "$mode" in
  resume)
    run "$2" "save_$1"
    run "$2" "resume_$1"
    ;;
  reshard)
    for source in "ddp 2" "zero2 2" "zero3 3"; do
      read -r strategy nproc <<<"$source"
      rm -rf "${ACCEL_TEST_DIR:?}"/*
      run "$nproc" "save_$strategy"
      for target in "zero3 1" "zero2 3" "ddp 3" "zero3 2"; do
        read -r to m <<<"$target"
        run "$m" "reshard_$to"
      done
    done
    ;;
  groups)
    run 2 save_groups_zero3
    run 3 load_groups_zero2
    run 1 load_groups_zero2
    run 3 load_groups_zero3
    ;;
  kill)
    if run 2 kill_in_save; then
      echo "checkpoint.sh: kill_in_save should have failed (rank 0 is killed)" >&2
      exit 1
    fi
    run 2 after_kill
    ;;
  *) echo "checkpoint.sh: unknown mode $mode" >&2; exit 2 ;;
esac
echo "checkpoint.sh $mode: passed"
