#!/usr/bin/env bash
# accel-launch env: every line a bug report needs, in `name: value` form, with the distributed
# variables that are set (and only those).
#   env-report.sh ACCEL_LAUNCH
set -euo pipefail
report="$(env -u RANK -u WORLD_SIZE ACCEL_TIMEOUT=9 MASTER_PORT=29999 "$1" env)"
printf '%s\n' "$report"
for pattern in '^accel: [0-9]+\.[0-9]+\.[0-9]+$' '^libtorch: [0-9]+\.[0-9]+' '^compiler: ' \
               '^os: ' '^cuda: ' '^nccl: ' '^gloo: built in' \
               '^shared memory: on between the ranks of one node. /dev/shm: [0-9]+ MiB free$' '^cpu: ' \
               '^cores: [0-9]+ online, [0-9]+ usable' '^torch threads: [0-9]+ intra-op' \
               '^blas: /' '^variables: .*ACCEL_TIMEOUT=9' '^variables: .*MASTER_PORT=29999'; do
  grep -Eq -- "$pattern" <<<"$report" || { echo "env-report: no line matches '$pattern'" >&2; exit 1; }
done
! grep -Eq '^variables: .*(^| )RANK=' <<<"$report" || { echo "env-report: RANK listed though unset" >&2; exit 1; }
# A subcommand takes no stray arguments.
if "$1" env extra 2>/dev/null; then echo "env-report: 'env extra' succeeded" >&2; exit 1; fi
echo "env-report: ok"
