#!/usr/bin/env bash
# --warmup: left out, a tenth of the schedule (--decay-steps, else --steps), at most 100, so that
# a run shorter than 100 steps trains; given and longer than the schedule, status 2 and the
# message alone, without the usage text.
#   warmup.sh GPT [ARGS...]   (ARGS: a tiny model, without --warmup)
set -euo pipefail
binary=$1; shift
expect=$(cd "$(dirname "$0")/../../../tests/example" && pwd)/expect-status.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # the runs' default folders (checkpoints, runs) are this test's own
"$expect" 0 "lr warmup 0 steps \(a tenth of the 3-step schedule, at most 100\)" \
  "$binary" --steps 3 "$@"
"$expect" 0 "lr warmup 5 steps \(a tenth of the 50-step schedule, at most 100\)" \
  "$binary" --steps 2 --decay-steps 50 "$@"
output=$("$expect" 2 "^gpt: --warmup is 5, more than --steps 3; lower --warmup" \
           "$binary" --steps 3 --warmup 5 "$@")
printf '%s\n' "$output"
if grep -q "usage:" <<<"$output"; then
  echo "warmup: the conflict is printed with the usage text" >&2; exit 1
fi
echo "warmup: a short run scales its warmup; a conflicting --warmup is refused on its own"
