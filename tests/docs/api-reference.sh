#!/usr/bin/env bash
# The API reference (ctest docs.api_reference; docs/dev/api-reference.md): runs Doxygen with
# docs/api/Doxyfile over the public headers and fails on any warning, above all a public member
# without a `///` comment. The HTML goes to OUT/html; OUT/warnings.txt keeps the warnings.
#   api-reference.sh ROOT OUT    ROOT: the repository; OUT: a folder of the build (emptied first)
# Exits 77 (ctest: skipped) only when doxygen is not installed; scripts/setup-debian.sh and
# scripts/debian13-root.sh install it, so on both legs of the suite it runs.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: api-reference.sh ROOT OUT" >&2; exit 2; }
root="$1"
out="$2"
if ! command -v doxygen >/dev/null; then
  echo "api-reference: doxygen is not installed (apt-get install doxygen; scripts/setup-debian.sh" \
       "installs it): skipped"
  exit 77
fi
[ -f "$root/docs/api/Doxyfile" ] || { echo "api-reference: no $root/docs/api/Doxyfile" >&2; exit 2; }
case "$out" in
  /*) ;;
  *) out="$PWD/$out" ;;
esac
rm -rf "$out" && mkdir -p "$out" || { echo "api-reference: cannot make $out" >&2; exit 2; }
cd "$root" || exit 2

# The Doxyfile's INPUT is relative to the repository; the output and the warnings' file are
# set here, after it (a later line wins), so that nothing is written into the source tree.
{
  cat docs/api/Doxyfile
  printf 'OUTPUT_DIRECTORY = "%s"\nWARN_LOGFILE = "%s"\n' "$out" "$out/warnings.txt"
} | doxygen - >"$out/doxygen.log" 2>&1
status=$?

if [ "$status" -ne 0 ] || [ -s "$out/warnings.txt" ]; then
  echo "api-reference: doxygen $(doxygen --version) failed (status $status) on docs/api/Doxyfile:"
  cat "$out/warnings.txt" 2>/dev/null
  grep -v '^$' "$out/doxygen.log"
  echo "api-reference: document each public member with a /// comment" \
       "(docs/dev/api-reference.md)"
  exit 1
fi
[ -f "$out/html/index.html" ] || { echo "api-reference: doxygen wrote no $out/html/index.html"; exit 1; }
echo "api-reference: doxygen $(doxygen --version), no warnings; $out/html/index.html"
