# accel::compiled, the separately compiled mode (docs/getting-started.md, "Separate compilation"):
# accel's non-template code (process group and transports, launcher, safetensors and checkpoint
# files, environment report) compiled once, from src/accel.cpp, into a static library, instead of
# in every translation unit that includes accel. A target that links accel::compiled instead of
# accel::accel gets ACCEL_SEPARATE_COMPILATION, under which the headers only declare that code.
# Every TU of one program must agree: linking both accel::accel and accel::compiled into one
# program is an ODR violation.
#
# The library is built in the consumer's own tree, with its compiler and flags, from the source
# installed beside this file (find_package) or from the source tree (add_subdirectory), and only
# when something links it (EXCLUDE_FROM_ALL).
function(accel_add_compiled_library source)
  if(TARGET accel_compiled)
    return()
  endif()
  add_library(accel_compiled STATIC EXCLUDE_FROM_ALL "${source}")
  add_library(accel::compiled ALIAS accel_compiled)
  target_link_libraries(accel_compiled PUBLIC accel::accel)
  target_compile_definitions(accel_compiled PUBLIC ACCEL_SEPARATE_COMPILATION)
  # It may end up in a shared library of the consumer's.
  set_target_properties(accel_compiled PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
