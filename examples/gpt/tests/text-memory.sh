#!/usr/bin/env bash
# The gpt example holds less than 2 bytes of memory per byte of --text: the text is mapped, not
# copied, and training samples are windows, not bytes. Two one-step runs of a tiny model, on 32
# MiB of text and on 64 KiB, measured by GNU time's peak resident size (which counts the pages of
# the mapping the process touched); the difference over the difference in text is the cost per
# byte. Skipped (status 77) without GNU time. Runs in a temporary folder of its own:
#   text-memory.sh GPT
set -euo pipefail
binary=$1
time=/usr/bin/time
if ! "$time" -f %M true >/dev/null 2>&1; then
  echo "text-memory: GNU time ($time) is missing: skipped (scripts/setup-debian.sh installs it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # the runs' default folders (checkpoints, runs) are this test's own
big=$((32 * 1024 * 1024)) small=$((64 * 1024))
# Text that is the same on every run: the example holds out the 1 KiB chunks whose hash falls
# in 1 of 20 to validation, and 64 chunks of random bytes held out none in about 1 run of 27.
# These 64 hold out 4 (and seq's lines make no two chunks alike).
seq 1 5000000 >"$work/big" && truncate -s "$big" "$work/big"  # (seq | head: SIGPIPE)
seq 1 20000 >"$work/small" && truncate -s "$small" "$work/small"
peak_kib() {  # the peak resident size of one run on $1, in KiB
  "$time" -o "$work/peak" -f %M "$binary" --text "$1" --steps 1 --warmup 0 --layers 1 \
    --hidden 8 --heads 1 --seq 64 --batch-size 1 --eval-every 0 --eval-windows 1 \
    --sample-tokens 0 --no-progress >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  cat "$work/peak"
}
small_kib=$(peak_kib "$work/small")
big_kib=$(peak_kib "$work/big")
per_byte=$(awk -v b="$big_kib" -v s="$small_kib" -v n=$((big - small)) \
             'BEGIN { printf "%.3f", (b - s) * 1024 / n }')
echo "text-memory: peak $small_kib KiB on 64 KiB of text, $big_kib KiB on 32 MiB:" \
     "$per_byte bytes per byte of text"
if awk -v p="$per_byte" 'BEGIN { exit !(p >= 2) }'; then
  echo "text-memory: $per_byte bytes of memory per byte of text, 2 or more" >&2; exit 1
fi
