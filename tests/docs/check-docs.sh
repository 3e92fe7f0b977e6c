#!/usr/bin/env bash
# The documentation check (ctest docs.check): the docs describe the software as it is, and their
# links lead somewhere.
#   check-docs.sh [ROOT]        ROOT: the repository (default: this script's ../..)
# Fails, naming the file and line, when
#   - a relative link in README.md or docs/**/*.md points to a file or folder that does not exist;
#   - a link's #anchor matches no heading of its target (GitHub's slugs: lower case, spaces to
#     '-', punctuation other than '-' and '_' dropped, "-1", "-2" for repeated headings) and no
#     explicit <a id="..."> / <a name="..."> there;
#   - a `docs/<path>.md` or `docs/<path>.md#anchor` named in the code (include/, src/, tools/,
#     examples/, bench/, scripts/, cmake/, tests/ but tests/docs/, CMakeLists.txt: comments,
#     error messages, help texts) names no page, or no heading or id of it;
#   - a word of the development process (a numbered stop or issue, "session", "this week",
#     "latest run", "helper agent") appears in README.md, docs/, or a comment under include/:
#     the docs and comments state what the software does, and its history lives in git.
# Plain bash, grep and POSIX awk (Debian's mawk): nothing to install.
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root" || { echo "check-docs: cannot enter $root" >&2; exit 2; }
[ -f README.md ] && [ -d docs ] || { echo "check-docs: $root has no README.md and docs/" >&2; exit 2; }

failures=0
fail() { echo "check-docs: $*"; failures=$((failures + 1)); }

mapfile -t pages < <({ echo README.md; find docs -type f -name '*.md'; } | LC_ALL=C sort)

# The anchors a Markdown file offers, one per line: its headings' slugs and its explicit ids.
# Fenced code blocks hold no headings.
anchors() {
  LC_ALL=C awk '
    /^[[:space:]]*(```|~~~)/ { fenced = !fenced; next }
    {
      line = $0
      while (match(line, /<a (id|name)="[^"]*"/)) {
        id = substr(line, RSTART, RLENGTH); sub(/^<a (id|name)="/, "", id); sub(/"$/, "", id)
        print id
        line = substr(line, RSTART + RLENGTH)
      }
    }
    fenced { next }
    /^#+[[:space:]]/ {
      text = $0
      sub(/^#+[[:space:]]+/, "", text); sub(/[[:space:]]+#+[[:space:]]*$/, "", text)
      # A link in a heading reads as its text.
      while (match(text, /\[[^]]*\]\([^)]*\)/)) {
        inner = substr(text, RSTART + 1, RLENGTH - 1); sub(/\]\(.*$/, "", inner)
        text = substr(text, 1, RSTART - 1) inner substr(text, RSTART + RLENGTH)
      }
      gsub(/<[^>]*>/, "", text)
      slug = tolower(text)
      gsub(/[^a-z0-9 _-]/, "", slug)
      gsub(/ /, "-", slug)
      if (slug in seen) { seen[slug]++; print slug "-" seen[slug] } else { seen[slug] = 0; print slug }
    }' "$1"
}

# Every link of a page as "LINE<TAB>TARGET": inline links and images outside fenced code and
# outside `code spans`.
links() {
  LC_ALL=C awk '
    /^[[:space:]]*(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^) ]+( "[^"]*")?\)/)) {
        target = substr(line, RSTART + 2, RLENGTH - 3)
        sub(/ ".*$/, "", target)
        print NR "\t" target
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

declare -A anchor_cache
for page in "${pages[@]}"; do
  dir=$(dirname "$page")
  while IFS=$'\t' read -r line target; do
    case "$target" in
      http://* | https://* | mailto:*) continue ;;
    esac
    path=${target%%#*}
    anchor=
    [[ "$target" == *"#"* ]] && anchor=${target#*#}
    if [ -z "$path" ]; then
      file=$page
    else
      file="$dir/$path"
      if [ ! -e "$file" ]; then
        fail "$page:$line: link to '$target': $file does not exist"
        continue
      fi
    fi
    if [ -n "$anchor" ]; then
      if [ -d "$file" ] || [[ "$file" != *.md ]]; then
        fail "$page:$line: link to '$target': an anchor needs a Markdown file, $file is not one"
      else
        [ -n "${anchor_cache[$file]+set}" ] || anchor_cache[$file]=$'\n'"$(anchors "$file")"$'\n'
        [[ "${anchor_cache[$file]}" == *$'\n'"$anchor"$'\n'* ]] ||
          fail "$page:$line: link to '$target': no heading or <a id> in $file gives #$anchor"
      fi
    fi
  done < <(links "$page")
done

# The docs' pages and anchors the code names: an error message that sends the user to a page
# that moved, or a comment that points a reader nowhere. A path is taken whole: not when it
# continues a longer one (tests/docs/...).
mapfile -t code_files < <(for top in include src tools examples bench scripts cmake tests CMakeLists.txt; do
                            [ -e "$top" ] && find "$top" -type f ! -path 'tests/docs/*'
                          done | LC_ALL=C sort)
if [ "${#code_files[@]}" -gt 0 ]; then
  while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    where="$file:${rest%%:*}"
    target=${rest#*:}
    target=${target#[!d]}  # the character before docs/, when there is one
    path=${target%%#*}
    anchor=
    [[ "$target" == *"#"* ]] && anchor=${target#*#}
    if [ ! -f "$path" ]; then
      fail "$where: names '$target': $path does not exist"
    elif [ -n "$anchor" ]; then
      [ -n "${anchor_cache[$path]+set}" ] || anchor_cache[$path]=$'\n'"$(anchors "$path")"$'\n'
      [[ "${anchor_cache[$path]}" == *$'\n'"$anchor"$'\n'* ]] ||
        fail "$where: names '$target': no heading or <a id> in $path gives #$anchor"
    fi
  done < <(LC_ALL=C grep -noE '(^|[^A-Za-z0-9_./-])docs/[A-Za-z0-9_./-]+\.md(#[A-Za-z0-9_-]+)?' \
             "${code_files[@]}" /dev/null)
fi

# Words of the development process. "session" as in a Unix session (setsid) is not one.
words='(^|[^[:alnum:]_])(stops? [0-9]+|at stop|this stop|sessions?|issues? #?[0-9]+|helper agents?|this week|latest run)([^[:alnum:]_]|$)'
while IFS= read -r hit; do
  fail "${hit%%:*}:$(cut -d: -f2 <<<"$hit"): a word of the development process: $(cut -d: -f3- <<<"$hit" | sed 's/^[[:space:]]*//' | cut -c1-120)"
done < <(grep -n -i -E "$words" "${pages[@]}" | grep -v -i -E 'setsid|session leader|of its own session|in a session of its own')

# Comments under include/: what follows // on a line, and the lines of /* */ blocks.
while IFS= read -r hit; do
  fail "${hit%%:*}: a word of the development process in a comment: $(cut -d: -f3- <<<"$hit" | sed 's/^[[:space:]]*//' | cut -c1-120)"
done < <(find include -type f \( -name '*.hpp' -o -name '*.ipp' -o -name '*.h' -o -name '*.cpp' \) -print0 |
           LC_ALL=C sort -z | xargs -0 -r awk '
             FNR == 1 { block = 0 }
             {
               text = ""
               if (block) text = $0
               else if (index($0, "//")) text = substr($0, index($0, "//"))
               else if (index($0, "/*")) text = substr($0, index($0, "/*"))
               if (index($0, "/*") && !index($0, "*/")) block = 1
               if (block && index($0, "*/")) block = 0
               if (text != "") print FILENAME ":" FNR ":" text
             }' |
           grep -i -E "$words" | grep -v -i -E 'setsid|session leader|in a session of its own')

if [ "$failures" -gt 0 ]; then
  echo "check-docs: $failures problem(s) in README.md, docs/, the docs the code names and include/'s comments"
  exit 1
fi
echo "check-docs: ${#pages[@]} pages, their links and anchors, the docs the code names, and include/'s comments: ok"
