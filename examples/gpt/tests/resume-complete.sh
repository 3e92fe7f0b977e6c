#!/usr/bin/env bash
# --resume from a checkpoint that already holds --steps: the example says the run is complete and
# exits 0 without training, writing a checkpoint or creating a run folder. Runs in a temporary
# folder of its own:
#   resume-complete.sh GPT [ARGS...]   (ARGS: the model and the batch of both runs)
set -euo pipefail
binary=$1; shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$binary" --steps 2 --checkpoint-dir "$work/checkpoints" "$@"
before=$(ls -A "$work/checkpoints")
for steps in 2 1; do
  output=$("$binary" --steps $steps --checkpoint-dir "$work/checkpoints" --resume \
             --log-dir "$work/runs" "$@" 2>&1) || {
    printf '%s\n' "$output"; echo "resume-complete: --steps $steps --resume failed" >&2; exit 1; }
  printf '%s\n' "$output"
  grep -q "the run is complete: $work/checkpoints/checkpoint_0 holds step 2 of --steps $steps" \
    <<<"$output" || { echo "resume-complete: no 'the run is complete' line" >&2; exit 1; }
  after=$(ls -A "$work/checkpoints")
  if [ "$after" != "$before" ]; then
    echo "resume-complete: checkpoints were '$before', now '$after'" >&2; exit 1
  fi
  if [ -e "$work/runs" ]; then echo "resume-complete: a run folder was created" >&2; exit 1; fi
done
echo "resume-complete: complete runs end with status 0 and write nothing"
