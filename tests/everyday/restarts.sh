#!/usr/bin/env bash
# accel-launch --max-restarts: a failed group is started again with ACCEL_RESTART_COUNT, up to the
# limit, and then gives up with the failure's status; bad values are refused. On two launchers
# (two "nodes" on this machine), node 1's launcher killed: with --nnodes 1:2 node 0 goes on alone
# with the new WORLD_SIZE and RANK, with --nnodes 2 it ends with the error naming the numbers.
#   restarts.sh ACCEL_LAUNCH WORK_DIR
set -euo pipefail
launch="$1"; work="$2"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "restarts.sh: $*" >&2; exit 1; }

# Rank 1 is killed on the first start while rank 0 is still working (blocked until stopped);
# rank 1 dies only once rank 0 has printed (it hands a line over a FIFO). Rank 0 reports its
# progress as accel's Accelerator does (runtime/progress_record.hpp): step 7 reached, step 6
# committed; then resumed from step 6 on the second start.
mkfifo started
worker='echo "rank $RANK start $ACCEL_RESTART_COUNT of $ACCEL_MAX_RESTARTS torchelastic $TORCHELASTIC_RESTART_COUNT"
if [ "$ACCEL_RESTART_COUNT" = 0 ]; then
  if [ "$RANK" = 1 ]; then read -r line <started; kill -9 $$; fi
  printf "steps 7\ncommitted 6 ck/checkpoint_3\n" >"$ACCEL_PROGRESS_FILE"
  echo go >started; exec tail -f /dev/null
elif [ "$RANK" = 0 ]; then
  printf "steps 9\nresumed 6 ck/checkpoint_3\ncommitted 8 ck/checkpoint_4\n" >"$ACCEL_PROGRESS_FILE"
fi'
status=0
"$launch" --nproc 2 --max-restarts 2 -- sh -c "$worker" >out 2>err || status=$?
[ "$status" = 0 ] || fail "status $status: $(cat out err)"
for rank in 0 1; do
  grep -qx "rank $rank start 0 of 2 torchelastic 0" out && grep -qx "rank $rank start 1 of 2 torchelastic 1" out ||
    fail "rank $rank did not start twice: $(cat out)"
done
! grep -q "start 2 of 2" out || fail "a third start after a success: $(cat out)"
grep -q "rank 1 (pid [0-9]*) failed first: killed by signal SIGKILL (root cause)" err &&
  grep -q "rank 0 (pid [0-9]*): terminated by the launcher with SIGTERM" err &&
  [ "$(grep -c 'accel-launch: restart 1 of 2: starting every worker again (ACCEL_RESTART_COUNT=1)' err)" = 1 ] ||
  fail "stderr: $(cat err)"
# What the restart cost, from the progress records.
grep -qxF "accel-launch: start 1 ended at step 7; the newest committed checkpoint holds step 6 ('ck/checkpoint_3')" err &&
  grep -qx "accel-launch: restart 1: rank 1 (pid [0-9]*) failed first: killed by signal SIGKILL at step 7; start 2 resumed from step 6 ('ck/checkpoint_3'): 1 step redone" err &&
  grep -qx "accel-launch: 1 restart, 1 step redone in all" err || fail "no restart report: $(cat err)"

# Always failing: K + 1 starts, then the failure's status.
status=0
"$launch" --nproc 2 --max-restarts 1 -- sh -c 'echo "start $ACCEL_RESTART_COUNT"; exit 3' >out 2>err || status=$?
# (A rank may be stopped before it prints, once its peer has failed: count starts, not lines.)
[ "$status" = 3 ] && grep -q '^start 0$' out && grep -q '^start 1$' out && ! grep -q '^start 2$' out &&
  [ "$(grep -c 'restart 1 of 1' err)" = 1 ] &&
  grep -q "giving up after 1 restart (--max-restarts 1)" err || fail "status $status: $(cat out err)"
# A program that writes no progress record: nothing said about steps.
! grep -q "redone\\|ended at step" err || fail "steps reported without a record: $(cat err)"

# Without --max-restarts a failure is final, as before.
status=0
"$launch" --nproc 2 -- sh -c 'exit 4' >out 2>err || status=$?
[ "$status" = 4 ] && ! grep -q restart err || fail "status $status: $(cat err)"

# A program that cannot start is not restarted.
status=0
"$launch" --nproc 2 --max-restarts 3 -- ./no-such-program >out 2>err || status=$?
[ "$status" = 127 ] && ! grep -q "restart 1" err || fail "status $status: $(cat err)"

expect_refused() {  # expect_refused MESSAGE ARGS...
  local message="$1"; shift
  local status=0
  "$launch" "$@" -- true 2>err || status=$?
  [ "$status" = 2 ] && grep -qF -- "$message" err || fail "$*: status $status: $(cat err)"
}
expect_refused "--max-restarts -1 is out of range" --max-restarts -1
expect_refused "--max-restarts 'x' is not a whole number" --max-restarts x

# Two nodes: on the first start the only rank of node $LOST kills its launcher and itself (the
# node is gone), the other node's fails a moment later as on a broken connection.
node_worker='echo "rank $RANK of $WORLD_SIZE on node $GROUP_RANK start $ACCEL_RESTART_COUNT"
if [ "$ACCEL_RESTART_COUNT" = 0 ]; then
  if [ "$GROUP_RANK" = "$LOST" ]; then kill -9 $PPID; kill -9 $$; fi
  sleep 1; exit 1
fi'
two_nodes() {  # two_nodes NNODES LOST DEADLINE: the other node's status in $status, its output in out and err
  local port=$((20000 + RANDOM % 20000))
  local common=(--nnodes "$1" --nproc 1 --master-addr 127.0.0.1 --master-port "$port"
                --max-restarts 1 --rendezvous-deadline "$3" --grace 0)
  local kept=$((1 - $2)) lost=0
  LOST=$2 "$launch" "${common[@]}" --node-rank "$kept" -- sh -c "$node_worker" >out 2>err &
  local survivor=$!
  LOST=$2 "$launch" "${common[@]}" --node-rank "$2" -- sh -c "$node_worker" >out1 2>err1 || lost=$?
  [ "$lost" = 137 ] || fail "node $2's launcher: status $lost, not killed: $(cat out1 err1)"
  status=0
  wait "$survivor" || status=$?
}
two_nodes 1:2 1 2
[ "$status" = 0 ] && grep -qx "rank 0 of 2 on node 0 start 0" out &&
  grep -qx "rank 0 of 1 on node 0 start 1" out &&
  grep -qxF "accel-launch: node 1 did not come to start 2 within --rendezvous-deadline 2: the world shrinks from 2 to 1 ranks (1 node; this node is node 0 now)" err &&
  grep -qxF "accel-launch: start 2 ran on 1 rank (1 node): the world shrank from 2 ranks (2 nodes) to 1" err ||
  fail "--nnodes 1:2 without node 1: status $status: $(cat out err)"
two_nodes 2 1 2
[ "$status" = 2 ] && ! grep -q "start 1$" out &&
  grep -qxF "accel: the nodes' rendezvous of start 2: 1 of 2 nodes came within --rendezvous-deadline 2 (node 1 did not), fewer than MIN = 2 of --nnodes 2:2; lower MIN (e.g. --nnodes 1:2) to go on with fewer nodes, raise --rendezvous-deadline if a node comes back later, or start the job again once the nodes are back" err ||
  fail "--nnodes 2 without node 1: status $status: $(cat out err)"
# Node 0 hosts the meeting: without it node 1 cannot go on, and says so once it has waited
# 2 x 1 s + 0 s of grace (and a second).
two_nodes 1:2 0 1
[ "$status" = 2 ] && grep -qx "rank 1 of 2 on node 1 start 0" out && ! grep -q "start 1$" out &&
  grep -qF "accel: node 0's launcher, which hosts the nodes' rendezvous at 127.0.0.1:" err &&
  grep -qF "did not answer node 1 before start 2 within 2 x --rendezvous-deadline + --grace; a job that loses node 0 cannot go on" err ||
  fail "--nnodes 1:2 without node 0: status $status: $(cat out err)"
# A node whose launcher joins the next start and is killed while it waits for node 0 (node 0's
# rank still runs): node 0 finds its connection closed and goes on without it.
port=$((20000 + RANDOM % 20000))
waiting_worker='echo "rank $RANK of $WORLD_SIZE start $ACCEL_RESTART_COUNT"
if [ "$ACCEL_RESTART_COUNT" = 0 ]; then
  if [ "$GROUP_RANK" = 1 ]; then exit 1; fi
  sleep 2; exit 1
fi'
common=(--nnodes 1:2 --nproc 1 --master-addr 127.0.0.1 --master-port "$port" --max-restarts 1
        --rendezvous-deadline 2 --grace 0)
"$launch" "${common[@]}" --node-rank 0 -- sh -c "$waiting_worker" >out 2>err &
survivor=$!
"$launch" "${common[@]}" --node-rank 1 -- sh -c "$waiting_worker" >out1 2>err1 &
lost=$!
sleep 1
kill -9 "$lost"
status=0
wait "$survivor" || status=$?
[ "$status" = 0 ] && grep -qx "rank 0 of 1 start 1" out && grep -q "the world shrinks from 2 to 1" err ||
  fail "node 1 gone while it waited: status $status: $(cat out err)"
echo "restarts: ok"
