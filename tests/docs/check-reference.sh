#!/usr/bin/env bash
# The reference check (ctest docs.reference): the reference pages under docs/reference/ name
# everything the code offers or reads, so that a new variable, flag, member, field or error site
# cannot go undocumented.
#   check-reference.sh [ROOT]        ROOT: the repository (default: this script's ../..)
# Fails, naming the item and the page, when one of these is missing from its page (named means:
# inside a `code span`, as a whole word; names() below says exactly):
#   environment.md  every environment variable the code under include/, src/, tools/ and
#                   examples/ reads or sets (the readers: getenv, env_string, env_int,
#                   required_env_int, env_seconds, is_set, setenv; a `*_variable = "NAME"`
#                   constant; a `for (const char* name : {...})` list; a worker's variables)
#   cli.md          every --flag a parser there compares (a "--flag" string literal, accel-plot's
#                   case patterns) and every subcommand (`subcommand == "env"`, ...)
#   accelerator.md  every public member of accel::Accelerator (a using-declaration of its private
#                   base AcceleratorCore's names that member) and of its public bases
#                   tracking::WithTrackers, detail::WithCollectives, state::WithCheckpoints,
#                   detail::WithMainProcessCalls, detail::WithReleaseMemory and
#                   detail::WithDeprecatedMembers (a public line at the class's own indentation);
#                   and the class itself declares at most 40 public member functions (each
#                   overload, constructor and using-declaration of a function counted), the rest of
#                   its surface coming from those bases
#   options.md      every field of accel::Options and of the option structs it holds, a nested
#                   one as `ddp.bucket_mb` (or `.bucket_mb` on a line that names `ddp.`)
#   errors.md       every file under include/ and tools/ with a run-time error site (fail(),
#                   fail_errno(), fail_with_errno(), a thrown ...Error(, an "accel: " printed to
#                   stderr), by its path under include/accel/ or the repository
# Each list must also come out non-empty, so that an extraction that stops matching the code
# fails instead of passing on nothing. Plain bash, grep, sed and POSIX awk (Debian's mawk).
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root" || { echo "check-reference: cannot enter $root" >&2; exit 2; }
ref=docs/reference
for page in environment cli accelerator options errors; do
  [ -f "$ref/$page.md" ] || { echo "check-reference: $root has no $ref/$page.md" >&2; exit 2; }
done

failures=0
fail() { echo "check-reference: $*"; failures=$((failures + 1)); }

# names PAGE: every name PAGE gives in its `code spans`, one per line. A span is cut into
# tokens at any character other than a letter, a digit or one of _ . / - (`ACCEL_NPROC=2`,
# `--nproc N`, `accelerator.prepare(model)`); a token names itself, each of its beginnings that
# a . or / ends (`ddp.bucket_mb` names `ddp`), and each of its parts after a . (`prepare`). A
# line with `ddp.bucket_mb` and `.first_bucket_mb` names `ddp.first_bucket_mb` too: a table row's
# shorthand for the fields of one struct.
names() {
  LC_ALL=C awk '
    function emit(token,   i, c, rest) {
      if (token == "") return
      print token
      for (i = 1; i < length(token); i++) {
        c = substr(token, i, 1)
        if (c == "." || c == "/") print substr(token, 1, i - 1)
        if (c == ".") { rest = substr(token, i + 1); if (rest != "") print rest }
      }
    }
    {
      line = $0; n = 0; delete prefix; shorts = ""
      while (match(line, /`[^`]+`/)) {
        span = substr(line, RSTART + 1, RLENGTH - 2)
        line = substr(line, RSTART + RLENGTH)
        if (span ~ /^[a-z0-9_]+\.[a-z0-9_]+$/) { n++; prefix[n] = span; sub(/\..*$/, "", prefix[n]) }
        if (span ~ /^\.[a-z0-9_]+$/) shorts = shorts " " span
        gsub(/[^A-Za-z0-9_.\/-]+/, " ", span)
        k = split(span, tokens, " ")
        for (t = 1; t <= k; t++) emit(tokens[t])
      }
      if (shorts != "") {
        k = split(shorts, parts, " ")
        for (p = 1; p <= n; p++) for (t = 1; t <= k; t++) print prefix[p] parts[t]
      }
    }' "$1" | LC_ALL=C sort -u
}

# require KIND PAGE: every word on stdin is among PAGE's names; at least one word. Its input
# comes through < <(...), not a pipe, so that its failures count here. The names of the page
# last asked about are kept.
declare -A given=()
given_page=
require() {
  local kind=$1 page=$2 count=0 word
  if [ "$page" != "$given_page" ]; then
    given=()
    while IFS= read -r word; do [ -z "$word" ] || given[$word]=1; done < <(names "$page")
    given_page=$page
  fi
  while IFS= read -r word; do
    [ -n "$word" ] || continue
    count=$((count + 1))
    [ -n "${given[$word]+set}" ] || fail "$page does not name the $kind \`$word\`"
  done < <(LC_ALL=C sort -u)
  [ "$count" -gt 0 ] || fail "found no $kind in the code: the extraction for $page no longer matches it"
}

# -H: a starting folder may be a link (docs.reference_detects links the repository's).
mapfile -t sources < <(find -H include src tools examples -type f \
                         \( -name '*.hpp' -o -name '*.ipp' -o -name '*.cpp' -o -name '*.h' \) |
                       LC_ALL=C sort)

# --- Environment variables ----------------------------------------------------------------------
require "environment variable" "$ref/environment.md" < <(
  grep -hoE '(getenv|env_string|env_int|required_env_int|env_seconds|is_set|setenv|[^a-z_]get)\("[A-Z][A-Za-z0-9_]*"' \
    "${sources[@]}" | sed -E 's/.*\("//; s/"$//'
  grep -hoE '_variable = "[A-Z][A-Z0-9_]*"' "${sources[@]}" | sed -E 's/.*= "//; s/"$//'
  grep -hE 'for \(const char\* [a-z_]+ : \{' "${sources[@]}" | grep -oE '"[A-Z][A-Z0-9_]*"' | tr -d '"'
  grep -hoE '\{"[A-Z][A-Z0-9_]*", (std::to_string|rendezvous)' "${sources[@]}" | sed -E 's/^\{"//; s/".*//'
  grep -hoE 'emplace_back\("[A-Z][A-Z0-9_]*"' "${sources[@]}" | sed -E 's/.*\("//; s/"$//'
)

# --- Command-line flags and subcommands ---------------------------------------------------------
require "flag" "$ref/cli.md" < <(
  grep -hoE '"--[a-z][a-z0-9-]*' "${sources[@]}" | sed 's/^"//'
  grep -hE '^[[:space:]]+-[-a-z0-9|=*]*\)' tools/accel-plot | grep -oE -- '--[a-z][a-z0-9-]*'
)
require "subcommand" "$ref/cli.md" < <(
  grep -hoE '(subcommand|command|mode|argv\[1\]\)) *[!=]= *"[a-z][a-z-]*"' "${sources[@]}" |
    sed -E 's/.*"([a-z-]+)"$/\1/')

# --- The Accelerator's public members -----------------------------------------------------------
# public_members FILE CLASS [functions]: the names declared at two spaces' indentation in CLASS's
# public parts (functions, nested types, aliases, constants); deleted members, templates' heads
# and attributes on lines of their own ([[deprecated("...")]]) aside. With `functions`: the
# functions only, one line per declaration (each overload; `using Base::name;` counts as one).
public_members() {
  LC_ALL=C awk -v class="$2" -v functions_only="${3:-}" '
    $0 ~ "^(class|struct) " class "([ :<{]|$)" { inside = 1; public = ($1 == "struct"); next }
    inside && /^};/ { inside = 0; next }
    !inside { next }
    /^ public:/ { public = 1; next }
    /^ (private|protected):/ { public = 0; next }
    !public || !/^  [^ \/#}]/ || /= delete;/ || /^  template/ || /^  (friend|static_assert)/ { next }
    /^  \[\[[a-z_]+\(/ { next }
    {
      line = $0
      sub(/^  /, "", line)
      gsub(/\[\[[a-z_]+\]\] /, "", line)
      function_line = 0
      if (match(line, /^using [A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*;/)) {
        name = substr(line, 1, RLENGTH - 1); sub(/^.*::/, "", name); function_line = 1
      } else if (match(line, /^using [A-Za-z_][A-Za-z0-9_]*/)) {
        name = substr(line, 7, RLENGTH - 6)
      } else if (match(line, /^(class|struct) [A-Za-z_][A-Za-z0-9_]*/)) {
        name = substr(line, RSTART, RLENGTH); sub(/^(class|struct) /, "", name)
      } else if (index(line, "(")) {
        line = substr(line, 1, index(line, "(") - 1)
        if (!match(line, /[A-Za-z_][A-Za-z0-9_]*$/)) next
        name = substr(line, RSTART, RLENGTH); function_line = 1
      } else if (match(line, /[A-Za-z_][A-Za-z0-9_]*( = [^;]*)?;/)) {
        line = substr(line, RSTART); sub(/( = [^;]*)?;.*$/, "", line)
        name = line
      } else next
      if (functions_only != "" && !function_line) next
      if (name !~ /^operator/) print name
    }' "$1"
}
require "public member of the Accelerator" "$ref/accelerator.md" < <(
  public_members include/accel/accelerator_class.hpp Accelerator
  public_members include/accel/tracking/accelerator_tracking.hpp WithTrackers
  public_members include/accel/core/collective_calls.hpp WithCollectives
  public_members include/accel/state/accelerator_checkpoints.hpp WithCheckpoints
  public_members include/accel/core/main_process_calls.hpp WithMainProcessCalls
  public_members include/accel/memory/release_memory.hpp WithReleaseMemory
  public_members include/accel/core/deprecated_members.hpp WithDeprecatedMembers
)
# The class's own public functions: a narrow class, whose other members come from its bases.
own=$(public_members include/accel/accelerator_class.hpp Accelerator functions | wc -l)
[ "$own" -gt 0 ] || fail "found no public member function of accel::Accelerator in include/accel/accelerator_class.hpp"
[ "$own" -le 40 ] ||
  fail "accel::Accelerator declares $own public member functions (include/accel/accelerator_class.hpp); at most 40: move a group of them into a base of its own, as the trackers and the collectives are (docs/dev/architecture.md)"

# --- Options' fields ----------------------------------------------------------------------------
# fields FILE STRUCT [PREFIX]: the data members of STRUCT, one per line (functions aside), each
# after PREFIX.
fields() {
  LC_ALL=C awk -v struct="$2" -v prefix="${3:-}" '
    $0 ~ "^struct " struct " \\{" { inside = 1; next }
    inside && /^};/ { inside = 0 }
    !inside || !/^  [^ \/]/ { next }
    {
      line = $0
      sub(/\/\/.*$/, "", line)
      if (match(line, /\(\*[a-z_]+\)/)) { print prefix substr(line, RSTART + 2, RLENGTH - 3); next }
      if (match(line, /[a-z_][a-z0-9_]* = /)) {
        if (index(substr(line, 1, RSTART), "(")) next
        print prefix substr(line, RSTART, RLENGTH - 3); next
      }
      if (index(line, "(")) next
      if (match(line, /[a-z_][a-z0-9_]*;/)) print prefix substr(line, RSTART, RLENGTH - 1)
    }' "$1"
}
# The option structs Options holds, as "TYPE MEMBER": `DdpOptions ddp = {};`.
held_structs() {
  LC_ALL=C awk '/^struct Options \{/ { inside = 1; next } inside && /^};/ { inside = 0 }
                inside && match($0, /^  [A-Za-z0-9_:]+Options [a-z0-9_]+ = /) {
                  split(substr($0, 3), w, " "); print w[1], w[2] }' include/accel/options.hpp
}
[ -n "$(held_structs)" ] || fail "found no option struct held by accel::Options in include/accel/options.hpp"
require "field of accel::Options" "$ref/options.md" < <(
  fields include/accel/options.hpp Options
  # Each nested struct's fields through the member that holds it: `ddp.bucket_mb`.
  while read -r type member; do
    base=${type##*::}
    case "$base" in
      LoggerOptions) fields include/accel/logging/level.hpp "$base" "$member." ;;
      TimelineOptions) fields include/accel/profiling/options.hpp "$base" "$member." ;;
      *) fields include/accel/options.hpp "$base" "$member." ;;
    esac
  done < <(held_structs)
)

# --- Error sites --------------------------------------------------------------------------------
require "file with accel: error sites" "$ref/errors.md" < <(
  find -H include tools -type f \( -name '*.hpp' -o -name '*.ipp' -o -name '*.cpp' \) -print0 |
    LC_ALL=C sort -z |
    xargs -0 -r grep -lE '(^|[^A-Za-z_])(fail|fail_errno|fail_with_errno|fail_trainability)\(|throw [A-Za-z_:]*Error\(|(fprintf\(stderr|fputs\()[^"]*"accel: ' |
    sed 's#^include/accel/##')

if [ "$failures" -gt 0 ]; then
  echo "check-reference: $failures item(s) missing from docs/reference/"
  exit 1
fi
echo "check-reference: environment variables, flags, subcommands, Accelerator members, Options fields and error sites: all named"
