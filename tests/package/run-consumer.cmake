# Configures and builds tests/package/consumer against accel, either installed (find_package,
# with the variants of tests/package/variants) or as a subdirectory, then runs the consumer.
# COMPILES (ACCEL_PACKAGE_COMPILES): whether the installed consumer compiles accel's bodies.
# Invoked by ctest with -P.
file(REMOVE_RECURSE "${WORK_DIR}")
set(consumer_args -DACCEL_CONSUMER_MODE=${MODE})
if(MODE STREQUAL "find_package")
  execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix"
                  RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "install failed: ${rc}")
  endif()
  # The consumer is a torch-free TU against the installed accel::accel; with COMPILES, the same
  # build makes the installed accel::compiled from its src/accel.cpp and the variants on it
  # (package.variants runs them).
  list(APPEND consumer_args "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
  if(COMPILES)
    list(APPEND consumer_args -DACCEL_CONSUMER_COMPILED=ON -DACCEL_CONSUMER_VARIANTS=ON)
  endif()
else()
  list(APPEND consumer_args "-DACCEL_SOURCE_DIR=${SOURCE_DIR}")
endif()

execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/package/consumer" -B "${WORK_DIR}/build"
          -G "${GENERATOR}" ${consumer_args}
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the ${MODE} consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/build" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the ${MODE} consumer failed: ${rc}")
endif()
execute_process(COMMAND "${WORK_DIR}/build/consumer" RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer: ${out}")
if(rc OR NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "the ${MODE} consumer failed: ${rc}")
endif()
