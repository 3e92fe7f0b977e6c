#!/usr/bin/env bash
# ctest docs.check_detects: check-docs.sh passes a clean tree and fails each kind of defect it
# exists to find, naming the file. Each case is a small tree made here, in a temporary folder.
#   check-docs-detects.sh CHECK_DOCS_SH
set -uo pipefail
check="$1"
work=$(mktemp -d "${TMPDIR:-/tmp}/accel-check-docs.XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0

# A clean tree: a README linking a doc, its heading, a repeated heading, an explicit id, an image.
clean() {
  rm -rf "$work/tree" && mkdir -p "$work/tree/docs/dev" "$work/tree/include/accel" "$work/tree/docs/images"
  cat >"$work/tree/README.md" <<'MD'
# accel
See [the guide](docs/guide.md#the-options-and-their-errors), [again](docs/guide.md#usage-1),
[an id](docs/guide.md#kept-id), [a folder](docs/dev), ![a chart](docs/images/chart.png),
[the web](https://example.org/x#y) and `[not a link](missing.md)`.
```sh
echo "[in code](missing.md)"
```
MD
  cat >"$work/tree/docs/guide.md" <<'MD'
# Guide
## The options, and their errors
## Usage
## Usage
<a id="kept-id"></a>A paragraph; back to [the top](#guide) and [the readme](../README.md).
MD
  echo "# Notes" >"$work/tree/docs/dev/notes.md"
  : >"$work/tree/docs/images/chart.png"
  printf '%s\n' '// Why this header exists.' 'int f();' '// The rules: docs/guide.md#usage, docs/dev/notes.md.' \
    >"$work/tree/include/accel/a.hpp"
  mkdir -p "$work/tree/tools" && echo 'fail("see docs/guide.md#kept-id");' >"$work/tree/tools/t.cpp"
}

expect() {  # expect pass|fail NAME PATTERN: run the check on the tree, compare, look for PATTERN
  local want=$1 name=$2 pattern=$3 out rc
  out=$("$check" "$work/tree" 2>&1); rc=$?
  if { [ "$want" = pass ] && [ $rc -ne 0 ]; } || { [ "$want" = fail ] && [ $rc -ne 1 ]; }; then
    echo "check_detects: $name: expected $want, the check exited $rc:"; echo "$out"; status=1
  elif [ -n "$pattern" ] && ! grep -q -- "$pattern" <<<"$out"; then
    echo "check_detects: $name: the output does not name '$pattern':"; echo "$out"; status=1
  else
    echo "check_detects: $name: $want, as expected"
  fi
}

clean; expect pass "a clean tree" ""
clean; sed -i 's#docs/guide.md#docs/gude.md#' "$work/tree/README.md"
expect fail "a link to a missing file" "README.md:2: link to 'docs/gude.md"
clean; sed -i 's#(\.\./README.md)#(../READ.md)#' "$work/tree/docs/guide.md"
expect fail "a missing file, relative to the page's folder" "docs/guide.md:5"
clean; sed -i 's/the-options-and-their-errors/the-options-and-their-error/' "$work/tree/README.md"
expect fail "an anchor that matches no heading" "#the-options-and-their-error"
clean; sed -i 's/#usage-1/#usage-2/' "$work/tree/README.md"
expect fail "a repeated heading's anchor beyond the repeats" "#usage-2"
clean; sed -i 's/#kept-id/#lost-id/' "$work/tree/README.md"
expect fail "an anchor that matches no id" "#lost-id"
clean; sed -i 's/(#guide)/(#gide)/' "$work/tree/docs/guide.md"
expect fail "an anchor within the page" "#gide"
# The words are spelled in two pieces so that this file holds none of them whole.
for word in "st""op 58" "at st""op" "this st""op" "ses""sion" "iss""ue 32" "helper ag""ent" \
            "this we""ek" "latest r""un"; do
  clean; echo "Measured in the $word, 1.2x." >>"$work/tree/docs/dev/notes.md"
  expect fail "'$word' in docs/dev" "docs/dev/notes.md:2"
done
clean; echo "Faster since st""op 12." >>"$work/tree/README.md"
expect fail "a numbered stop in README.md" "README.md:8"
clean; sed -i '1s#.*#// Faster since iss''ue 7.#' "$work/tree/include/accel/a.hpp"
expect fail "a numbered issue in a comment under include/" "include/accel/a.hpp"
clean; sed -i 's|docs/guide.md#usage|docs/gude.md#usage|' "$work/tree/include/accel/a.hpp"
expect fail "a page named in a comment that does not exist" "include/accel/a.hpp:3: names 'docs/gude.md#usage'"
clean; sed -i 's/#kept-id/#lost-id/' "$work/tree/tools/t.cpp"
expect fail "an anchor named in an error message that matches no heading" "tools/t.cpp:1: names 'docs/guide.md#lost-id'"
clean; echo '// A path of its own: tests/docs/missing.md' >>"$work/tree/include/accel/a.hpp"
expect pass "a longer path that ends like a docs page" ""
clean; echo 'int ses''sion = 0;  // the id' >>"$work/tree/include/accel/a.hpp"
expect pass "the word in code, not in a comment" ""
clean; echo "The worker runs in a ses""sion of its own (setsid)." >>"$work/tree/docs/guide.md"
expect pass "a Unix session" ""
exit $status
