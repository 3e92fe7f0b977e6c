#!/usr/bin/env bash
# harness.expect_output: tests/expect-output.cmake passes a command only when it exits 0 AND its
# output matches the required regex (and not the forbidden one), on small shell commands.
#   expect-output-rules.sh CMAKE EXPECT_OUTPUT_CMAKE
set -u
cmake=$1 script=$2
failures=0

# expect STATUS REGEX CMAKE_ARGS...: the wrapper exits STATUS (0 or not) and says REGEX.
expect() {
  local want=$1 regex=$2 output status; shift 2
  output=$("$cmake" "$@" 2>&1); status=$?
  if { [ "$want" -eq 0 ] && [ "$status" -ne 0 ]; } || { [ "$want" -ne 0 ] && [ "$status" -eq 0 ]; } ||
     ! grep -Eq -- "$regex" <<<"$output"; then
    echo "FAIL: cmake $* exited $status (expected $([ "$want" -eq 0 ] && echo 0 || echo non-zero)), output matching '$regex' expected:"
    printf '%s\n' "$output" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok: cmake $* -> $status"
  fi
}

# The required line printed, then a non-zero exit (rank 1 failing after rank 0's line): fails.
expect 1 "exited with 3, not 0" -DEXPECT='val_loss=[0-9.]+' -P "$script" -- sh -c 'echo val_loss=1; exit 3'
expect 0 "exit 0 and the required output" -DEXPECT='val_loss=[0-9.]+' -P "$script" -- sh -c 'echo val_loss=1'
expect 1 "no match in the output" -DEXPECT='val_loss=[0-9.]+' -P "$script" -- sh -c 'echo loss=1'
# Killed by a signal: fails.
expect 1 "exited with .*, not 0" -DEXPECT='x' -P "$script" -- sh -c 'echo x; kill -9 $$'
# A regex across lines, on stdout and stderr together, as CTest matches.
expect 0 "exit 0" "-DEXPECT=a
b(.|
)*c" -P "$script" -- sh -c 'echo a; echo b; echo c >&2'
# The forbidden regex.
expect 1 "matches the forbidden regex: FAIL" -DEXPECT='done' -DREJECT='FAIL' -P "$script" -- \
  sh -c 'echo FAIL one; echo done'
expect 0 "exit 0" -DEXPECT='done' -DREJECT='FAIL' -P "$script" -- sh -c 'echo done'
# No command, no regex: refused.
expect 1 "no command after --" -DEXPECT='x' -P "$script" --
expect 1 "no -DEXPECT" -P "$script" -- true

if [ $failures -ne 0 ]; then echo "expect-output-rules: $failures rule(s) broken"; exit 1; fi
echo "expect-output-rules: every rule holds"
