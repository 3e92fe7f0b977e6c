# One compile-fail case, run by ctest: builds TARGET in BUILD_DIR.
#   With EXPECT (a list of regexes): passes only when the build fails, its output matches each
#   regex, and every error in it is one of accel's static assertions; any other error is a
#   cascade: a rule let the broken code through to where it breaks something else.
#   Without EXPECT (the case's twin): passes only when the build succeeds.
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
  RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)

if(NOT DEFINED EXPECT)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${TARGET}, the twin with the offending line fixed, does not build:\n${output}")
  endif()
  return()
endif()

if(status EQUAL 0)
  message(FATAL_ERROR "${TARGET} built; it must fail with a message matching: ${EXPECT}")
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
