#!/usr/bin/env bash
# ctest docs.reference_detects: check-reference.sh passes this repository's own code and pages,
# and fails, naming each item, when entries are taken out of the reference pages or the code gains
# things no page names. Each case runs on a tree in a temporary folder: a copy of
# docs/reference/, and links to the repository's include/, src/, tools/ and examples/, replaced
# by a copy where a case changes one.
#   check-reference-detects.sh CHECK_REFERENCE_SH ROOT
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: check-reference-detects.sh CHECK_REFERENCE_SH ROOT" >&2; exit 2; }
check="$1"
root="$2"
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-check-reference.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0

clean() {
  rm -rf "$work/tree" && mkdir -p "$work/tree/docs" &&
    cp -R "$root/docs/reference" "$work/tree/docs/" &&
    for top in include src tools examples; do ln -s "$(cd "$root/$top" && pwd)" "$work/tree/$top"; done
}
writable() {  # writable TOP: the tree's TOP becomes a copy that a case may change
  rm "$work/tree/$1" && cp -R "$root/$1" "$work/tree/$1"
}

expect() {  # expect pass|fail NAME PATTERN...: run the check, compare, look for each PATTERN
  local want=$1 name=$2 out rc pattern missing=
  shift 2
  out=$("$check" "$work/tree" 2>&1); rc=$?
  for pattern in "$@"; do grep -qF -- "$pattern" <<<"$out" || missing="$missing '$pattern'"; done
  if { [ "$want" = pass ] && [ $rc -ne 0 ]; } || { [ "$want" = fail ] && [ $rc -ne 1 ]; }; then
    echo "reference_detects: $name: expected $want, the check exited $rc:"; echo "$out"; status=1
  elif [ -n "$missing" ]; then
    echo "reference_detects: $name: the output does not name$missing:"; echo "$out"; status=1
  else
    echo "reference_detects: $name: $want, as expected"
  fi
}

ref="$work/tree/docs/reference"
clean; expect pass "the repository as it is"

# Entries taken out of each page: the name no longer appears there.
clean
sed -i 's/ACCEL_PROGRESS/ACCEL_PROGRES/g; s/TORCHELASTIC_RESTART_COUNT/TORCHELASTIC_RESTARTS/g' \
  "$ref/environment.md"
sed -i 's/--logy/--log-y/g; s/`verify`/verify/g' "$ref/cli.md"
sed -i 's/memory_use/memory_usage/g' "$ref/accelerator.md"
sed -i 's/tune_cpu_heap/tune_heap/g; s/reduce_scatters_in_flight/reduce_scatters/g; s/`\.backoff_factor`//' \
  "$ref/options.md"
sed -i 's#tracking/progress.hpp#tracking/progres.hpp#g' "$ref/errors.md"
expect fail "entries missing from every page" \
  "environment variable \`ACCEL_PROGRESS\`" "\`TORCHELASTIC_RESTART_COUNT\`" "flag \`--logy\`" \
  "subcommand \`verify\`" "member of the Accelerator \`memory_use\`" \
  "field of accel::Options \`tune_cpu_heap\`" "\`zero2.reduce_scatters_in_flight\`" \
  "\`loss_scaling.backoff_factor\`" "\`tracking/progress.hpp\`"

# The code gains things no page names: a variable, a flag, a member, a field, an error site.
clean; writable include; writable tools; writable examples
printf '%s\n' '#include <cstdlib>' 'inline bool knob() { return std::getenv("ACCEL_NEW_KNOB"); }' \
  >"$work/tree/examples/new_knob.hpp"
sed -i 's/^    --logy) logy=1; shift ;;/    --logy|--log-base) logy=1; shift ;;/' "$work/tree/tools/accel-plot"
sed -i 's/^  void set_seed(std::uint64_t seed) {/  void lower_trigger() {}\n  void set_seed(std::uint64_t seed) {/' \
  "$work/tree/include/accel/accelerator_class.hpp"
sed -i 's/^  bool even_batches = true;/  bool drop_uneven = false;\n  bool even_batches = true;/' \
  "$work/tree/include/accel/options.hpp"
printf '%s\n' '#include <accel/error.hpp>' 'int main() { throw accel::Error("accel: no; do this"); }' \
  >"$work/tree/tools/refusal.cpp"
expect fail "undocumented additions to the code" "\`ACCEL_NEW_KNOB\`" "flag \`--log-base\`" \
  "\`lower_trigger\`" "\`drop_uneven\`" "\`tools/refusal.cpp\`"

# The class grows past 40 public member functions of its own (here 35 + 6, all documented).
clean; writable include
sed -i 's/^  void set_seed(std::uint64_t seed) {/  void set_trigger(int) {}\n  void set_trigger(long) {}\n  void set_trigger(char) {}\n  void set_trigger(short) {}\n  void set_trigger(bool) {}\n  void set_trigger(float) {}\n  void set_seed(std::uint64_t seed) {/' \
  "$work/tree/include/accel/accelerator_class.hpp"
expect fail "a class of more than 40 public member functions" "declares 41 public member functions"

# An extraction that matches nothing fails rather than passing on nothing.
clean; writable include
sed -i 's/^struct Options {/struct Settings {/' "$work/tree/include/accel/options.hpp"
expect fail "Options renamed, so no field is found" "found no field of accel::Options"
exit $status
