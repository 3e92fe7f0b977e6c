#!/usr/bin/env bash
# An elastic restart across two "nodes" (docs/how-to/fault-tolerance.md): two network namespaces
# joined by a veth pair (as tests/everyday/two_nodes.sh makes them), one accel-launch --nnodes 1:2
# --max-restarts 1 per namespace, one GPT rank each with checkpoints every 2 steps and
# --keep-global-batch 2. As step 5 begins, rank 1 kills its node's launcher and itself with
# SIGKILL: node 1 is gone. Node 0's rank fails on the broken connection, its launcher waits
# --rendezvous-deadline for node 1, goes on alone with 1 rank, and the program resumes from the
# step-4 checkpoint with --accum 2 (the same global batch). The run must end within 1e-3 of the
# uninterrupted two-rank run's validation loss; the parameters' digests are printed, not compared
# (the sums run in another order when the world changes).
# Exits 77 (skipped) with the reason where namespaces cannot be made (not root, no ip, a
# container without CAP_NET_ADMIN).
#   lose-node.sh LAUNCHER GPT [ARGS...]   (ARGS: the model and batch of every run)
set -uo pipefail
launch="$1"; gpt="$2"; shift 2
skip() { echo "lose-node.sh: SKIPPED: $*"; exit 77; }
fail() { echo "lose-node.sh: $*" >&2; exit 1; }

# shellcheck source=../two-netns-nodes.sh
. "$(dirname "${BASH_SOURCE[0]}")/../two-netns-nodes.sh"
dir=$(mktemp -d)
trap 'remove_two_nodes; rm -rf "$dir"' EXIT
make_two_nodes lose 232

loss() { grep -o 'val_loss=[0-9.]*' "$1" | cut -d= -f2; }
digest() { grep -o 'param_digest=[0-9a-f]*' "$1" | cut -d= -f2; }
steps=8
"$launch" --nproc 2 -- "$gpt" --steps $steps "$@" >"$dir/straight.log" 2>&1 ||
  { cat "$dir/straight.log"; fail "the uninterrupted run failed"; }

ck="$dir/ck"
common=(--nnodes 1:2 --nproc 1 --master-addr 10.232.0.1 --master-port 29541 --max-restarts 1
        --rendezvous-deadline 5 --grace 2)
program=("$gpt" --steps $steps --checkpoint-dir "$ck" --checkpoint-every 2 --resume
         --keep-global-batch 2 "$@")
in_a env GLOO_SOCKET_IFNAME="$end_a" ACCEL_RENDEZVOUS_TIMEOUT=30 \
  "$launch" "${common[@]}" --node-rank 0 -- "${program[@]}" >"$dir/node0.log" 2>&1 &
first=$!
in_b env GLOO_SOCKET_IFNAME="$end_b" ACCEL_RENDEZVOUS_TIMEOUT=30 ACCEL_EXAMPLE_KILL_AT=1:5:node \
  "$launch" "${common[@]}" --node-rank 1 -- "${program[@]}" >"$dir/node1.log" 2>&1
second=$?
wait "$first"; first=$?
show() { echo "--- node 0"; cat "$dir/node0.log"; echo "--- node 1"; cat "$dir/node1.log"; }
[ "$second" = 137 ] || { show; fail "node 1's launcher exited $second, not killed (137)"; }
[ "$first" = 0 ] || { show; fail "node 0 exited $first"; }
grep -q "resumed from $ck/checkpoint_1 at step 4$" "$dir/node0.log" ||
  { show; fail "node 0 did not resume from step 4"; }
grep -qF "accel-launch: node 1 did not come to start 2 within --rendezvous-deadline 5: the world shrinks from 2 to 1 ranks (1 node; this node is node 0 now)" "$dir/node0.log" &&
  grep -qF "accel-launch: start 2 ran on 1 rank (1 node): the world shrank from 2 ranks (2 nodes) to 1" "$dir/node0.log" ||
  { show; fail "the launcher did not say that the world shrank"; }
grep '^accel-launch' "$dir/node0.log"
want=$(loss "$dir/straight.log") got=$(loss "$dir/node0.log")
awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d < 1e-3 && d > -1e-3) }' ||
  { show; fail "val_loss $got on node 0 alone after the restart, $want uninterrupted on 2 ranks"; }
echo "lose-node.sh: val_loss $got after going on with 1 rank on node 0, $want uninterrupted on 2;" \
     "param_digest $(digest "$dir/node0.log") and $(digest "$dir/straight.log")"
