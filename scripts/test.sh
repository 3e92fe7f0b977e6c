#!/usr/bin/env bash
# Sets up a Debian 12 machine (packages only; idempotent), builds accel's tests, examples and
# benchmarks, and runs the whole test suite. Usage: scripts/test.sh [ctest args...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${ACCEL_BUILD_DIR:-$repo/build}

"$repo/scripts/setup-debian.sh"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" -j"$(nproc)" --output-on-failure "$@"
