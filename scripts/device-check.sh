#!/usr/bin/env bash
# The GPU checks of accel, as one script for a lent GPU machine (docs/reference/libtorch-versions.md).
#
#   scripts/device-check.sh --prepare   here, on the Debian machine: stages in .cache/device-prefix
#                                       what the GPU machine lacks (fmt, doctest, Boost.PFR,
#                                       nlohmann/json and xxHash headers with their CMake
#                                       configs, the Fashion-MNIST files) and prints how to run
#   scripts/device-check.sh             there (the device tool's run, carrying .cache/device-prefix):
#                                       builds against the Python torch it finds, runs the unit
#                                       tests, the example on the GPU in each precision, and
#                                       accel_bench on a GPT-2-small-sized transformer in bf16
#                                       next to bench/reference/ddp.py (PyTorch DDP over NCCL at
#                                       world size 1) on the same model; writes every log and a
#                                       summary to $OUT (default: ./device-out)
#
# One run is meant to fit in about 8 minutes (each step has its own timeout), so that a second
# try fits in the machine's 15-minute allowance. A step that fails is recorded and the next
# one runs anyway: the summary says what passed, failed and measured.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
prefix="$repo/.cache/device-prefix"

if [ "${1:-}" = "--prepare" ]; then
  set -e
  rm -rf "$prefix"
  mkdir -p "$prefix/include/boost" "$prefix/lib/x86_64-linux-gnu/cmake" "$prefix/lib/cmake" \
           "$prefix/share/cmake" "$prefix/fashion-mnist"
  cp -r /usr/include/fmt /usr/include/doctest /usr/include/nlohmann /usr/include/xxhash.h \
        /usr/include/xxh3.h "$prefix/include/"
  cp -r /usr/include/boost/pfr /usr/include/boost/pfr.hpp "$prefix/include/boost/"
  cp -r /usr/lib/x86_64-linux-gnu/cmake/fmt /usr/lib/x86_64-linux-gnu/cmake/Boost-1.81.0 \
        /usr/lib/x86_64-linux-gnu/cmake/boost_headers-1.81.0 "$prefix/lib/x86_64-linux-gnu/cmake/"
  # fmt's config checks that its library exists, though accel uses fmt header-only there.
  cp -a /usr/lib/x86_64-linux-gnu/libfmt.so* "$prefix/lib/x86_64-linux-gnu/"
  cp -r /usr/lib/cmake/doctest "$prefix/lib/cmake/"
  # Debian's doctest config names /usr; relative to where it now lies instead.
  sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
    "$prefix/lib/cmake/doctest/doctestTargets.cmake"
  cp -r /usr/share/cmake/nlohmann_json "$prefix/share/cmake/"
  cp /usr/share/datasets/fashion-mnist/*.gz "$prefix/fashion-mnist/"
  du -sh "$prefix"
  cat <<EOF
Staged. On a lent machine, one call of the device tool:
  run  command: scripts/device-check.sh   carry: [".cache/device-prefix"]   timeout_s: 540
EOF
  exit 0
fi

out=${OUT:-$repo/device-out}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
# step NAME TIMEOUT CMD...: runs CMD with its output in $out/NAME.log; notes pass or fail.
step() {
  local name=$1 limit=$2; shift 2
  local begin=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then note "PASS $name ($((SECONDS - begin)) s)"
  else note "FAIL $name (exit $rc after $((SECONDS - begin)) s; $name.log)"; tail -5 "$out/$name.log" | sed 's/^/     /' | tee -a "$summary"; fi
  return $rc
}

[ -d "$prefix" ] || { note "FAIL setup: $prefix missing: run scripts/device-check.sh --prepare on the Debian machine and carry .cache/device-prefix"; exit 1; }
python=$(command -v python3)
{
  date -u; uname -a; nvidia-smi 2>&1 | head -15
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
  c++ --version | head -1; cmake --version | head -1; command -v ninja
} >"$out/environment.txt" 2>&1
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
nccl_include=$("$python" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' 2>/dev/null)
[ -f "$nccl_include/nccl.h" ] || nccl_include=$(dirname "$(ls /usr/local/cuda*/include/nccl.h /usr/include/nccl.h 2>/dev/null | head -1)")
note "torch prefix: $torch_prefix; nccl.h in: $nccl_include"
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
build="$repo/build-device"

step configure 120 cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DACCEL_FMT_HEADER_ONLY=ON \
  -Dfmt_DIR="$prefix/lib/x86_64-linux-gnu/cmake/fmt" -Ddoctest_DIR="$prefix/lib/cmake/doctest" \
  -DBoost_DIR="$prefix/lib/x86_64-linux-gnu/cmake/Boost-1.81.0" \
  -Dboost_headers_DIR="$prefix/lib/x86_64-linux-gnu/cmake/boost_headers-1.81.0" \
  -Dnlohmann_json_DIR="$prefix/share/cmake/nlohmann_json" \
  -DACCEL_XXHASH_INCLUDE_DIR="$prefix/include" -DACCEL_NCCL_INCLUDE_DIR="$nccl_include" \
  -DACCEL_COMPILE_FAIL_TWINS=OFF || exit 1
step build 360 cmake --build "$build" -j"$(nproc)" --target accel_unit_tests fashion_mnist gpt accel_bench accel-launch accel-check || exit 1

# The unit tests build their tensors on the CPU: this runs them against this torch build.
# The CUDA cases among them (fp8 through _scaled_mm) must find tensor cores on an H200.
step unit_tests 90 env ACCEL_EXPECT_FP8_TENSOR_CORES=1 "$build/tests/accel_unit_tests"
grep -i "tensor cores\|skipped" "$out/unit_tests.log" | head -3 | sed 's/^/     /' | tee -a "$summary"
# The self-test on one process: its NCCL check makes a one-rank NCCL group on cuda:0 and runs
# the collectives on CUDA tensors (an Accelerator makes no group on one process).
step self_test_nccl 60 "$build/tools/accel-launch" test --nproc 1
grep "NCCL\|self-test:" "$out/self_test_nccl.log" | sed 's/^/     /' | tee -a "$summary"
# accel's own report: the devices it sees and whether c10d's NCCL group is compiled in.
step environment_report 30 "$build/tools/accel-launch" env
grep -i "nccl\|cuda" "$out/environment_report.log" | head -4 | sed 's/^/     /' | tee -a "$summary"

data="$repo/.cache/fashion-mnist"
mkdir -p "$data"
for f in "$prefix"/fashion-mnist/*.gz; do gzip -dc "$f" >"$data/$(basename "$f" .gz)"; done
for precision in fp32 bf16 fp16 fp8; do
  step "example_$precision" 60 "$build/examples/fashion_mnist/fashion_mnist" --precision "$precision" \
    --steps 300 --data-dir "$data" --eval-samples 2000
  grep -iE "device|accuracy" "$out/example_$precision.log" | tail -2 | sed 's/^/     /' | tee -a "$summary"
done

# GPT-2-small-sized: 12 blocks of hidden 768, 12 heads, sequence 1024 (85M parameters in the
# blocks); bf16 autocast, Adam. accel and PyTorch in turns.
model=(--model xfmr --hidden 768 --layers 12 --heads 12 --seq 1024 --batch 8 --optimizer adam
       --precision bf16 --steps 20 --warmup 5)
for turn in 1 2; do
  step "accel_bench_$turn" 120 "$build/bench/accel_bench" "${model[@]}"
  step "ddp_py_$turn" 120 "$python" "$repo/bench/reference/ddp.py" "${model[@]}" --device cuda
done
# The gpt example at GPT-2-small size (12 blocks of 768, 12 heads, 1024 bytes of context; the
# byte vocabulary makes it 85M parameters), bf16, AdamW with warmup and cosine: a user's
# transformer loop as it runs here. Its last line gives tokens/s and MFU against the H200's
# 989 TFLOP/s (the example's default peak per CUDA device). Text: accel's own docs/.
for strategy in ddp zero3; do
  step "gpt_$strategy" 90 "$build/examples/gpt/gpt" --strategy "$strategy" --precision bf16 \
    --layers 12 --hidden 768 --heads 12 --seq 1024 --batch-size 8 --steps 30 --warmup 5 \
    --text "$repo/docs" --eval-every 0 --eval-windows 16 --sample-tokens 0
  grep "^trained" "$out/gpt_$strategy.log" | sed 's/^/     /' | tee -a "$summary"
done
# Async checkpoints on CUDA: every 5 steps a snapshot into pinned host buffers, filled by a copy
# stream, written in the background; then a second run resumes from the newest one
# (docs/how-to/fault-tolerance.md).
checkpoints=$(mktemp -d)
small_gpt=(--precision bf16 --layers 2 --hidden 256 --heads 4 --seq 256 --batch-size 8 --warmup 2
           --text "$repo/docs" --eval-every 0 --eval-windows 16 --sample-tokens 0
           --checkpoint-dir "$checkpoints" --checkpoint-every 5 --async-checkpoint)
step gpt_async_checkpoint 90 "$build/examples/gpt/gpt" "${small_gpt[@]}" --steps 10
step gpt_resume 90 "$build/examples/gpt/gpt" "${small_gpt[@]}" --steps 15 --resume
grep -h "^resumed from\|^trained" "$out/gpt_resume.log" | sed 's/^/     /' | tee -a "$summary"
rm -rf "$checkpoints"
# Streaming data on CUDA: the gpt example reads docs/'s pages as text shards through
# StreamingLoader's worker threads (docs/how-to/streaming-data.md), batches moved to the GPU.
step gpt_stream 90 "$build/examples/gpt/gpt" --precision bf16 --layers 2 --hidden 256 --heads 4 \
  --seq 256 --batch-size 8 --warmup 2 --steps 10 --stream "$repo/docs" --eval-every 0 \
  --eval-windows 16 --sample-tokens 0
grep -h "^trained" "$out/gpt_stream.log" | sed 's/^/     /' | tee -a "$summary"
# Tensor parallelism is not run here: NCCL takes one rank per GPU, so tp 2 needs two GPUs, and
# tp 1 on one GPU is plain Ddp (the gpt steps above).
note "tensor parallelism: not run (one GPU; tp 2 needs two, tp 1 is plain Ddp)"
# CPU offload's memory table: peak device memory of Zero2 at world size 1 (one GPU: NCCL takes
# one rank per GPU, and offload.parameters needs two ranks) without and with offload.optimizer.
for offload in none optimizer; do
  step "offload_$offload" 90 "$build/bench/accel_bench" "${model[@]}" \
    --strategy zero2 --offload "$offload" --steps 5 --warmup 2
done
peak_tflops=989  # H200 (as H100 SXM): dense bf16 tensor-core peak
for log in "$out"/accel_bench_*.log "$out"/ddp_py_*.log "$out"/offload_*.log; do
  [ -f "$log" ] || continue
  tf=$(grep -o 'model_tflops_per_s_per_rank=[0-9.]*' "$log" | cut -d= -f2)
  note "$(basename "$log" .log): $(grep -h '^tokens:\|^device_memory:\|^steps_per_s' "$log" | tr '\n' ' ')${tf:+mfu=$(awk -v t="$tf" -v p=$peak_tflops 'BEGIN{printf "%.3f", t/p}')}"
done
note "done in $SECONDS s"
