#!/usr/bin/env bash
# The example with tracking on two processes (--log-with all three writers), then accel-plot on
# its project folder: one run folder (rank 0's), the metrics the example logs, one event file,
# run.json finished with 2 processes, and a loss chart holding the run's line.
#   example.sh FASHION_MNIST ACCEL_PLOT PNG_CHECK WORK_DIR
set -euo pipefail
example="$1"; plot="$2"; check="$3"; work="$4"
rm -rf "$work"; mkdir -p "$work"

"$example" --nproc 2 --steps 30 --log-every 10 --eval-samples 1000 --no-progress \
  --log-dir "$work/runs" --run-name two-ranks --log-with jsonl,tensorboard,csv >"$work/out" 2>&1 ||
  { cat "$work/out"; exit 1; }
runs=("$work"/runs/fashion_mnist/*)
[ "${#runs[@]}" = 1 ] && [ "${runs[0]}" = "$work/runs/fashion_mnist/two-ranks" ] ||
  { echo "expected one run folder two-ranks, found: ${runs[*]}"; exit 1; }
run="${runs[0]}"
[ "$(head -n 1 "$run/metrics.csv")" = "step,time,loss,lr,samples_per_second,epoch,test_accuracy" ] ||
  { echo "unexpected header: $(head -n 1 "$run/metrics.csv")"; exit 1; }
[ "$(cut -d, -f1 "$run/metrics.csv" | tr '\n' ' ')" = "step 10 20 30 30 " ] ||
  { echo "unexpected steps:"; cat "$run/metrics.csv"; exit 1; }
[ "$(wc -l <"$run/metrics.jsonl")" = 4 ] || { echo "metrics.jsonl:"; cat "$run/metrics.jsonl"; exit 1; }
grep -q '"processes": 2' "$run/run.json" && grep -q '"status": "finished"' "$run/run.json" &&
  grep -q '"processes": 2' "$run/config.json" || { cat "$run/run.json" "$run/config.json"; exit 1; }
grep -q "metrics in $run" "$work/out" || { cat "$work/out"; exit 1; }
# TensorBoard's event file: one, rank 0's (tracking.tensorboard_reader reads one back).
events=("$run"/events.out.tfevents.*)
[ "${#events[@]}" = 1 ] && [ -s "${events[0]}" ] || { echo "event files: ${events[*]}"; exit 1; }
# No progress lines with --no-progress.
! grep -q '^step [0-9]*/30' "$work/out" || { cat "$work/out"; exit 1; }

"$plot" -o "$work/charts" "$work/runs/fashion_mnist" >/dev/null
for metric in loss lr samples_per_second epoch test_accuracy; do
  [ -f "$work/charts/$metric.png" ] || { echo "no chart of $metric"; exit 1; }
done
"$check" "$work/charts/loss.png" 900 540 '#0072b2>=300'
echo "example tracking: ok"
