# static.separate_compilation: accel's separately compiled part is whole. Run by ctest with
# SOURCE_DIR. Every include/accel/**/impl/*.ipp is included by impl/src.hpp (else a program
# linked to accel::compiled misses its functions at link time, or only where it calls them),
# and by exactly one header, under `#if !defined(ACCEL_SEPARATE_COMPILATION)` (else header-only
# programs miss them, or compile them twice).
set(root "${SOURCE_DIR}/include/accel")
file(GLOB_RECURSE ipps RELATIVE "${root}" "${root}/*.ipp")
file(READ "${root}/impl/src.hpp" src)
file(GLOB_RECURSE headers "${root}/*.hpp")
set(problems "")
foreach(ipp IN LISTS ipps)
  if(NOT src MATCHES "#include \"\\.\\./${ipp}\"")
    string(APPEND problems "  ${ipp} is not included by impl/src.hpp\n")
  endif()
  get_filename_component(dir "${ipp}" DIRECTORY)   # <folder>/impl
  get_filename_component(dir "${dir}" DIRECTORY)   # <folder>
  get_filename_component(name "${ipp}" NAME)
  set(includers "")
  foreach(header IN LISTS headers)
    file(READ "${header}" text)
    if(text MATCHES "#if !defined\\(ACCEL_SEPARATE_COMPILATION\\)\n#include \"impl/${name}\"\n#endif")
      get_filename_component(header_dir "${header}" DIRECTORY)
      file(RELATIVE_PATH header_dir "${root}" "${header_dir}")
      if(header_dir STREQUAL dir)
        list(APPEND includers "${header}")
      endif()
    endif()
  endforeach()
  list(LENGTH includers count)
  if(NOT count EQUAL 1)
    string(APPEND problems "  ${ipp} is included, under #if !defined(ACCEL_SEPARATE_COMPILATION), "
                           "by ${count} headers of its folder (must be 1)\n")
  endif()
endforeach()
list(LENGTH ipps count)
if(problems)
  message(FATAL_ERROR "the separately compiled part is not whole:\n${problems}")
endif()
message(STATUS "${count} .ipp files, each in impl/src.hpp and in one header")
