#!/usr/bin/env bash
# The TensorBoard event file read back by a reader of its own (tensorboard_reader.py, with the
# protobuf library): tensorboard_run logs on two processes, and the one event file, rank 0's,
# holds what metrics.jsonl holds, each rank's timeline among it. Then copies of it cut short by
# a crash (the records before the cut one are read, the cut one ignored) and damaged (a flipped
# byte in a record's length or data: the reader reports the CRC that does not match).
#   tensorboard.sh TENSORBOARD_RUN PYTHON3 READER WORK_DIR
set -euo pipefail
program="$1"; python="$2"; reader="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "tensorboard: $*"; exit 1; }

"$program" --nproc 2 "$work/runs" >"$work/out" 2>&1 || { cat "$work/out"; fail "the run failed"; }
run="$work/runs/tensorboard/r"
shopt -s nullglob
events=("$run"/*tfevents*)
[ "${#events[@]}" = 1 ] || fail "expected one event file in $run, found: ${events[*]:-none}"
name="$(basename "${events[0]}")"
[[ "$name" =~ ^events\.out\.tfevents\.[0-9]{10}\.(.+)$ ]] && [ "${BASH_REMATCH[1]}" = "$(uname -n)" ] ||
  fail "the event file's name '$name' is not events.out.tfevents.<unix seconds>.$(uname -n)"
grep -q '"timeline/rank1/backward"' "$run/metrics.jsonl" || fail "no timeline of rank 1 logged"

"$python" "$reader" "${events[0]}" "$run/metrics.jsonl" "$run/config.json"

# A crash mid-write: the last record cut in its data's CRC, then in its data.
size=$(stat -c %s "${events[0]}")
for cut in 3 9; do
  cp "${events[0]}" "$work/cut"
  truncate -s $((size - cut)) "$work/cut"
  "$python" "$reader" "$work/cut" "$run/metrics.jsonl" "$run/config.json" --cut
done

# A damaged byte: in the first record's length (byte 2), in its data (byte 13; the data starts
# after the 8-byte length and its 4-byte CRC).
for damage in "2 length" "13 data"; do
  set -- $damage
  cp "${events[0]}" "$work/damaged"
  byte=$(od -An -tu1 -j "$1" -N1 "$work/damaged" | tr -d ' ')
  # shellcheck disable=SC2059  # the format is the one byte, as an octal escape
  printf "$(printf '\\%03o' $((byte ^ 0x40)))" |
    dd of="$work/damaged" bs=1 seek="$1" conv=notrunc status=none
  cmp -s "${events[0]}" "$work/damaged" && fail "byte $1 was not changed"
  status=0
  "$python" "$reader" "$work/damaged" "$run/metrics.jsonl" "$run/config.json" \
    >"$work/damaged.out" 2>&1 || status=$?
  cat "$work/damaged.out"
  [ "$status" = 1 ] && grep -q "record 0 at byte 0: the CRC of its $2 does not match" \
    "$work/damaged.out" || fail "a flipped byte $1 (in the $2) was not reported as a CRC mismatch"
done
echo "tensorboard: ok"
