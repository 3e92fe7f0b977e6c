#!/usr/bin/env bash
# accel-launch --config FILE and accel-launch config: a file written from flags launches with
# those settings, flags given on the command line win over the file, and every mistake in a file
# stops with status 2 naming the file, the line and the key.
#   config.sh ACCEL_LAUNCH WORK_DIR
set -euo pipefail
launch="$1"; work="$2"
rm -rf "$work"; mkdir -p "$work"; cd "$work"
fail() { echo "config.sh: $*" >&2; exit 1; }

"$launch" config --nproc 3 --threads-per-process 2 --rank-prefix --env FOO=bar \
  --env "GREETING=hello world" -o launch.yaml 2>/dev/null
grep -qx 'nproc: 3' launch.yaml && grep -qx 'threads-per-process: 2' launch.yaml || fail "launch.yaml: $(cat launch.yaml)"
show='echo "rank $RANK of $WORLD_SIZE omp=$OMP_NUM_THREADS foo=$FOO greeting=$GREETING"'

env -u OMP_NUM_THREADS "$launch" --config launch.yaml -- sh -c "$show" >out 2>err
for rank in 0 1 2; do
  grep -qx "\[rank $rank\] rank $rank of 3 omp=2 foo=bar greeting=hello world" out || fail "from the file: $(cat out err)"
done
# The launcher sets no threads of its own when the file chose them: no note.
! grep -q 'OMP_NUM_THREADS=' err || fail "a note though the file set the threads: $(cat err)"

# Flags win over the file.
env -u OMP_NUM_THREADS "$launch" --config launch.yaml --nproc 2 --threads-per-process 1 -- sh -c "$show" >out
[ "$(wc -l <out)" = 2 ] && grep -q 'rank 1 of 2 omp=1 foo=bar' out || fail "flags over the file: $(cat out)"

# An existing file is kept without --force.
status=0; "$launch" config --nproc 2 -o launch.yaml 2>err || status=$?
[ "$status" = 2 ] && grep -q 'launch.yaml exists; pass --force' err || fail "overwrite: $status $(cat err)"

expect() {  # expect FILE-CONTENT MESSAGE: the file refused with status 2 and the message
  printf '%b' "$1" >bad.yaml
  local status=0
  "$launch" --config bad.yaml -- true 2>err || status=$?
  [ "$status" = 2 ] && grep -qF -- "$2" err || fail "for $(cat bad.yaml): status $status, $(cat err); expected: $2"
}
expect 'nproc: 2\nnode_rank: 1\n' "bad.yaml:2: unknown key 'node_rank'; did you mean 'node-rank'?"
expect 'nproc: four\n' "bad.yaml:1: 'nproc' is 'four', not a whole number"
expect 'grace: soon\n' "bad.yaml:1: 'grace' is 'soon', not a number of seconds"
expect 'rank-prefix: maybe\n' "bad.yaml:1: 'rank-prefix' is 'maybe', not true or false"
expect 'threads-per-process: 0\n' "threads-per-process '0' is out of range"
expect 'env: [A, B]\n' "bad.yaml:1: 'env' must be a mapping of variable names to values"
expect 'env:\n  WORLD_SIZE: 8\n' "'env' sets WORLD_SIZE, which the launcher sets for every worker itself"
expect 'nproc: [1\n' "bad.yaml:2: not valid YAML"
expect '- nproc\n' "bad.yaml: the file must be a mapping of settings"
expect 'nproc: 0\n' "--nproc 0 is out of range"
expect 'node-rank: 1\n' "(the settings of --config bad.yaml and the command line together"
status=0; "$launch" --config missing.yaml -- true 2>err || status=$?
[ "$status" = 2 ] && grep -q -- '--config missing.yaml cannot be read' err || fail "missing file: $(cat err)"
echo "launch config: ok"
