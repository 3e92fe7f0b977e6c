#!/usr/bin/env bash
# Two "nodes" on this machine: two network namespaces joined by a veth pair (made here, removed
# at the end), one accel-launch per namespace with --nnodes 2, Ddp training that must match one
# process. The store (TCP, to node 0's address) and Gloo's connections (GLOO_SOCKET_IFNAME, the
# veth end) cross the link: its byte counters must grow by more than the gradients' size.
# Exits 77 (skipped) with the reason where namespaces cannot be made (not root, no ip, a
# container without CAP_NET_ADMIN).
#   two_nodes.sh ACCEL_LAUNCH WORKER
set -uo pipefail
launch="$1"; worker="$2"
skip() { echo "two_nodes: SKIPPED: $*"; exit 77; }
fail() { echo "two_nodes: $*" >&2; exit 1; }

# shellcheck source=../two-netns-nodes.sh
. "$(dirname "${BASH_SOURCE[0]}")/../two-netns-nodes.sh"
trap remove_two_nodes EXIT
make_two_nodes node 231

# Bytes received and sent on node 0's end of the link (/proc/net/dev is per network namespace).
link_bytes() { in_a awk -v dev="$end_a:" '$1 == dev { print $2 + $10 }' /proc/net/dev; }
before=$(link_bytes)

common=(--nnodes 2 --nproc 1 --master-addr 10.231.0.1 --master-port 29531 --grace 2)
in_a env GLOO_SOCKET_IFNAME="$end_a" ACCEL_RENDEZVOUS_TIMEOUT=30 \
  "$launch" "${common[@]}" --node-rank 0 -- "$worker" two_nodes_ddp >node0.log 2>&1 &
first=$!
in_b env GLOO_SOCKET_IFNAME="$end_b" ACCEL_RENDEZVOUS_TIMEOUT=30 \
  "$launch" "${common[@]}" --node-rank 1 -- "$worker" two_nodes_ddp >node1.log 2>&1
second=$?
wait "$first"; first=$?
cat node0.log node1.log
[ "$first" = 0 ] && [ "$second" = 0 ] || fail "node 0 exited $first, node 1 exited $second"
grep -q "rank 0: two_nodes_ddp passed" node0.log && grep -q "rank 1: two_nodes_ddp passed" node1.log ||
  fail "a rank did not pass"

after=$(link_bytes)
# 4 steps of all-reduced gradients of 256 x 256 + 256 + 257 floats, and rank 0's broadcast
# parameters: well above 1 MB over the link.
crossed=$(( after - before ))
echo "two_nodes: $crossed bytes crossed the veth link"
[ "$crossed" -gt 1000000 ] || fail "only $crossed bytes crossed the veth link: the traffic did not go through it"
echo "two_nodes: ok"
