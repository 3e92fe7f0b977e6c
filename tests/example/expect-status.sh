#!/usr/bin/env bash
# Passes when CMD exits with exactly STATUS and its output (stdout and stderr) matches REGEX.
#   expect-status.sh STATUS REGEX CMD [ARGS...]
set -u
expected=$1 regex=$2; shift 2
output=$("$@" 2>&1); status=$?
printf '%s\n' "$output"
if [ "$status" -ne "$expected" ]; then
  echo "expect-status: exit status $status, expected $expected" >&2; exit 1
fi
if ! grep -Eq -- "$regex" <<<"$output"; then
  echo "expect-status: no line matches '$regex'" >&2; exit 1
fi
echo "expect-status: exit $status as expected"
