# compile_fail.build: compiles every compile-fail case in one parallel build of
# accel_compile_fail_cases, after removing the last run's logs (so that no case is judged on an
# old compile). The cases' launcher (capture.sh) makes each compile succeed for the build; whether
# it failed is in LOGS/<target>.status, judged by each case's own test (run-case.cmake). The
# output of the cases that share one TU (COMBINED_LOG; COMBINED_CASES, separated by spaces) is
# then split into LOGS/<CASE_PREFIX><case>.log and .status (split-log.awk).
file(REMOVE_RECURSE "${LOGS}")
file(MAKE_DIRECTORY "${LOGS}")
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target accel_compile_fail_cases
  RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "building the compile-fail cases failed outside the cases themselves "
                      "(the precompiled header, or the build files):\n${output}")
endif()
if(COMBINED_CASES)
  execute_process(
    COMMAND awk -v "cases=${COMBINED_CASES}" -v "logs=${LOGS}" -v "prefix=${CASE_PREFIX}"
            -f "${CMAKE_CURRENT_LIST_DIR}/split-log.awk" "${COMBINED_LOG}"
    RESULT_VARIABLE status ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "splitting the combined cases' output failed (${status}):\n${output}")
  endif()
endif()
