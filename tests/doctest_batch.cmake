# Writes the ctest file of one doctest binary's cases (accel_doctest_tests in CMakeLists.txt),
# run after each link of the binary: -D BINARY=<program> -D PREFIX=<test name prefix>
# -D RESULTS=<results prefix> -D BATCH=<tests/batch.sh> -D WORKDIR=<folder> -D OUTPUT=<file>
# -D NO_CASE=<the regex of a run that matched no case>.
# <PREFIX>batch runs the binary once, every case (batch.sh run); each case's test <PREFIX><name>
# passes when it passed there, is skipped (77) when it skipped there, and fails otherwise, after
# running the binary for that case alone for its own output (batch.sh check).
execute_process(COMMAND ${BINARY} --list-test-cases OUTPUT_VARIABLE listing
                RESULT_VARIABLE status WORKING_DIRECTORY ${WORKDIR})
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${BINARY} --list-test-cases exited with ${status}:\n${listing}")
endif()
set(fixture ${PREFIX}batch)
foreach(path BINARY RESULTS BATCH WORKDIR)
  set(${path} "[==[${${path}}]==]")
endforeach()
set(script "add_test([==[${fixture}]==] ${BATCH} run ${RESULTS} ${BINARY})
set_tests_properties([==[${fixture}]==] PROPERTIES FIXTURES_SETUP [==[${fixture}]==]
  WORKING_DIRECTORY ${WORKDIR})
add_test([==[${fixture}.cleanup]==] ${BATCH} clean ${RESULTS})
set_tests_properties([==[${fixture}.cleanup]==] PROPERTIES FIXTURES_CLEANUP [==[${fixture}]==])
")
string(REPLACE "\n" ";" lines "${listing}")
set(count 0)
foreach(name IN LISTS lines)
  # doctest's own lines around the names: a rule of '=' and "[doctest] ..." lines.
  if(name MATCHES "^=+$" OR name MATCHES "^\\[doctest\\] " OR name STREQUAL "")
    continue()
  endif()
  # --test-case takes a list of filters separated by commas.
  string(REPLACE "," "\\," filter "${name}")
  string(APPEND script "add_test([==[${PREFIX}${name}]==] ${BATCH} check ${RESULTS} 1 \
[==[${name}]==] ${BINARY} [==[--test-case=${filter}]==])
set_tests_properties([==[${PREFIX}${name}]==] PROPERTIES FIXTURES_REQUIRED [==[${fixture}]==]
  WORKING_DIRECTORY ${WORKDIR} FAIL_REGULAR_EXPRESSION [==[${NO_CASE}]==] SKIP_RETURN_CODE 77)
")
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${BINARY} --list-test-cases listed no case:\n${listing}")
endif()
file(WRITE ${OUTPUT} "${script}")
