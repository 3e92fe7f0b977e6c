# One compile-fail case, run by ctest after compile_fail.build has compiled every case:
# judges LOG.log (the compiler's output) and LOG.status (its exit status).
#   With EXPECT (a list of regexes): passes only when the compile failed, its output matches each
#   regex, and every error in it is one of accel's static assertions; any other error is a
#   cascade: a rule let the broken code through to where it breaks something else.
#   Without EXPECT (the case's twin): passes only when it compiled.
if(NOT EXISTS "${LOG}.status")
  message(FATAL_ERROR "${TARGET} was not compiled: ${LOG}.status is missing (compile_fail.build "
                      "compiles the cases; run it first, or run ctest with -R compile_fail)")
endif()
file(READ "${LOG}.status" status)
string(STRIP "${status}" status)
file(READ "${LOG}.log" output)

if(NOT DEFINED EXPECT)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${TARGET}, the twin with the offending line fixed, does not compile:\n${output}")
  endif()
  return()
endif()

if(status EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled; it must fail with a message matching: ${EXPECT}")
endif()
foreach(regex IN LISTS EXPECT)
  if(NOT output MATCHES "${regex}")
    message(FATAL_ERROR "${TARGET} failed, but without a message matching: ${regex}\n${output}")
  endif()
endforeach()
# Line by line (a `;` in a message would split a CMake list: replaced first).
string(REPLACE ";" "," lines "${output}")
string(REPLACE "\n" ";" lines "${lines}")
set(others "")
foreach(line IN LISTS lines)
  if(line MATCHES "error:" AND NOT line MATCHES "error: static assertion failed: accel: ")
    string(APPEND others "${line}\n")
  endif()
endforeach()
if(others)
  message(FATAL_ERROR "${TARGET} failed with the expected message, but also with errors that are "
                      "not accel's:\n${others}\nFull output:\n${output}")
endif()
message(STATUS "${TARGET} failed as expected")
