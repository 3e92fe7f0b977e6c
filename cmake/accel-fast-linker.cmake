# Links the programs of this directory and below (accel's own: tools, examples, benchmarks,
# tests) with the fastest linker the compiler accepts: lld, then gold, else the default. Each of
# them links libtorch, and GNU ld spends most of its time on libtorch's symbols; a link that
# fails with the chosen linker fails the build, it is never retried with another.
include(CheckLinkerFlag)
foreach(linker lld gold)
  check_linker_flag(CXX "-fuse-ld=${linker}" ACCEL_LINKER_${linker})
  if(ACCEL_LINKER_${linker})
    add_link_options("-fuse-ld=${linker}")
    message(STATUS "accel: linking accel's own programs with ${linker} (ACCEL_FAST_LINKER)")
    return()
  endif()
endforeach()
message(STATUS "accel: neither lld nor gold links here; the default linker links accel's "
               "programs (install lld for faster links)")
