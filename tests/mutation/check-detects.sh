#!/usr/bin/env bash
# ctest mutation.list_detects: `run.sh --check` passes a good list and fails each defect it exists
# to find, naming the mutation: an original text no longer in its file (the code changed under
# the list), one that occurs twice (which one would be mutated?), an id used twice, a missing
# field. Each list is written here, in a temporary folder, about a file of the source tree.
#   check-detects.sh RUN_SH
set -uo pipefail
run=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-mutation-detects.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0

entry() {  # entry ID ORIGINAL: a block mutating include/accel/version.hpp
  printf 'id: %s\nkind: operator\nfile: include/accel/version.hpp\ntests: ^mutation\\.none$\n' "$1"
  printf 'original: %s\nreplacement: %s x\n\n' "$2" "$2"
}

expect() {  # expect pass|fail NAME PATTERN: check the list in $work/list.txt
  local want=$1 name=$2 pattern=$3 out rc
  out=$("$run" --check --list-file "$work/list.txt" 2>&1); rc=$?
  if { [ "$want" = pass ] && [ $rc -ne 0 ]; } || { [ "$want" = fail ] && [ $rc -eq 0 ]; }; then
    echo "list_detects: $name: expected $want, run.sh --check exited $rc:"; echo "$out"; status=1
  elif ! grep -q -- "$pattern" <<<"$out"; then
    echo "list_detects: $name: the output lacks '$pattern':"; echo "$out"; status=1
  else
    echo "list_detects: $name: $want as expected"
  fi
}

entry good '#define ACCEL_VERSION_MAJOR 0' >"$work/list.txt"
expect pass good "1 mutations, each original text found once"

{ entry good '#define ACCEL_VERSION_MAJOR 0'; entry gone '#define ACCEL_VERSION_MAJOR 99'; } \
  >"$work/list.txt"
expect fail missing_snippet "gone: its original text occurs 0 times in include/accel/version.hpp"

entry twice '#define ACCEL_VERSION_M' >"$work/list.txt"
expect fail duplicated_snippet "twice: its original text occurs 2 times"

{ entry same '#define ACCEL_VERSION_MAJOR 0'; entry same '#define ACCEL_VERSION_MINOR 1'; } \
  >"$work/list.txt"
expect fail duplicated_id "id 'same' is used twice"

entry good '#define ACCEL_VERSION_MAJOR 0' | grep -v '^tests:' >"$work/list.txt"
expect fail missing_field "has no 'tests:' line"

exit $status
