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

command -v ip >/dev/null || skip "the ip command (iproute2) is missing"
command -v nsenter >/dev/null || skip "nsenter (util-linux) is missing"
[ "$(id -u)" = 0 ] || skip "making network namespaces needs root"
a="accel-node0-$$"; b="accel-node1-$$"
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
why="$(ip netns add "$a" 2>&1 && ip netns add "$b" 2>&1)" || skip "cannot make network namespaces: $why"
why="$(ip link add "va$$" type veth peer name "vb$$" 2>&1)" || skip "cannot make a veth pair: $why"
ip link set "va$$" netns "$a" && ip link set "vb$$" netns "$b" || fail "cannot move the veth ends"
# nsenter rather than `ip -n` / `ip netns exec`, which remount /sys and fail inside a chroot.
in_a() { nsenter --net="/run/netns/$a" "$@"; }
in_b() { nsenter --net="/run/netns/$b" "$@"; }
in_a ip addr add 10.231.0.1/24 dev "va$$" && in_b ip addr add 10.231.0.2/24 dev "vb$$" &&
  in_a ip link set "va$$" up && in_b ip link set "vb$$" up &&
  in_a ip link set lo up && in_b ip link set lo up || fail "cannot configure the link"

# Bytes received and sent on node 0's end of the link (/proc/net/dev is per network namespace).
link_bytes() { in_a awk -v dev="va$$:" '$1 == dev { print $2 + $10 }' /proc/net/dev; }
before=$(link_bytes)

common=(--nnodes 2 --nproc 1 --master-addr 10.231.0.1 --master-port 29531 --grace 2)
in_a env GLOO_SOCKET_IFNAME="va$$" ACCEL_RENDEZVOUS_TIMEOUT=30 \
  "$launch" "${common[@]}" --node-rank 0 -- "$worker" two_nodes_ddp >node0.log 2>&1 &
first=$!
in_b env GLOO_SOCKET_IFNAME="vb$$" ACCEL_RENDEZVOUS_TIMEOUT=30 \
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
