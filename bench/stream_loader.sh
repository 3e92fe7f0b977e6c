#!/usr/bin/env bash
# StreamingLoader's samples/s over text shards against the map-style DataLoader over the same
# windows held in memory (bench/stream_loader.cpp, docs/how-to/streaming-data.md): writes the
# shards into a temporary folder, runs both loaders in alternating rounds, prints the medians, their
# min-max and the ratio stream / in memory, and removes the folder.
#
#   bench/stream_loader.sh [--files N] [--mb M] [--rounds R] [--workers W] [--seq S]
#                          [--batch B] [--shuffle-buffer K] [--build-dir DIR] [--dir FOLDER]
#
# Defaults: 8 files of 8 MiB, 5 rounds, 1 worker, --seq 64, batch 64, a shuffle buffer of 1024.
# --dir picks the disk of the temporary folder (default: the build folder). The first round reads
# the files from disk unless the page cache holds them already (the files were just written, so it
# usually does); one cold round does not move the median. Run it on a quiet machine: the
# loaders' threads compete with whatever else runs.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo/build"
files=8 mb=8 dir=""
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files=$2; shift 2 ;;
    --mb) mb=$2; shift 2 ;;
    --rounds|--workers|--seq|--batch|--shuffle-buffer) pass+=("$1" "$2"); shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stream_loader.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
bench="$build_dir/bench/accel_stream_bench"
[ -x "$bench" ] || {
  echo "stream_loader.sh: build the accel_stream_bench target first ($bench)" >&2; exit 2; }
work=$(mktemp -d "${dir:-$build_dir}/stream_loader.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bench" --generate "$work/shards" --files "$files" --mb "$mb"
"$bench" --dir "$work/shards" "${pass[@]}"
