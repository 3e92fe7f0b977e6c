#!/usr/bin/env bash
# The shared-memory transport's faults, with ranks started by hand where accel-launch would
# end the group before the survivors could show what they detect, and the /dev/shm check.
#   shm.sh LAUNCHER WORKER peer_exits|peer_stops N   the survivors fail naming the peer; in
#                                                    time: well before the 60 s timeout for
#                                                    an exit, right after the 2 s one for a stop
#   shm.sh LAUNCHER WORKER killed_in_setup N         rank 0 dies holding the segment's name;
#                                                    accel-launch removes it
# Every case ends with no accel-shm.<token>.* left in /dev/shm.
set -euo pipefail
launcher=$1 worker=$2 scenario=$3 ranks=$4
store=$(mktemp -d "${TMPDIR:-/tmp}/accel-XXXXXX")
token=${store##*/accel-}
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$store"
}
trap cleanup EXIT
leftovers() {
  local found=() f
  for f in /dev/shm/accel-shm."$token".*; do [ -e "$f" ] && found+=("${f##*/}"); done
  echo "${found[*]}"
}

case "$scenario" in
  peer_exits|peer_stops)
    start=$SECONDS
    for ((r = 0; r < ranks; ++r)); do
      RANK=$r WORLD_SIZE=$ranks ACCEL_STORE_DIR=$store "$worker" "$scenario" >"$store/out.$r" 2>&1 &
      pids+=($!)
    done
    # The survivors are ranks 0..N-2; the last one kills or stops itself.
    status=0
    for ((r = 0; r < ranks - 1; ++r)); do wait "${pids[$r]}" || status=1; done
    elapsed=$((SECONDS - start))
    cat "$store"/out.*
    [ "$status" -eq 0 ] || { echo "shm.sh: a surviving rank did not fail as expected" >&2; exit 1; }
    if [ "$scenario" = peer_exits ] && [ "$elapsed" -ge 30 ]; then
      echo "shm.sh: the survivors took $elapsed s to see the exit; the check runs every 0.1 s" >&2
      exit 1
    fi
    ;;
  killed_in_setup)
    # The launcher's own store folder names this segment: rank 0 prints the name it created.
    if output=$("$launcher" --nproc "$ranks" -- "$worker" killed_in_setup 2>&1); then
      echo "shm.sh: the launch succeeded although rank 0 was killed" >&2; exit 1
    fi
    printf '%s\n' "$output"
    name=$(sed -n 's/^segment \/\(accel-shm\.[^ ]*\)$/\1/p' <<<"$output")
    [ -n "$name" ] || { echo "shm.sh: rank 0 did not say which segment it created" >&2; exit 1; }
    if [ -e "/dev/shm/$name" ]; then
      echo "shm.sh: /dev/shm/$name is left after the launch" >&2; exit 1
    fi
    ;;
  *) echo "shm.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
[ -z "$(leftovers)" ] || { echo "shm.sh: left in /dev/shm: $(leftovers)" >&2; exit 1; }
echo "shm.sh: $scenario with $ranks ranks: as expected"
