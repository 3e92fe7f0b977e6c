#!/usr/bin/env bash
# What one variant's translation unit costs to compile: accel against plain libtorch.
#
#   bench/compile_cost.sh [--turns N] [--build-dir DIR] [--parts] [--fmt-header-only] [--separate]
#                         [--lean] [--pch]
#
# bench/compile_cost/accel.cpp is a training program through <accel/accelerator.hpp>
# (Accelerator<Ddp, Bf16, GradAccum<4>>, an accel::DataLoader, prepare, backward, step);
# bench/compile_cost/plain.cpp is the same program in plain libtorch (torch::data, autocast and
# gradient accumulation by hand). The script configures bench/compile_cost/ (a CMake project
# that adds accel as a subproject) into DIR (default build-compile-cost/), reads the exact
# command each TU gets through accel::accel from DIR/compile_commands.json (-O3 -DNDEBUG
# -std=gnu++20, torch's include dirs and defines, ACCEL_HAS_GLOO, ...; both TUs get the same
# flags), then runs those commands itself, one at a time, in alternation:
# plain, accel, plain, accel, ... (--turns each, default 3, at least 3 recommended). Each
# compile's wall time and peak RSS come from `/usr/bin/time -f "%e %M"`.
#
# It prints one row per turn (with the 1-minute load average before each compile: others
# compiling on the same cores show up there) and, as its last line,
#   compile_ratio=<median over turns of accel_s/plain_s> peak_ratio=<median of accel/plain RSS>
# Each ratio is taken within a turn, from two compiles made one after the other, so a load
# that drifts over the run skews the ratio less than it skews the times.
#
# --parts also compiles every bench/compile_cost/parts/*.cpp (stripped TUs that include one
# header group of accel each over <torch/torch.h>, see docs/dev/build-time.md) in the same turns
# and prints, per part, its median time and RSS and the difference from parts/torch_only.cpp.
# They print before the last line, which stays the compile_ratio line.
#
# --fmt-header-only configures accel with -DACCEL_FMT_HEADER_ONLY=ON (FMT_HEADER_ONLY, {fmt}
# compiled into every TU; default build dir then
# build-compile-cost-fmt-header-only/), to measure what linking libfmt buys.
#
# --separate times accel.cpp in the separately compiled mode (through accel::compiled, which
# defines ACCEL_SEPARATE_COMPILATION: accel's non-template code is then compiled once, in
# src/accel.cpp, and not in the TU; docs/getting-started.md) in place of header-only accel.cpp.
#
# --lean times accel.cpp in the separately compiled mode including only its alias's headers
# (<accel/accelerator_class.hpp>, which has Ddp and Fp32, and <accel/precision/bf16.hpp>) where
# the other modes include <accel/accelerator.hpp> with every policy (docs/getting-started.md,
# "Compile time").
#
# --pch compiles both TUs over a precompiled header of what each includes (torch for plain.cpp,
# torch and <accel/accelerator.hpp> for accel.cpp), built once before the turns, as a user with
# precompiled headers would. Not with --separate.
#
# Needs cmake, a C++20 g++, libtorch and accel's other dependencies (scripts/setup-debian.sh),
# python3 (to read compile_commands.json) and GNU time at /usr/bin/time (Debian: `time`).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=""
turns=3
parts=0
fmt_header_only=OFF
accel_tu=accel
plain_tu=plain
pch=0

while [ $# -gt 0 ]; do
  case "$1" in
    --turns) [ $# -ge 2 ] || { echo "compile_cost.sh: --turns needs a value" >&2; exit 2; }
             turns=$2; shift 2 ;;
    --build-dir) [ $# -ge 2 ] || { echo "compile_cost.sh: --build-dir needs a value" >&2; exit 2; }
                 mkdir -p "$2"; build_dir=$(cd "$2" && pwd); shift 2 ;;
    --parts) parts=1; shift ;;
    --fmt-header-only) fmt_header_only=ON; shift ;;
    --separate) accel_tu=accel_compiled; shift ;;
    --lean) accel_tu=accel_lean; shift ;;
    --pch) pch=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "compile_cost.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$build_dir" ]; then
  build_dir="$repo/build-compile-cost"
  [ "$fmt_header_only" = ON ] && build_dir+="-fmt-header-only"
fi
if [ "$pch" = 1 ] && [ "$accel_tu" != accel ]; then
  echo "compile_cost.sh: --pch with --separate or --lean: use one of them" >&2; exit 2
fi
case "$turns" in
  ''|*[!0-9]*|0) echo "compile_cost.sh: --turns '$turns' must be a whole number >= 1" >&2; exit 2 ;;
esac
[ -x /usr/bin/time ] || {
  echo "compile_cost.sh: GNU time is missing at /usr/bin/time (Debian: apt-get install time," \
       "or scripts/setup-debian.sh)" >&2
  exit 1
}
python=$(command -v python3 || true)
[ -n "$python" ] || { echo "compile_cost.sh: python3 is needed to read compile_commands.json" >&2; exit 1; }

# --- Configure, then read each TU's compile command -------------------------------------------------
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ -f "$build_dir/CMakeCache.txt" ]; then generator=(); fi  # keep the generator it has
echo "compile_cost: configuring $build_dir" >&2
mkdir -p "$build_dir"
cmake -S "$repo/bench/compile_cost" -B "$build_dir" "${generator[@]}" \
  -DACCEL_FMT_HEADER_ONLY="$fmt_header_only" >"$build_dir/configure.log" 2>&1 || {
  cat "$build_dir/configure.log" >&2
  echo "compile_cost.sh: configuring bench/compile_cost failed (log above)" >&2
  exit 1
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/accel-compile-cost.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# One file per TU in $scratch/cmd: a NUL-separated argument list, with `-o <object>` pointing into
# $scratch, and the folder to run it in.
mkdir -p "$scratch/cmd" "$scratch/obj"
"$python" - "$build_dir/compile_commands.json" "$repo/bench/compile_cost" "$scratch" <<'PY'
import json, os, shlex, sys
database, sources, scratch = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
for entry in json.load(open(database)):
    source = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not source.startswith(sources + os.sep):
        continue
    name = os.path.relpath(source, sources)[: -len(".cpp")].replace(os.sep, "__")
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = args.index("-o")
    args[out + 1] = os.path.join(scratch, "obj", name + ".o")
    with open(os.path.join(scratch, "cmd", name), "w") as f:
        f.write(entry["directory"] + "\0" + "\0".join(args) + "\0")
PY
if [ "$pch" = 1 ]; then
  plain_tu=plain_pch
  accel_tu=accel_pch
  echo "compile_cost: building the precompiled headers" >&2
  cmake --build "$build_dir" --target compile_cost_plain_pch "compile_cost_$accel_tu" \
    >"$build_dir/pch.log" 2>&1 || {
    cat "$build_dir/pch.log" >&2
    echo "compile_cost.sh: building the precompiled headers failed (log above)" >&2
    exit 1
  }
fi
for tu in "$plain_tu" "$accel_tu"; do
  [ -f "$scratch/cmd/$tu" ] || { echo "compile_cost.sh: no compile command for $tu.cpp in $build_dir" >&2; exit 1; }
done
echo "compile_cost: command ($accel_tu.cpp): $(tr '\0' ' ' <"$scratch/cmd/$accel_tu" | cut -d' ' -f2-)" >&2

# compile NAME: runs NAME's command under /usr/bin/time; sets $seconds (wall), $cpu (user + system
# seconds) and $kib (peak RSS).
compile() {
  local name=$1 dir args=()
  { IFS= read -r -d '' dir; while IFS= read -r -d '' a; do args+=("$a"); done; } <"$scratch/cmd/$name"
  if ! (cd "$dir" && /usr/bin/time -o "$scratch/time" -f "%e %M %U %S" "${args[@]}") >"$scratch/log" 2>&1; then
    cat "$scratch/log" >&2
    echo "compile_cost.sh: compiling $name.cpp failed (output above)" >&2
    exit 1
  fi
  local user sys
  read -r seconds kib user sys < <(tail -n 1 "$scratch/time")
  cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
  rm -f "$scratch/obj/$name.o"
}

load() { cut -d' ' -f1 /proc/loadavg; }

part_names=()
if [ "$parts" = 1 ]; then
  for f in "$scratch"/cmd/parts__*; do part_names+=("$(basename "$f")"); done
  [ -f "$scratch/cmd/parts__torch_only" ] || { echo "compile_cost.sh: parts/torch_only.cpp is missing" >&2; exit 1; }
fi

# --- Turns --------------------------------------------------------------------------------------------
: >"$scratch/pairs"
: >"$scratch/parts"
printf '%-5s %8s %9s %9s %8s %9s %9s %10s %9s %10s %11s\n' turn plain_s plain_cpu \
  plain_MiB accel_s accel_cpu accel_MiB wall_ratio cpu_ratio peak_ratio load_before
for ((turn = 1; turn <= turns; ++turn)); do
  load_plain=$(load); compile "$plain_tu"; plain_s=$seconds; plain_kib=$kib; plain_cpu=$cpu
  load_accel=$(load); compile "$accel_tu"; accel_s=$seconds; accel_kib=$kib; accel_cpu=$cpu
  echo "$plain_s $plain_kib $accel_s $accel_kib $plain_cpu $accel_cpu" >>"$scratch/pairs"
  awk -v t="$turn" -v ps="$plain_s" -v pk="$plain_kib" -v as="$accel_s" -v ak="$accel_kib" \
      -v pc="$plain_cpu" -v ac="$accel_cpu" -v lp="$load_plain" -v la="$load_accel" 'BEGIN {
    printf "%-5s %8.2f %9.2f %9.0f %8.2f %9.2f %9.0f %10.3f %9.3f %10.3f %5.2f/%-5.2f\n", t,
           ps, pc, pk / 1024, as, ac, ak / 1024, as / ps, ac / pc, ak / pk, lp, la }'
  for name in "${part_names[@]}"; do
    compile "$name"
    echo "${name#parts__} $seconds $kib $cpu" >>"$scratch/parts"
  done
done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

plain_med=$(cut -d' ' -f1 "$scratch/pairs" | median)
accel_med=$(cut -d' ' -f3 "$scratch/pairs" | median)
plain_mem=$(cut -d' ' -f2 "$scratch/pairs" | median)
accel_mem=$(cut -d' ' -f4 "$scratch/pairs" | median)
plain_cpu=$(cut -d' ' -f5 "$scratch/pairs" | median)
accel_cpu=$(cut -d' ' -f6 "$scratch/pairs" | median)
compile_ratio=$(awk '{ print $3 / $1 }' "$scratch/pairs" | median)
peak_ratio=$(awk '{ print $4 / $2 }' "$scratch/pairs" | median)
cpu_ratio=$(awk '{ print $6 / $5 }' "$scratch/pairs" | median)
awk -v ps="$plain_med" -v as="$accel_med" -v pk="$plain_mem" -v ak="$accel_mem" \
    -v pc="$plain_cpu" -v ac="$accel_cpu" 'BEGIN {
  printf "%-5s %8.2f %9.2f %9.0f %8.2f %9.2f %9.0f %10.3f %9.3f %10.3f  (medians; ratios of them)\n",
         "med", ps, pc, pk / 1024, as, ac, ak / 1024, as / ps, ac / pc, ak / pk }'

if [ "$parts" = 1 ]; then
  field() { awk -v p="$1" -v f="$2" '$1 == p { print $f }' "$scratch/parts" | median; }
  base_s=$(field torch_only 2); base_k=$(field torch_only 3); base_c=$(field torch_only 4)
  echo
  echo "parts: medians over $turns turn(s); each minus parts/torch_only.cpp's"
  printf '%-22s %8s %8s %8s %8s %9s %9s\n' part wall_s minus cpu_s minus peak_MiB minus
  row() {
    awk -v p="$1" -v s="$2" -v c="$3" -v k="$4" -v bs="$base_s" -v bc="$base_c" -v bk="$base_k" 'BEGIN {
      printf "%-22s %8.2f %+8.2f %8.2f %+8.2f %9.0f %+9.0f\n",
             p, s, s - bs, c, c - bc, k / 1024, (k - bk) / 1024 }'
  }
  for name in "${part_names[@]}"; do
    p=${name#parts__}
    row "$p" "$(field "$p" 2)" "$(field "$p" 4)" "$(field "$p" 3)"
  done
  row "(plain.cpp)" "$plain_med" "$plain_cpu" "$plain_mem"
  row "(accel.cpp)" "$accel_med" "$accel_cpu" "$accel_mem"
fi
echo "cpu_ratio=$(printf '%.3f' "$cpu_ratio") (user + system seconds; less sensitive to others' load)"
echo "compile_ratio=$(printf '%.3f' "$compile_ratio") peak_ratio=$(printf '%.3f' "$peak_ratio")"
