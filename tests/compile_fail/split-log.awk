# Splits the compiler output of the combined compile-fail cases (one TU that includes every case
# that can share one, tests/CMakeLists.txt) into one log and status per case, as if
# each case had been compiled alone, for run-case.cmake to judge:
#   awk -v cases="a b c" -v logs=DIR -v prefix=accel_compile_fail_ -f split-log.awk COMBINED.log
# GCC prints the context of an error before it ("In instantiation of", "required from here",
# "In function") when the context changes, and not again for the next error in the same one. So
# an error belongs to the case its own line names, else to the last case named in the context
# since the previous error, else, when no new context began, to the previous error's case. Its
# notes and source excerpts follow it. An error that none of these gives a case goes to every
# case with a line saying so, which fails each of them (it is not one of accel's assertions)
# rather than letting one pass by mistake. A case's status is 1 when at least one error belongs
# to it, else 0 (it compiled: its test says so).
# GCC reports a failed instantiation once: two cases that fail in the same specialization leave
# the second without its error, and its test fails ("compiled; it must fail"): write such a case
# so that it fails in a specialization of its own (a type of its own, say).
BEGIN {
  count = split(cases, names, " ")
  for (i = 1; i <= count; ++i) { text[names[i]] = ""; failed[names[i]] = 0 }
  context = ""; named = ""; owner = ""; new_context = 0
}

# The case a line names, or "" (a case's file is tests/compile_fail/<case>.cpp).
function case_named(line,    i) {
  for (i = 1; i <= count; ++i)
    if (index(line, "/compile_fail/" names[i] ".cpp:") > 0) return names[i]
  return ""
}

function give(to, lines,    i) {
  if (to != "") { text[to] = text[to] lines; return }
  for (i = 1; i <= count; ++i) text[names[i]] = text[names[i]] lines
}

{
  line = $0 "\n"
  if ($0 ~ /: (fatal )?error: /) {
    found = case_named($0)
    if (found != "") owner = found
    else if (named != "") owner = named
    else if (new_context) owner = ""
    if (owner == "") {
      give("", "error: split-log.awk: the next error names none of the combined cases, so it " \
               "counts against each of them\n" context line)
      for (i = 1; i <= count; ++i) failed[names[i]] = 1
    } else {
      give(owner, context line)
      failed[owner] = 1
    }
    context = ""; named = ""; new_context = 0
  } else if (context == "" && ($0 ~ /: note: / || $0 ~ /^ /)) {
    # A note or a source excerpt after an error: part of that error.
    give(owner, line)
  } else {
    # A line of context for the next error ("In file included from" and its "from" lines, "In
    # instantiation of", "required from ..." and their excerpts), or a warning of its own. What
    # came before the first line that begins a new context ("required by the constraints of"
    # and its notes) still explains the previous error.
    if (!new_context && ($0 ~ /^In file included from / || $0 ~ /^[^ ]+: (In |At global scope)/)) {
      give(owner, context)
      context = ""; named = ""; new_context = 1
    }
    context = context line
    found = case_named($0)
    if (found != "") named = found
  }
}

END {
  give("", context)
  for (i = 1; i <= count; ++i) {
    printf "%s", text[names[i]] > (logs "/" prefix names[i] ".log")
    print failed[names[i]] > (logs "/" prefix names[i] ".status")
  }
}
