# static.file_lengths: the files under include/accel stay small, one idea each. Run by ctest with
# SOURCE_DIR. A file of more than 400 lines gives its reason in the comment it opens with: a
# line of that comment starts with "// Longer than accel's" (files / headers should be: why
# this one is not split). Whether the reason holds is the reviewer's to judge; this check makes
# sure that every long file has one to judge.
set(root "${SOURCE_DIR}/include/accel")
file(GLOB_RECURSE files RELATIVE "${root}" "${root}/*.hpp" "${root}/*.ipp")
if(NOT files)
  message(FATAL_ERROR "static.file_lengths: no header found under ${root}")
endif()
set(limit 400)
set(problems "")
foreach(file IN LISTS files)
  file(READ "${root}/${file}" text)
  string(REGEX MATCHALL "\n" newlines "${text}")
  list(LENGTH newlines count)
  if(count GREATER limit)
    # The opening comment: the `//` lines before the first line that is not one.
    string(REGEX MATCH "^(//[^\n]*\n)*" opening "${text}")
    if(NOT opening MATCHES "(^|\n)// Longer than accel's")
      string(APPEND problems "  include/accel/${file}: ${count} lines, and its opening comment "
                             "gives no reason (a line \"// Longer than accel's ...\"); split it "
                             "into headers of one idea each, or say why it is one\n")
    endif()
  endif()
endforeach()
if(problems)
  message(FATAL_ERROR "static.file_lengths: files over ${limit} lines without a reason:\n"
                      "${problems}")
endif()
list(LENGTH files count)
message(STATUS "static.file_lengths: ${count} files, each of at most ${limit} lines or saying why")
