#!/bin/sh
# Vendoring by copy (docs/getting-started.md, "Copied headers"): include/ alone copied into a
# scratch folder, and a small training loop (copied/train.cpp) compiled, linked and run with the
# plain compiler command line that page gives for Debian's libtorch (12: 1.13, 13: 2.6; the same
# line on both), no CMake. Before compiling, `-M` checks that <accel/accelerator.hpp> reaches
# neither yaml-cpp nor xxHash nor accel/tools/: the command-line tools' dependencies stay out of
# a training program's include graph (xxhash.h comes with <accel/checkpoints.hpp> only).
# usage: run-copied.sh SOURCE_DIR WORK_DIR [CXX]
set -u
src=$1
work=$2
cxx=${3:-g++}
torch_api=/usr/include/torch/csrc/api/include
[ -d "$torch_api" ] || { echo "run-copied.sh: no Debian libtorch ($torch_api); skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work" || exit 1
cp -R "$src/include" "$work/include" && cp "$src/tests/package/copied/train.cpp" "$work/" || exit 1
cd "$work" || exit 1

# The command line of docs/getting-started.md.
flags="-std=c++20 -Iinclude -isystem $torch_api -DUSE_C10D_GLOO"
libraries="-ltorch -ltorch_cpu -lc10 -lfmt -lgloo"

# shellcheck disable=SC2086  # the flags are words
$cxx $flags -M train.cpp >headers.txt || { echo "run-copied.sh: $cxx -M failed"; exit 1; }
if tr ' ' '\n' <headers.txt | grep -E 'yaml-cpp|xxhash\.h|/accel/tools/'; then
  echo "run-copied.sh: <accel/accelerator.hpp> includes the headers above, which only the" \
       "command-line tools (yaml-cpp) or the checkpoints (xxhash.h) may need"
  exit 1
fi
# shellcheck disable=SC2086
$cxx $flags -Wall -Wextra -Wpedantic -Werror train.cpp -o train $libraries ||
  { echo "run-copied.sh: compiling or linking the copied headers' program failed"; exit 1; }
./train >train.log 2>&1
status=$?
cat train.log
[ "$status" -eq 0 ] && grep -q '^copied ok' train.log ||
  { echo "run-copied.sh: the program failed (status $status)"; exit 1; }
