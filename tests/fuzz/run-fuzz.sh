#!/usr/bin/env bash
# Builds the safetensors header fuzzer with clang++ (libFuzzer, AddressSanitizer,
# UndefinedBehaviorSanitizer) and runs it for SECONDS.
#
#   tests/fuzz/run-fuzz.sh SECONDS [CORPUS_DIR]
#
# CORPUS_DIR (default: $FUZZ_BUILD_DIR/corpus) collects the inputs libFuzzer finds interesting;
# the seeds in tests/fuzz/corpus/ are read, never written. FUZZ_BUILD_DIR (default:
# build/fuzz) holds the binary, rebuilt when a source is newer; CLANGXX picks the compiler
# (default clang++). A crash leaves its input in FUZZ_BUILD_DIR (crash-*) and fails.
# Exits 77 (ctest's skip) when clang++ or its libFuzzer runtime is missing: the Debian 13 leg
# has no clang, and Debian 12 needs `clang libclang-rt-14-dev` (scripts/setup-debian.sh).
set -euo pipefail

seconds=${1:?usage: run-fuzz.sh SECONDS [CORPUS_DIR]}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$repo/build/fuzz}
corpus=${2:-$build/corpus}
clangxx=${CLANGXX:-clang++}
mkdir -p "$build" "$corpus"

if ! command -v "$clangxx" >/dev/null; then
  echo "run-fuzz: SKIP: $clangxx not found (Debian: apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
probe="$build/probe.cpp"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe"
if ! "$clangxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$build/probe" 2>"$build/probe.log"; then
  echo "run-fuzz: SKIP: $clangxx cannot link libFuzzer (Debian: apt-get install libclang-rt-14-dev):"
  cat "$build/probe.log"
  exit 77
fi

# {fmt} linked from Debian's libfmt (error.hpp formats the messages), as accel's programs link it,
# and line tables only, enough for a crash's stack to name file and line: 14 s of CPU to build,
# against 28 s with fmt header-only and full debug information. nlohmann/json is header-only.
# _GLIBCXX_ASSERTIONS: an out-of-range operator[] on a string or vector aborts too.
binary="$build/fuzz_safetensors"
sources=("$repo/tests/fuzz/fuzz_safetensors.cpp" "$repo/include/accel/state/safetensors_format.hpp"
         "$repo/include/accel/state/impl/safetensors_format.ipp" "$repo/include/accel/detail/error.hpp" "$repo/include/accel/error.hpp" "${BASH_SOURCE[0]}")
stale=0
[ -x "$binary" ] || stale=1
for s in "${sources[@]}"; do [ "$s" -nt "$binary" ] && stale=1; done
if [ "$stale" = 1 ]; then
  echo "run-fuzz: building $binary"
  "$clangxx" -std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=all -D_GLIBCXX_ASSERTIONS -Wall -Wextra -Wpedantic -Werror \
    -I "$repo/include" "$repo/tests/fuzz/fuzz_safetensors.cpp" -lfmt -o "$binary"
fi

cd "$build"  # crash-*, leak-*, timeout-* land here
# -rss_limit_mb: a header is at most 100 MB and inputs here are at most 64 KiB, so memory use
# beyond a few hundred MB is a bug. -timeout: one input taking seconds is one too.
exec "$binary" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -dict="$repo/tests/fuzz/safetensors.dict" -print_final_stats=1 \
  "$corpus" "$repo/tests/fuzz/corpus"
