#!/usr/bin/env bash
# Sets up the machine (Debian packages only; idempotent), builds accel's tests, examples and
# benchmarks, and runs the whole test suite, on one or both libtorch legs:
#   scripts/test.sh                  libtorch 1.13, the host's Debian 12 packages, in build/
#   scripts/test.sh --leg debian13   libtorch 2.6, in a Debian 13 root (debootstrap + chroot),
#                                    in build-debian13/
#   scripts/test.sh --leg all        both, the host first
# Arguments after the options go to ctest, e.g. scripts/test.sh -R unit
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
leg=host
if [ "${1:-}" = "--leg" ]; then leg=${2:?"--leg needs host, debian13 or all"}; shift 2; fi

# The same steps on either leg; $1 is the build folder as the building system sees it.
configure_build_test() {
  local source=$1 build=$2; shift 2
  cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build "$build" -j"$(nproc)"
  ctest --test-dir "$build" -j"$(nproc)" --output-on-failure "$@"
}

run_host() {
  "$repo/scripts/setup-debian.sh"
  configure_build_test "$repo" "${ACCEL_BUILD_DIR:-$repo/build}" "$@"
}

run_debian13() {
  "$repo/scripts/debian13-root.sh"
  # The root sees the repo at /src; its build folder is separate from the host's.
  "$repo/scripts/in-debian13.sh" -- \
    bash -c "$(declare -f configure_build_test); configure_build_test /src /src/build-debian13 \"\$@\"" \
    configure_build_test "$@"
}

case "$leg" in
  host) run_host "$@" ;;
  debian13) run_debian13 "$@" ;;
  all) run_host "$@" && run_debian13 "$@" ;;
  *) echo "scripts/test.sh: unknown leg '$leg' (host, debian13 or all)" >&2; exit 2 ;;
esac
