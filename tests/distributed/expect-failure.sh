#!/usr/bin/env bash
# Passes when CMD exits non-zero and its output (stdout and stderr) matches REGEX.
#   expect-failure.sh REGEX CMD [ARGS...]
set -u
regex=$1; shift
output=$("$@" 2>&1); status=$?
printf '%s\n' "$output"
if [ $status -eq 0 ]; then echo "expect-failure: the command succeeded" >&2; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$output"; then echo "expect-failure: no line matches '$regex'" >&2; exit 1; fi
echo "expect-failure: failed as expected (exit $status)"
