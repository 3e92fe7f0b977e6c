#!/usr/bin/env bash
# The gpt example with text that is missing, empty or too short: status 2 and a "gpt:" message
# naming it, before anything is created (no checkpoint folder, no run folder). Runs in a
# temporary folder of its own:
#   missing-text.sh GPT
set -euo pipefail
binary=$1
expect=$(cd "$(dirname "$0")/../../../tests/example" && pwd)/expect-status.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir empty-folder
: >empty-file
printf 'short\n' >short
before=$(ls -A)
# Every run asks for checkpoints and a run folder (./runs by default): none may appear.
writes=(--steps 2 --warmup 1 --checkpoint-dir "$work/checkpoints" --checkpoint-every 1 --with-tracking
        --run-name r)
"$expect" 2 "^gpt: --text $work/nonexistent does not exist; give --text a text file or a folder" \
  "$binary" --text "$work/nonexistent" "${writes[@]}"
"$expect" 2 "^gpt: --text $work/empty-folder is empty \(0 files, no bytes\)" \
  "$binary" --text "$work/empty-folder" "${writes[@]}"
"$expect" 2 "^gpt: --text $work/empty-file is empty" \
  "$binary" --text "$work/empty-file" "${writes[@]}" --log-dir "$work/logs"
"$expect" 2 "^gpt: the training split of $work/short holds 6 bytes \(1 chunks\), fewer than one window of --seq \+ 1 = 65 bytes" \
  "$binary" --text "$work/short" --seq 64 "${writes[@]}"
if [ "$(ls -A)" != "$before" ]; then
  echo "missing-text: the example created something: $(ls -A | tr '\n' ' ')" >&2; exit 1
fi
echo "missing-text: every case stopped with status 2 and created nothing"
