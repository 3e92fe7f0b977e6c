#!/usr/bin/env bash
# What accel's CPU heap default (Options::tune_cpu_heap) is worth and what it costs, on its own:
# accel_bench with the default against accel_bench --no-heap-tuning (glibc's defaults), the same
# model, strategy and ranks, in alternating turns. Prints per configuration the median steps/s of
# each, their ratio (median of the per-turn ratios, min-max), and every rank's median peak RSS
# (VmHWM) with and without the tuning (docs/concepts/performance.md, "The CPU heap").
#
#   bench/heap.sh [--turns N] [--build-dir DIR] [--configs "NAME:FLAGS;..."]
#
# Defaults: 5 turns; mlp and xfmr under Ddp, and the gpt example's model (25.4M parameters) under
# Ddp and Zero3 (Zero3's threshold is 8 MiB, the others' 32 MiB), all at world size 2, ranks
# pinned. Run it on a quiet machine: two ranks share two cores here.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo/build"
turns=5
gpt="--model gpt --optimizer adamw --hidden 512 --layers 8 --heads 8 --seq 128 --batch 4 --steps 8 --warmup 2"
configs="mlp ddp:--model mlp;xfmr ddp:--model xfmr;gpt ddp:$gpt --strategy ddp;gpt zero3:$gpt --strategy zero3"
while [ $# -gt 0 ]; do
  case "$1" in
    --turns) turns=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "heap.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
bench="$build_dir/bench/accel_bench"
[ -x "$bench" ] || { echo "heap.sh: build the accel_bench target first ($bench)" >&2; exit 2; }
# accel leaves glibc alone where either variable is set: neither side may inherit them.
unset MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_

echo "machine: $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1 | tr -s ' '), $(nproc) cores"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git -C "$repo" rev-parse --short HEAD)"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg); command: bench/heap.sh $*"
raw=$(mktemp)
trap 'rm -f "$raw" "$raw.err"' EXIT
IFS=';' read -r -a config_list <<<"$configs"
for turn in $(seq 1 "$turns"); do
  for config in "${config_list[@]}"; do
    name=${config%%:*} flags=${config#*:}
    # Alternate which side goes first from turn to turn.
    sides=(tuned untuned)
    [ $((turn % 2)) = 0 ] && sides=(untuned tuned)
    for side in "${sides[@]}"; do
      extra=()
      [ "$side" = untuned ] && extra=(--no-heap-tuning)
      # shellcheck disable=SC2086
      line=$("$bench" --nproc 2 --pin $flags "${extra[@]}" 2>"$raw.err" | tail -n 1)
      steps=$(sed -n 's/.*steps_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
      rss=$(sed -n 's/.*rank_peak_rss_mb=\([0-9.,]*\).*/\1/p' <<<"$line")
      [ -n "$steps" ] && [ -n "$rss" ] || {
        cat "$raw.err" >&2; echo "heap.sh: no result from $name ($side): $line" >&2; exit 1; }
      echo "$turn|$name|$side|$steps|$rss" >>"$raw"
    done
  done
  echo "turn $turn of $turns done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| configuration | steps/s tuned | steps/s glibc | tuned / glibc (min-max) | peak RSS MB per rank, tuned | glibc | RSS tuned / glibc |"
echo "|---|---|---|---|---|---|---|"
python3 - "$raw" <<'EOF'
import statistics, sys
rows = [l.strip().split('|') for l in open(sys.argv[1]) if l.strip()]
names = list(dict.fromkeys(r[1] for r in rows))
for name in names:
    runs = {}
    for turn, n, side, steps, rss in rows:
        if n == name:
            runs.setdefault(turn, {})[side] = (float(steps), [float(x) for x in rss.split(',')])
    ratios = [t['tuned'][0] / t['untuned'][0] for t in runs.values()]
    med = lambda side: statistics.median(t[side][0] for t in runs.values())
    ranks = len(next(iter(runs.values()))['tuned'][1])
    rss = lambda side: [statistics.median(t[side][1][r] for t in runs.values()) for r in range(ranks)]
    tuned, glibc = rss('tuned'), rss('untuned')
    rss_ratio = max(tuned) / max(glibc)
    print(f"| {name} | {med('tuned'):.3f} | {med('untuned'):.3f} | {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f}) | {' / '.join(f'{x:.0f}' for x in tuned)} | "
          f"{' / '.join(f'{x:.0f}' for x in glibc)} | {rss_ratio:.2f} |")
EOF
