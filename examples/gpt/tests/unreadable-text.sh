#!/usr/bin/env bash
# The gpt example with text that opens but cannot be read (read() fails with EIO: /proc/self/mem
# at offset 0, given directly or as a file of a --text folder): status 2 and a "gpt:" message
# naming the file and the OS error, before anything is created. Runs in a temporary folder:
#   unreadable-text.sh GPT
set -euo pipefail
binary=$1
expect=$(cd "$(dirname "$0")/../../../tests/example" && pwd)/expect-status.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir folder
head -c 5000 /dev/zero | tr '\0' 'a' >folder/a.txt
ln -s /proc/self/mem folder/b.txt
before=$(ls -A)
writes=(--steps 2 --warmup 1 --checkpoint-dir "$work/checkpoints" --checkpoint-every 1 --with-tracking
        --run-name r)
"$expect" 2 "^gpt: /proc/self/mem cannot be read: Input/output error; give --text a text file" \
  "$binary" --text /proc/self/mem "${writes[@]}"
"$expect" 2 "^gpt: $work/folder/b.txt cannot be read: Input/output error; give --text a text file" \
  "$binary" --text "$work/folder" "${writes[@]}"
if [ "$(ls -A)" != "$before" ]; then
  echo "unreadable-text: the example created something: $(ls -A | tr '\n' ' ')" >&2; exit 1
fi
echo "unreadable-text: every case stopped with status 2, naming the file, and created nothing"
