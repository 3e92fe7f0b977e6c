#!/usr/bin/env bash
# Checkpoint phases in new processes each (worker_checkpoint.cpp):
#   checkpoint.sh LAUNCHER WORKER resume STRATEGY NPROC   save, then resume in new processes
#   checkpoint.sh LAUNCHER WORKER reshard                 saved by each strategy at one world
#                                                         size, loaded by others at others
#   checkpoint.sh LAUNCHER WORKER kill                    rank 0 killed mid-save, then resumed
#   checkpoint.sh LAUNCHER WORKER lock                    a run on a folder another holds stops
#                                                         as its Accelerators are made
#   checkpoint.sh LAUNCHER WORKER groups                  AdamW param groups saved by Zero3 on
#                                                         2 ranks, loaded by Zero2 on 3 and 1
#                                                         and by Zero3 on 3
#   checkpoint.sh LAUNCHER TP_WORKER tensor_parallel
#                                                         worker_tensor_parallel.cpp's phases:
#                                                         saved on a mesh (data-parallel x
#                                                         tensor-parallel), loaded on others
#                                                         and saved again, the same tensors;
#                                                         the command line on them
#   checkpoint.sh LAUNCHER WORKER tool [refusals]         the groups saved by Zero3 on 2 ranks,
#                                                         read by `accel-launch checkpoint`:
#                                                         the C++ calls (checkpoint_tool), then
#                                                         the command line and its exit codes;
#                                                         and its weights loaded rank-locally
#                                                         (load_model_zero3 on 2 and 3 ranks)
set -euo pipefail
launcher=$1 worker=$2 mode=$3
shift 3
ACCEL_TEST_DIR=$(mktemp -d)
export ACCEL_TEST_DIR
trap 'rm -rf "$ACCEL_TEST_DIR"' EXIT
expect() {  # expect STATUS PATTERN COMMAND...: its exit status, and PATTERN in its output;
            # never a C++ stack trace or an uncaught exception
  local status=$1 pattern=$2 out code=0; shift 2
  out=$("$@" 2>&1) || code=$?
  echo "$out"
  if [ "$code" != "$status" ] || ! grep -qE -- "$pattern" <<<"$out" ||
     grep -qE "terminate called|Exception raised from|frame #[0-9]" <<<"$out"; then
    echo "checkpoint.sh: '$*' exited $code (expected $status) or did not print /$pattern/" >&2
    exit 1
  fi
}
limited() {  # limited COMMAND...: with at most 8 GiB of address space (a runaway allocation
             # fails at once instead of filling the machine)
  (ulimit -v 8388608 && exec "$@")
}
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
    # Each source saves in a folder of its own; then each target loads them all in one launch.
    for source in "ddp 2" "zero2 2" "zero3 3"; do
      read -r strategy nproc <<<"$source"
      mkdir "$ACCEL_TEST_DIR/from_$strategy"
      (ACCEL_TEST_DIR=$ACCEL_TEST_DIR/from_$strategy && run "$nproc" "save_$strategy")
    done
    for target in "zero3 1" "zero2 3" "ddp 3" "zero3 2"; do
      read -r to m <<<"$target"
      run "$m" "reshard_$to"
    done
    ;;
  groups)
    run 2 save_groups_zero3
    run 3 load_groups_zero2
    run 1 load_groups_zero2
    run 3 load_groups_zero3
    ;;
  tool)
    run 2 save_groups_zero3
    run 1 checkpoint_tool
    run 2 load_model_zero3
    run 3 load_model_zero3
    run 2 load_model_ddp
    dir=$ACCEL_TEST_DIR
    expect 0 "groups: whole" "$launcher" checkpoint verify "$dir/groups"
    expect 0 "Zero3 \+ Fp32 \+ GradAccum<1> on 2 processes" "$launcher" checkpoint inspect "$dir/groups"
    expect 0 "model #0's weights" "$launcher" checkpoint merge "$dir/groups" "$dir/cli" --max-shard-size 256B
    for file in "$dir"/groups_model_sharded/*; do cmp "$file" "$dir/cli/$(basename "$file")"; done
    expect 1 "tensors? differs?$" "$launcher" checkpoint diff "$dir/groups" "$dir/groups_end"
    expect 0 "^0 tensors differ$" "$launcher" checkpoint diff "$dir/groups" "$dir/groups"
    expect 1 "rank_1.safetensors' has checksum" "$launcher" checkpoint verify "$dir/flipped"
    expect 2 "rank_1.safetensors' has checksum" "$launcher" checkpoint merge "$dir/flipped" "$dir/cli2"
    # A NaN equals a NaN at the same place; against a number it differs, counted.
    expect 0 "equal, 1 NaN at the same places" "$launcher" checkpoint diff "$dir/nan" "$dir/nan"
    expect 0 "^0 tensors differ$" "$launcher" checkpoint diff "$dir/nan" "$dir/nan"
    expect 1 "NaN: 1 in A, 0 in B" "$launcher" checkpoint diff "$dir/nan" "$dir/groups"
    expect 1 "^1 tensor differs$" "$launcher" checkpoint diff "$dir/nan" "$dir/groups"
    expect 0 "model #0's weights" "$launcher" checkpoint merge "$dir/groups" "$dir/out5" \
      --max-shard-size 18446744073709551615
    # The refusals of bad arguments and hostile manifests, made before any tensor is read: with
    # `tool refusals` (ACCEL_TORCH_NEUTRAL_TESTS, tests/CMakeLists.txt).
    [ "${1:-}" = refusals ] || exit 0
    expect 2 "exists and is not an empty folder" "$launcher" checkpoint merge "$dir/groups" "$dir/cli"
    expect 2 "--max-shard-size '2XB' is not a size" "$launcher" checkpoint merge "$dir/groups" "$dir/cli3" --max-shard-size 2XB
    expect 2 "unknown subcommand 'check'" "$launcher" checkpoint check "$dir/groups"
    # Hostile copies (worker_checkpoint.cpp, write_hostile_checkpoints): refused from the
    # manifest, before anything is sized by it, with an accel: line and exit 2 (verify: 1, the
    # problem listed).
    neg="gives '.*' of model #0 the shape \[-1, 8\], whose dimension -1 is negative"
    expect 1 "$neg" "$launcher" checkpoint verify "$dir/neg_dim"
    expect 2 "^accel: checkpoint inspect: .*$neg" "$launcher" checkpoint inspect "$dir/neg_dim"
    expect 2 "^accel: checkpoint merge: .*$neg" "$launcher" checkpoint merge "$dir/neg_dim" "$dir/out1"
    expect 2 "^accel: checkpoint diff: .*$neg" "$launcher" checkpoint diff "$dir/groups" "$dir/neg_dim"
    huge="the shape \[4611686018427387904, 4\], whose element count overflows 64 bits"
    expect 1 "$huge" "$launcher" checkpoint verify "$dir/huge_shape"
    expect 2 "$huge" "$launcher" checkpoint merge "$dir/huge_shape" "$dir/out2"
    expect 2 "$huge" "$launcher" checkpoint diff "$dir/huge_shape" "$dir/huge_shape"
    world="says world_size 200000000; a checkpoint comes from 1 to 1048576 processes"
    expect 1 "$world" limited "$launcher" checkpoint verify "$dir/huge_world"
    expect 2 "$world" limited "$launcher" checkpoint inspect "$dir/huge_world"
    expect 2 "$world" limited "$launcher" checkpoint merge "$dir/huge_world" "$dir/out3"
    for out in out1 out2 out3; do [ ! -e "$dir/$out" ] || { echo "checkpoint.sh: $out made" >&2; exit 1; }; done
    # An OUT that cannot be made is refused before the checkpoint is read.
    : >"$dir/a-file"
    expect 2 "^accel: checkpoint merge: cannot make or write the folder '$dir/a-file/out' \(.*\); nothing was read" \
      "$launcher" checkpoint merge "$dir/groups" "$dir/a-file/out"
    expect 2 "^accel: checkpoint merge: cannot make or write the folder '/proc/accel-merge-test'" \
      "$launcher" checkpoint merge "$dir/groups" /proc/accel-merge-test
    # Shard sizes of 2^64 bytes or more are refused, not wrapped around to 0 or 1 GiB.
    for size in 17179869184GiB 17179869185GiB 18446744073709551616; do
      expect 2 "^accel: accel-launch checkpoint: --max-shard-size '$size' is 2\^64 bytes \(16 EiB\) or more" \
        "$launcher" checkpoint merge "$dir/groups" "$dir/out4" --max-shard-size "$size"
    done
    [ ! -e "$dir/out4" ] || { echo "checkpoint.sh: out4 made" >&2; exit 1; }
    ;;
  tensor_parallel)
    phase() {  # phase NPROC SCENARIO FROM TO: FROM loaded (or nothing, "-"), TO saved
      echo "--- $2 on $1 processes: $3 -> $4"
      ACCEL_TEST_FROM=$3 ACCEL_TEST_TO=$4 "$launcher" --nproc "$1" -- "$worker" "$2"
    }
    # (dp 2, tp 2) to (dp 4, tp 1), (dp 1, tp 2) and one process; (dp 1, tp 2) and one process
    # back to (dp 2, tp 2).
    phase 4 tp_save_zero3 - dp2tp2
    phase 4 tp_reload_zero2_tp1 dp2tp2 dp4tp1
    phase 2 tp_reload_ddp_tp2 dp2tp2 dp1tp2
    phase 1 tp_reload_ddp dp2tp2 single
    phase 4 tp_reload_zero3_tp2 dp1tp2 dp2tp2_from_dp1tp2
    phase 1 tp_save_ddp - saved_single
    phase 4 tp_reload_ddp_tp2 saved_single dp2tp2_from_single
    phase 4 tp_auto_save - auto
    phase 4 tp_auto_resume auto -
    dir=$ACCEL_TEST_DIR
    expect 0 "mesh +2 data-parallel x 2 tensor-parallel" "$launcher" checkpoint inspect "$dir/dp2tp2"
    expect 0 "down1.weight +Float +\[8, 16\]  tensor-parallel: dim 1 split 2 ways, \[8, 8\] per rank" \
      "$launcher" checkpoint inspect "$dir/dp2tp2"
    expect 0 "dp2tp2: whole" "$launcher" checkpoint verify "$dir/dp2tp2"
    expect 0 "model #0's weights" "$launcher" checkpoint merge "$dir/dp2tp2" "$dir/merged"
    for file in "$dir"/dp2tp2_model/*; do cmp "$file" "$dir/merged/$(basename "$file")"; done
    expect 0 "^0 tensors differ$" "$launcher" checkpoint diff "$dir/dp2tp2" "$dir/single"
    ;;
  lock)
    # A second run on a checkpoint folder that a running one holds (here flock(1), as a run's
    # main process holds it) stops when its Accelerator is made, on every rank, before it
    # trains: the Options::checkpoints.directory error, not save_state's.
    mkdir -p "$ACCEL_TEST_DIR/auto"
    flock -o "$ACCEL_TEST_DIR/auto/.accel-lock" \
      -c "echo \$\$ > '$ACCEL_TEST_DIR/holder'; exec sleep 120" &
    holder=$!
    trap 'kill "$holder" $(cat "$ACCEL_TEST_DIR/holder" 2>/dev/null) 2>/dev/null; rm -rf "$ACCEL_TEST_DIR"' EXIT
    for _ in $(seq 100); do [ -s "$ACCEL_TEST_DIR/holder" ] && break; sleep 0.1; done
    code=0
    out=$("$launcher" --nproc 2 -- "$worker" kill_in_save 2>&1) || code=$?
    echo "$out"
    for pattern in "accel: Options::checkpoints.directory: the checkpoint folder '[^']*/auto' belongs to another run that is still running" \
                   "accel: Options::checkpoints.directory: rank 0 failed"; do
      if [ "$code" = 0 ] || ! grep -qE -- "$pattern" <<<"$out"; then
        echo "checkpoint.sh: the second run exited $code or did not print /$pattern/" >&2
        exit 1
      fi
    done
    if ls "$ACCEL_TEST_DIR/auto" | grep -q checkpoint_; then
      echo "checkpoint.sh: the second run wrote a checkpoint" >&2
      exit 1
    fi
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
