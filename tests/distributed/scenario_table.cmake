# dist.scenario_table.<worker>: the scenario names CMakeLists.txt read from a worker's source
# (-D expected=<name>,<name>...) against those the built worker lists (-D worker=<program>,
# run with --list). A table entry the reading missed would be a scenario no test runs.
execute_process(COMMAND ${worker} --list OUTPUT_VARIABLE output RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${worker} --list exited with ${status}")
endif()
string(STRIP "${output}" output)
string(REPLACE "\n" ";" listed "${output}")
string(REPLACE "," ";" read "${expected}")
set(unread ${listed})
set(unknown ${read})
if(read)
  list(REMOVE_ITEM unread ${read})
endif()
if(listed)
  list(REMOVE_ITEM unknown ${listed})
endif()
if(unread OR unknown)
  message(FATAL_ERROR "scenario names: the worker has [${unread}] that CMake did not read from "
                      "its source (one table entry per line, starting with {\"<name>\",); CMake "
                      "read [${unknown}] that the worker does not have")
endif()
list(LENGTH listed count)
message(STATUS "${count} scenarios, each read by CMake")
