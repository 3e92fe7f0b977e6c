#!/usr/bin/env bash
# The mutation check (docs/dev/mutation-check.md): applies each mutation of mutations.txt to the
# source tree this script is in, one at a time, rebuilds only the programs its tests run, runs
# those tests, and records whether they failed (killed), passed (survived) or the mutated code
# did not compile. The mutated file is always put back, checked against its original hash, on
# every way out (the end, an error, Ctrl-C, SIGTERM).
#
#   run.sh [--build DIR] [--only ID[,ID...]] [--results FILE] [--timeout SECONDS]
#          [--no-baseline] [--list-file FILE]
#   run.sh --list      the mutations, one a line: id, kind, file, tests
#   run.sh --check     only checks the list: every original text occurs exactly once in its
#                      file, ids are unique, every field is there (no build; ctest: mutation.list)
#
# DIR (default: build-mutation in the source root) is configured on first use with the project's
# test settings (Release, ACCEL_USE_COMPILED, ACCEL_QUICK_PROGRAMS: accel::compiled at -O1). The
# builds run under `nice -n 19` with -j1, so that other compiles on the machine go first. Before
# the first mutation the selected tests run once unmutated (the baseline): a test that fails
# there would make every mutation look killed, so the run stops.
set -uo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$script_dir/../.." && pwd)
list_file=$script_dir/mutations.txt
build=""
only=""
results=""
timeout_s=900
baseline=1
mode=run

die() { echo "mutation: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --only) only=${2:?--only needs ids, comma-separated}; shift 2 ;;
    --results) results=${2:?--results needs a file}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
    --no-baseline) baseline=0; shift ;;
    --list-file) list_file=${2:?--list-file needs a file}; shift 2 ;;
    --list) mode=list; shift ;;
    --check) mode=check; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; see --help" ;;
  esac
done
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || die "--timeout is '$timeout_s'; it must be a whole number of seconds, 1 or more"
[ -f "$list_file" ] || die "no list file '$list_file'"

# --- The list ------------------------------------------------------------------------------------
ids=() kinds=() files=() tests=() originals=() replacements=()
fields=(id kind file tests original replacement)
parse_list() {
  local line number=0 key value block_start=0
  declare -A entry=()
  flush() {
    [ ${#entry[@]} -eq 0 ] && return 0
    local f
    for f in "${fields[@]}"; do
      [ -n "${entry[$f]:-}" ] || die "$list_file:$block_start: the block has no '$f:' line"
    done
    ids+=("${entry[id]}") kinds+=("${entry[kind]}") files+=("${entry[file]}")
    tests+=("${entry[tests]}") originals+=("${entry[original]}")
    replacements+=("${entry[replacement]}")
    entry=()
  }
  while IFS= read -r line || [ -n "$line" ]; do
    number=$((number + 1))
    case $line in
      '#'*) continue ;;
      '') flush; continue ;;
    esac
    key=${line%%:*}
    value=${line#*: }
    if [ "$key" = "$line" ] || [ "$value" = "$line" ]; then
      die "$list_file:$number: '$line' is not 'field: value'"
    fi
    case " ${fields[*]} " in
      *" $key "*) ;;
      *) die "$list_file:$number: unknown field '$key' (fields: ${fields[*]})" ;;
    esac
    [ ${#entry[@]} -eq 0 ] && block_start=$number
    [ -z "${entry[$key]:-}" ] || die "$list_file:$number: '$key' given twice in one block"
    entry[$key]=$value
  done <"$list_file"
  flush
}
parse_list
[ ${#ids[@]} -gt 0 ] || die "$list_file holds no mutation"

# The whole file as one string (trailing newlines kept).
read_whole() { local text; text=$(cat -- "$1"; printf x); printf '%s' "${text%x}"; }

# How many times $2 occurs in the text $1.
occurrences() {
  local text=$1 needle=$2 without
  without=${text//"$needle"/}
  echo $(((${#text} - ${#without}) / ${#needle}))
}

check_list() {
  local problems=0 i j count text
  for ((i = 0; i < ${#ids[@]}; ++i)); do
    for ((j = 0; j < i; ++j)); do
      if [ "${ids[i]}" = "${ids[j]}" ]; then
        echo "mutation list: id '${ids[i]}' is used twice; ids must be unique" >&2
        problems=$((problems + 1))
      fi
    done
    case ${kinds[i]} in
      operator | scaling | collective | bound | order | condition) ;;
      *) echo "mutation list: ${ids[i]}: kind '${kinds[i]}' is not one of operator, scaling," \
              "collective, bound, order, condition" >&2
         problems=$((problems + 1)) ;;
    esac
    if [ ! -f "$root/${files[i]}" ]; then
      echo "mutation list: ${ids[i]}: no file ${files[i]} under $root" >&2
      problems=$((problems + 1))
      continue
    fi
    if [ "${originals[i]}" = "${replacements[i]}" ]; then
      echo "mutation list: ${ids[i]}: the replacement is the original text" >&2
      problems=$((problems + 1))
    fi
    text=$(read_whole "$root/${files[i]}")
    count=$(occurrences "$text" "${originals[i]}")
    if [ "$count" -ne 1 ]; then
      echo "mutation list: ${ids[i]}: its original text occurs $count times in ${files[i]}," \
           "not once: '${originals[i]}'; update the entry to the code as it is now" >&2
      problems=$((problems + 1))
    fi
  done
  if [ $problems -gt 0 ]; then
    echo "mutation list: $problems problem(s) in $list_file" >&2
    return 1
  fi
  echo "mutation list: ${#ids[@]} mutations, each original text found once"
}

case $mode in
  list)
    for ((i = 0; i < ${#ids[@]}; ++i)); do
      printf '%s\t%s\t%s\t%s\n' "${ids[i]}" "${kinds[i]}" "${files[i]}" "${tests[i]}"
    done
    exit 0 ;;
  check) check_list; exit $? ;;
esac

# --- The run -------------------------------------------------------------------------------------
check_list >/dev/null || exit 2
selected=()
if [ -n "$only" ]; then
  IFS=, read -r -a wanted <<<"$only"
  for want in "${wanted[@]}"; do
    found=""
    for ((i = 0; i < ${#ids[@]}; ++i)); do [ "${ids[i]}" = "$want" ] && found=$i; done
    [ -n "$found" ] || die "--only: no mutation '$want' in $list_file (run.sh --list)"
    selected+=("$found")
  done
else
  for ((i = 0; i < ${#ids[@]}; ++i)); do selected+=("$i"); done
fi

# Never mutate a file with changes of its own: putting it back would keep them, but a run on
# uncommitted edits measures code that may never be committed.
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  for i in "${selected[@]}"; do
    if [ -n "$(git -C "$root" status --porcelain -- "${files[i]}")" ]; then
      die "${files[i]} has uncommitted changes; commit or stash them first (the run mutates it)"
    fi
  done
fi

build=${build:-$root/build-mutation}
mkdir -p "$build" || die "cannot create the build folder $build"
build=$(cd "$build" && pwd)
results=${results:-$build/mutation-results.tsv}
logs=$build/mutation-logs
mkdir -p "$logs"

if [ ! -f "$build/build.ninja" ]; then
  echo "mutation: configuring $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACCEL_USE_COMPILED=ON \
        -DACCEL_QUICK_PROGRAMS=ON >"$logs/configure.log" 2>&1 ||
    die "configuring $build failed: $logs/configure.log"
fi

# The file being mutated, its saved copy and hash: put back on every way out.
current="" backup=$build/mutation-original saved_hash=""
restore() {
  [ -n "$current" ] || return 0
  cp -p -- "$backup" "$root/$current"
  touch -- "$root/$current"  # newer than the mutated build: the next build compiles it again
  local now
  now=$(sha256sum <"$root/$current" | cut -d' ' -f1)
  if [ "$now" != "$saved_hash" ]; then
    echo "mutation: $current could NOT be restored (hash $now, expected $saved_hash);" \
         "its original is in $backup" >&2
    exit 3
  fi
  current=""
}
# Builds and tests run in the background and are waited for, so that a signal is handled at
# once: the running command is stopped, then the file restored (the EXIT trap).
child=""
in_background() {
  "$@" &
  child=$!
  wait "$child"
  local status=$?
  child=""
  return $status
}
interrupted() {
  echo "mutation: interrupted; restoring" >&2
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  exit 130
}
trap 'restore' EXIT
trap 'interrupted' INT TERM HUP

# The build-folder programs a set of tests runs, as ninja targets: the paths under the build
# folder in their add_test() lines that the build makes (built yet or not; ctest's own listing
# drops a command whose program does not exist yet). A doctest binary's tests exist only once
# it is built: `<prefix>NOT_BUILT`, whose command is `<binary>_NOT_BUILT`, stands for them before.
add_test_lines() {  # the add_test() lines of the tests matching regex $1, in one pass
  local names
  names=$(ctest --test-dir "$build" -N -R "$1" 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: \(.*\)$/[\1]/p')
  [ -n "$names" ] || return 0
  find "$build" \( -name CTestTestfile.cmake -o -name '*_cases.cmake' -o -name '*_include.cmake' \) \
       -type f -print0 |
    xargs -0 grep -hF -f <(printf '%s\n' "$names") 2>/dev/null | grep -E '^ *add_test\('
}
targets_of() {
  add_test_lines "$1" | grep -o "$build/[^]\"[:space:]]*" | sort -u | while read -r path; do
    ninja -C "$build" -t query "${path#"$build"/}" >/dev/null 2>&1 && echo "${path#"$build"/}"
  done
  return 0
}
bootstrap_doctest_binaries() {
  local regex=$1 placeholder prefix binary
  while read -r placeholder; do
    prefix=${placeholder%NOT_BUILT}
    [[ $regex == *"${prefix//./\\.}"* ]] || continue
    binary=$(add_test_lines "^${prefix//./\\.}NOT_BUILT\$" | grep -o '[A-Za-z0-9_]*_NOT_BUILT' |
             head -1)
    binary=${binary%_NOT_BUILT}
    [ -n "$binary" ] || continue
    echo "mutation: building $binary (its tests are listed once it is built)" >&2
    nice -n 19 ninja -C "$build" -j1 "$binary" >>"$logs/bootstrap.log" 2>&1 ||
      die "building $binary failed: $logs/bootstrap.log"
  done < <(ctest --test-dir "$build" -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: \(.*NOT_BUILT\)$/\1/p')
}
targets_for() {  # the ninja targets of mutation $1's tests; fails when no test matches
  local regex=${tests[$1]} found
  # Before listing, even when other tests match: a doctest binary not built yet lists none of
  # its tests, and the mutation would run without them.
  bootstrap_doctest_binaries "$regex"
  found=$(targets_of "$regex")
  [ -n "$found" ] || return 1
  echo "$found"
}

build_targets() {  # build_targets LOG TARGET...
  local log=$1; shift
  in_background nice -n 19 ninja -C "$build" -j1 "$@" >"$log" 2>&1
}
run_tests() {  # run_tests LOG CTEST-SELECTION...: ctest's status; 124 past the time limit
  local log=$1; shift
  in_background nice -n 19 timeout -k 30 "$timeout_s" \
    ctest --test-dir "$build" "$@" --no-tests=error --output-on-failure >"$log" 2>&1
}
test_numbers() {  # ctest's numbers of the tests matching regex $1
  ctest --test-dir "$build" -N -R "$1" 2>/dev/null | sed -n 's/^ *Test *#\([0-9]*\):.*/\1/p'
}

# The baseline: the selected mutations' tests, built and run on the unmutated code.
if [ $baseline -eq 1 ]; then
  # One ctest run of them all, by number (-I): CMake's regexes take at most 9 groups.
  # The numbers are read after the build: building a doctest program (to find the targets, or
  # rebuilt here from changed sources) adds its tests to the list and renumbers those after them.
  numbers=() all_targets=()
  for i in "${selected[@]}"; do
    found=$(targets_for "$i") || die "${ids[i]}: no test matches '${tests[i]}' (ctest -N -R)"
    while read -r t; do all_targets+=("$t"); done <<<"$found"
  done
  mapfile -t all_targets < <(printf '%s\n' "${all_targets[@]}" | sort -u)
  echo "mutation: baseline: building ${#all_targets[@]} program(s)"
  build_targets "$logs/baseline.build.log" "${all_targets[@]}" ||
    die "the unmutated build failed: $logs/baseline.build.log"
  for i in "${selected[@]}"; do
    while read -r n; do numbers+=("$n"); done < <(test_numbers "${tests[i]}")
  done
  start=$SECONDS
  echo "mutation: baseline: running the tests unmutated"
  union=$(printf '%s\n' "${numbers[@]}" | sort -un | paste -sd,)
  if ! run_tests "$logs/baseline.test.log" -I "0,0,0,$union"; then
    grep -E '^\s+[0-9]+ - ' "$logs/baseline.test.log" >&2
    die "tests fail without any mutation ($logs/baseline.test.log); fix them first"
  fi
  echo "mutation: baseline passed in $((SECONDS - start)) s"
fi

printf 'id\tkind\tfile\tresult\tseconds\tfailed tests\n' >"$results"
killed=0 survived=0 broken=0
for i in "${selected[@]}"; do
  id=${ids[i]} file=${files[i]}
  start=$SECONDS
  found=$(targets_for "$i") || die "$id: no test matches '${tests[i]}' (ctest -N -R)"
  mapfile -t targets <<<"$found"

  cp -p -- "$root/$file" "$backup"
  saved_hash=$(sha256sum <"$backup" | cut -d' ' -f1)
  current=$file
  text=$(read_whole "$root/$file")
  printf '%s' "${text/"${originals[i]}"/"${replacements[i]}"}" >"$root/$file"

  failed=""
  if ! build_targets "$logs/$id.build.log" "${targets[@]}"; then
    result=not-compiled
    broken=$((broken + 1))
  else
    run_tests "$logs/$id.test.log" -R "${tests[i]}"
    status=$?
    if [ $status -eq 0 ]; then
      result=survived
      survived=$((survived + 1))
    else
      result=killed
      [ $status -eq 124 ] && result=killed-by-timeout
      killed=$((killed + 1))
      failed=$(sed -En 's/^[[:space:]]*[0-9]+ - (.*) \([^()]*\)$/\1/p' "$logs/$id.test.log" |
               paste -sd';')
    fi
  fi
  restore
  seconds=$((SECONDS - start))
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "${kinds[i]}" "$file" "$result" "$seconds" "$failed" \
    >>"$results"
  echo "mutation: $id: $result (${seconds} s)${failed:+; failed: $failed}"
done

total=$((killed + survived))
note=""
[ $broken -gt 0 ] && note=" ($broken did not compile, not counted)"
echo "mutation score: $killed/$total killed$note"
echo "mutation: results in $results, logs in $logs"
