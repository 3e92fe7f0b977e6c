#!/usr/bin/env bash
# Two "nodes" of two ranks each on this machine: one accel-launch --nnodes 2 --nproc 2 per node
# rank, meeting over TCP on loopback, Gloo between the nodes on lo. Each node's ranks are on
# this host, so within a node the CPU collectives go through shared memory, as on a real node.
#   two_launchers.sh ACCEL_LAUNCH WORKER SCENARIO
set -uo pipefail
launch="$1"; worker="$2"; scenario="$3"
logs=$(mktemp -d "${TMPDIR:-/tmp}/accel-two-launchers.XXXXXX")
trap 'rm -rf "$logs"' EXIT
# A port unlikely to be taken, different for tests running side by side.
port=$(( 30000 + (RANDOM * 32768 + RANDOM + $$) % 30000 ))
common=(--nnodes 2 --nproc 2 --master-addr 127.0.0.1 --master-port "$port" --grace 2)
GLOO_SOCKET_IFNAME=lo ACCEL_RENDEZVOUS_TIMEOUT=30 \
  "$launch" "${common[@]}" --node-rank 0 -- "$worker" "$scenario" >"$logs/node0" 2>&1 &
first=$!
GLOO_SOCKET_IFNAME=lo ACCEL_RENDEZVOUS_TIMEOUT=30 \
  "$launch" "${common[@]}" --node-rank 1 -- "$worker" "$scenario" >"$logs/node1" 2>&1
second=$?
wait "$first"; first=$?
cat "$logs/node0" "$logs/node1"
if [ "$first" != 0 ] || [ "$second" != 0 ]; then
  echo "two_launchers: $scenario: node 0 exited $first, node 1 exited $second" >&2
  exit 1
fi
echo "two_launchers: $scenario: ok"
