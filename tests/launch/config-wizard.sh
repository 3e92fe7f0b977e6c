#!/bin/sh
# accel-launch config's questions (tools/config_wizard.hpp), typed through a pseudo-terminal as a
# user types them: script(1) (util-linux) runs accel-launch on a terminal of its own and writes
# this script's input to it.
#   1. every answer, one of them wrong (zero4, asked again): status 0, the file holds the choice,
#      the alias and the accel_add_variants() line are printed, and accel-launch --config runs
#      the workers with it;
#   2. the same file again, Enter at "replace it": the default is no, so status non-zero and the
#      file as it was;
#   3. Ctrl-D at the second question: status non-zero, an accel: message, and no file;
#   4. stdin not a terminal and no flags: no question, the YAML on stdout as before.
# usage: config-wizard.sh ACCEL_LAUNCH WORK_DIR
set -u
launcher=$1
work=$2
command -v script >/dev/null 2>&1 || { echo "config-wizard.sh: no script(1) (util-linux); skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# No GPU seen, so that the defaults do not depend on the machine; script(1) runs the command
# with $SHELL -c.
export CUDA_VISIBLE_DEVICES=
export SHELL=/bin/sh

failed=0
fail() {
  echo "config-wizard.sh: $1" >&2
  [ -f "$2" ] && sed 's/^/  | /' "$2" >&2
  failed=1
}

# 1. this machine, several CPU processes: 2, bf16, 3 threads, accumulation 4, zero4 (refused),
# zero3.
printf '%s\n' this-machine multi-cpu 2 bf16 3 4 zero4 zero3 |
  script -qfec "'$launcher' config -o launch.yaml" /dev/null >answers.log 2>&1
status=$?
[ "$status" -eq 0 ] || fail "answered: status $status, not 0" answers.log
grep -q "'zero4' is not allowed; answer one of ddp, zero2, zero3, fsdp" answers.log ||
  fail "answered: zero4 was not refused and asked again" answers.log
grep -qF 'using Strategy = accel::Accelerator<accel::Zero3, accel::Bf16, accel::GradAccum<4>>;' answers.log ||
  fail "answered: no Accelerator alias printed" answers.log
grep -qF 'accel_add_variants(train SOURCES train.cpp VARIANTS "Zero3,Bf16,4")' answers.log ||
  fail "answered: no accel_add_variants() line printed" answers.log
grep -q '^nproc: 2$' launch.yaml && grep -q '^threads-per-process: 3$' launch.yaml &&
  grep -Eq "^  ACCEL_VARIANT: ['\"]?Zero3,Bf16,4['\"]?$" launch.yaml ||
  fail "answered: launch.yaml does not hold the answers" launch.yaml
# The file as the launcher reads it: two workers, each with the threads and the variant.
"$launcher" --config launch.yaml -- sh -c 'echo "$OMP_NUM_THREADS $ACCEL_VARIANT"' >run.log 2>&1
status=$?
[ "$status" -eq 0 ] && [ "$(grep -c '^3 Zero3,Bf16,4$' run.log)" -eq 2 ] ||
  fail "accel-launch --config launch.yaml: status $status, or the workers lacked the settings" run.log

# 2. The same again; Enter at "launch.yaml exists; replace it" keeps it.
cp launch.yaml before.yaml
printf 'this-machine\ncpu\nno\n1\n1\nddp\n\n' |
  script -qfec "'$launcher' config -o launch.yaml" /dev/null >kept.log 2>&1
status=$?
[ "$status" -ne 0 ] || fail "kept: status 0 with the file kept" kept.log
cmp -s before.yaml launch.yaml || fail "kept: launch.yaml was replaced without a y" launch.yaml
grep -q "accel: accel-launch config: kept launch.yaml as it was" kept.log ||
  fail "kept: no accel: message" kept.log

# 3. Ctrl-D (end of input) at the second question.
printf 'this-machine\n\004' | script -qfec "'$launcher' config -o stopped.yaml" /dev/null >eof.log 2>&1
status=$?
[ "$status" -ne 0 ] || fail "Ctrl-D: status 0" eof.log
[ ! -e stopped.yaml ] || fail "Ctrl-D: stopped.yaml was written" stopped.yaml
grep -q "accel: accel-launch config: the input ended at 'Machine type" eof.log ||
  fail "Ctrl-D: no accel: message naming the question" eof.log

# 4. Not a terminal: as before, no questions.
"$launcher" config --nproc 2 </dev/null >flags.log 2>&1
status=$?
[ "$status" -eq 0 ] && [ "$(cat flags.log)" = "nproc: 2" ] ||
  fail "flags without a terminal: status $status, or not the YAML alone" flags.log

[ "$failed" -eq 0 ] && echo "config-wizard.sh: all passed"
exit "$failed"
