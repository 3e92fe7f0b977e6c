#!/usr/bin/env bash
# Sets up a Debian 12 machine (packages only; idempotent), builds an example and runs it.
# Usage: scripts/run-example.sh [fashion_mnist flags...], e.g. --precision bf16 --accum 2
#        scripts/run-example.sh gpt [gpt flags...]     the byte-level GPT (docs/gpt.md)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${ACCEL_BUILD_DIR:-$repo/build}

example=fashion_mnist
case ${1:-} in
  gpt | fashion_mnist) example=$1; shift ;;
esac

"$repo/scripts/setup-debian.sh"
# -O3, as users build it, also in a folder scripts/test.sh built (ACCEL_QUICK_PROGRAMS there).
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACCEL_QUICK_PROGRAMS=OFF
cmake --build "$build" -j"$(nproc)" --target "$example"
"$build/examples/$example/$example" "$@"
