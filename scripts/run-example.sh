#!/usr/bin/env bash
# Sets up a Debian 12 machine (packages only; idempotent), builds the Fashion-MNIST example and
# runs it. Usage: scripts/run-example.sh [fashion_mnist flags...], e.g. --precision bf16 --accum 4
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${ACCEL_BUILD_DIR:-$repo/build}

"$repo/scripts/setup-debian.sh"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target fashion_mnist
"$build/examples/fashion_mnist/fashion_mnist" "$@"
