# A test that must exit 0 AND print something: runs a command and passes only when it exits 0 and
# its output (stdout and stderr together) matches EXPECT, and, where REJECT is given, does not
# match REJECT. CTest's own output regex property would judge by the output alone, so a rank that
# failed after rank 0 printed its line would pass; this judges both.
#   cmake -DEXPECT=<regex> [-DREJECT=<regex>] -P expect-output.cmake -- <command> [<arg>...]
# The regexes are CMake's, matched against the whole output as CTest matches its own ("\n" and
# "(.|\n)*" span lines). Register such a test with accel_expect_output() (tests/CMakeLists.txt).
if(NOT DEFINED EXPECT OR EXPECT STREQUAL "")
  message(FATAL_ERROR "expect-output: no -DEXPECT=<regex> before -P")
endif()
# The command's arguments as bracket arguments of an execute_process evaluated below: passed
# as a list, an argument holding a ';' (sh -c 'a; b') would be split in two.
set(arguments "")
set(shown "")
set(seen_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  set(argument "${CMAKE_ARGV${i}}")
  if(seen_separator)
    if(argument MATCHES "]=====]")
      message(FATAL_ERROR "expect-output: an argument holds ]=====]: ${argument}")
    endif()
    string(APPEND arguments " [=====[${argument}]=====]")
    string(APPEND shown " ${argument}")
  elseif(argument STREQUAL "--")
    set(seen_separator TRUE)
  endif()
endforeach()
if(arguments STREQUAL "")
  message(FATAL_ERROR "expect-output: no command after --")
endif()

# The output is shown as it comes (ctest --output-on-failure prints it) and kept to be matched.
cmake_language(EVAL CODE "execute_process(COMMAND${arguments} RESULT_VARIABLE status
  OUTPUT_VARIABLE output ERROR_VARIABLE output ECHO_OUTPUT_VARIABLE ECHO_ERROR_VARIABLE)")
set(failures "")
if(NOT status STREQUAL "0")
  # A number, or a sentence such as "Child killed" for a signal.
  string(APPEND failures "\n  the command exited with ${status}, not 0")
endif()
if(NOT output MATCHES "${EXPECT}")
  string(APPEND failures "\n  no match in the output for the required regex: ${EXPECT}")
endif()
if(DEFINED REJECT AND NOT REJECT STREQUAL "" AND output MATCHES "${REJECT}")
  string(APPEND failures "\n  the output matches the forbidden regex: ${REJECT}\n"
                         "  (its first match: ${CMAKE_MATCH_0})")
endif()
if(failures)
  message(FATAL_ERROR "expect-output: FAILED:${shown}${failures}")
endif()
message(STATUS "expect-output: exit 0 and the required output")
