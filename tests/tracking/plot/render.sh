#!/usr/bin/env bash
# accel-plot on the known runs under demo/ (two runs of one project): every chart is written,
# decodes as a PNG of the requested size, and holds each run's line where the run logged the
# metric and not where it did not (baseline alone logged accuracy).
#   render.sh ACCEL_PLOT PNG_CHECK WORK_DIR
set -euo pipefail
plot="$1"; check="$2"; work="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$work"; mkdir -p "$work"

"$plot" --size 640x400 -o "$work/charts" "$here/demo" >"$work/written"
expected="$(printf '%s\n' loss lr samples_per_second accuracy | sed "s|^|$work/charts/|; s|$|.png|")"
[ "$(cat "$work/written")" = "$expected" ] || {
  echo "accel-plot wrote:"; cat "$work/written"; echo "expected:"; echo "$expected"; exit 1; }

first='#0072b2'; second='#d55e00'   # accel-plot's first two colours: baseline's, bigger-batch's
for metric in loss lr samples_per_second; do
  "$check" "$work/charts/$metric.png" 640 400 "$first>=300" "$second>=300"
done
"$check" "$work/charts/accuracy.png" 640 400 "$first>=300" "$second=0"

# One run alone, one metric chosen: only that chart, in the first colour only.
"$plot" -s 320x200 -m loss -o "$work/one" "$here/demo/bigger-batch" >/dev/null
[ "$(ls "$work/one")" = "loss.png" ]
"$check" "$work/one/loss.png" 320 200 "$first>=100" "$second=0"

# Mistakes: status 2 and a message naming the value.
expect_error() {
  local pattern="$1"; shift
  local status=0
  "$plot" "$@" >/dev/null 2>"$work/error" || status=$?
  [ "$status" = 2 ] && grep -q -- "$pattern" "$work/error" || {
    echo "accel-plot $* exited $status with:"; cat "$work/error"
    echo "expected status 2 and: $pattern"; exit 1; }
}
expect_error "--metrics names 'los', which no run logged" -m los -o "$work/x" "$here/demo"
expect_error "'$work/none' is not a folder" "$work/none"
expect_error "--size '640' is not WxH" -s 640 "$here/demo"
expect_error "holds no metrics.csv" "$work/charts"
echo "accel-plot charts: ok"
