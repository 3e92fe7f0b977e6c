#!/usr/bin/env bash
# Sets up the machine (Debian packages only; idempotent), builds accel's tests, examples and
# benchmarks, and runs the whole test suite, on one or both libtorch legs:
#   scripts/test.sh                  libtorch 1.13, the host's Debian 12 packages, in build/,
#                                    without the package checks' compiles (the Debian 13 leg
#                                    has them; ACCEL_PACKAGE_COMPILES in tests/CMakeLists.txt)
#   scripts/test.sh --leg debian13   libtorch 2.6, in a Debian 13 root (debootstrap + chroot),
#                                    in build-debian13/, without the benchmarks and the
#                                    checks whose outcome does not depend on the libtorch
#                                    version (the host leg has them; ACCEL_TORCH_NEUTRAL_TESTS
#                                    in tests/CMakeLists.txt lists them)
#   scripts/test.sh --leg all        both, the host first; the Debian 13 root is made while the
#                                    host leg builds and tests (downloads and unpacking wait on
#                                    the network and the disk, the build on the CPU)
# Arguments after the options go to ctest, e.g. scripts/test.sh -R unit
# Each phase prints how long it took ("test.sh: <leg> <phase>: <seconds> s").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
leg=host
if [ "${1:-}" = "--leg" ]; then leg=${2:?"--leg needs host, debian13 or all"}; shift 2; fi

# The same steps on either leg. $1: the leg's name, $2: the source folder and $3: the build
# folder as the building system sees them, $4: extra cmake arguments; the rest go to ctest.
configure_build_test() {
  local name=$1 source=$2 build=$3 extra=$4 start; shift 4
  start=$SECONDS
  # shellcheck disable=SC2086  # $extra is a list of words
  cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release $extra
  cmake --build "$build" -j"$(nproc)"
  echo "test.sh: $name configure and build: $((SECONDS - start)) s"
  start=$SECONDS
  # The tests' programs ask glibc's malloc for transparent huge pages (where the kernel's THP mode
  # is madvise or always; nothing changes under never): a program that loads libtorch, or fills
  # the example's 188 MB dataset, then faults its memory in 2 MiB pages rather than 4 KiB ones,
  # a sixth less CPU for ctest (docs/dev/test-suite.md). No test depends on it.
  # ctest's output is kept beside its own logs, to list the skipped tests after it.
  # ctest's own status is the leg's, whatever shell options the caller has (the Debian 13 leg
  # runs this function in a shell of its own): read from PIPESTATUS, not from the pipeline.
  local status log="$build/Testing/test.sh-ctest.log" errexit=0
  mkdir -p "$build/Testing"
  [[ $- == *e* ]] && errexit=1
  set +e
  GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1 \
    ctest --test-dir "$build" -j"$(nproc)" --output-on-failure "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  [ "$errexit" = 1 ] && set -e
  echo "test.sh: $name ctest: $((SECONDS - start)) s"
  report_skipped "$name" "$log"
  return "$status"
}

# The tests ctest skipped (SKIP_RETURN_CODE, docs/dev/testing.md), by name, and their count:
# the "(Skipped)" entries of ctest's "The following tests did not run" block in log $2.
report_skipped() {
  local name=$1 log=$2 skipped
  skipped=$(sed -n 's/^[[:space:]]*[0-9][0-9]* - \(.*\) (Skipped)$/\1/p' "$log")
  if [ -z "$skipped" ]; then
    echo "test.sh: $name: 0 tests skipped"
  else
    echo "test.sh: $name: $(wc -l <<<"$skipped") test(s) skipped:"
    sed 's/^/  /' <<<"$skipped"
  fi
}

timed() {
  local what=$1 start=$SECONDS; shift
  "$@"
  echo "test.sh: $what: $((SECONDS - start)) s"
}

run_host() {
  timed "host setup" "$repo/scripts/setup-debian.sh"
  configure_build_test host "$repo" "${ACCEL_BUILD_DIR:-$repo/build}" "$host_leg" "$@"
}

# Both legs link accel's programs to accel::compiled (the separately compiled mode: accel's
# non-template code compiled once, a fifth less compile time per TU, more under libtorch 2.6's
# headers). The header-only mode is what package.copied_headers builds, on the Debian 13 leg:
# the package checks' compiles run there only (ACCEL_PACKAGE_COMPILES, tests/CMakeLists.txt).
# Each leg builds the examples' default policy subset and checks that the whole matrix compiles
# (example.all_variants, -fsyntax-only).
# The tools, examples and benchmarks are compiled at -O0 as the tests are, accel::compiled at -O1
# (ACCEL_QUICK_PROGRAMS): here they are only checked; scripts/run-example.sh and bench/run.sh
# build them at -O3 again.
both_legs="-DACCEL_USE_COMPILED=ON -DACCEL_QUICK_PROGRAMS=ON"
host_leg="$both_legs -DACCEL_PACKAGE_COMPILES=OFF"

# The root sees the repo at /src; its build folder is separate from the host's.
test_in_debian13() {
  "$repo/scripts/in-debian13.sh" -- \
    bash -c "set -euo pipefail; $(declare -f configure_build_test report_skipped); configure_build_test debian13 /src /src/build-debian13 \"$both_legs -DACCEL_BUILD_BENCH=OFF -DACCEL_TORCH_NEUTRAL_TESTS=OFF -DACCEL_PACKAGE_COMPILES=ON\" \"\$@\"" \
    configure_build_test "$@"
}

run_debian13() {
  timed "debian13 root" "$repo/scripts/debian13-root.sh"
  test_in_debian13 "$@"
}

run_all() {
  timed "host setup" "$repo/scripts/setup-debian.sh"
  local root_log root_pid root_start=$SECONDS
  root_log=$(mktemp "${TMPDIR:-/tmp}/accel-debian13-root.XXXXXX")
  "$repo/scripts/debian13-root.sh" >"$root_log" 2>&1 &
  root_pid=$!
  # shellcheck disable=SC2064  # expand now: the trap must name this pid and log
  trap "kill $root_pid 2>/dev/null || true; rm -f '$root_log'" EXIT
  configure_build_test host "$repo" "${ACCEL_BUILD_DIR:-$repo/build}" "$host_leg" "$@"
  local status=0
  wait "$root_pid" || status=$?
  sed 's/^/  /' "$root_log"
  echo "test.sh: debian13 root (made during the host leg): ready $((SECONDS - root_start)) s after it started"
  [ "$status" -eq 0 ] || { echo "test.sh: scripts/debian13-root.sh failed (exit $status, log above)" >&2; exit "$status"; }
  test_in_debian13 "$@"
}

case "$leg" in
  host) run_host "$@" ;;
  debian13) run_debian13 "$@" ;;
  all) run_all "$@" ;;
  *) echo "scripts/test.sh: unknown leg '$leg' (host, debian13 or all)" >&2; exit 2 ;;
esac
