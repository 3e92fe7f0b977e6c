# Warnings as errors on accel's own targets only; nothing here reaches accel::accel's users.
function(accel_strict_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror)
  # GCC 14 (Debian 13) reports -Warray-bounds inside libstdc++'s std::vector<bool>::reserve when
  # it is inlined from libtorch's torch::autograd::Function<T>::apply (custom_function.h), which
  # activation checkpointing calls: a false positive in system headers (offset 8 "out of the
  # bounds [0, 8]") that no pragma at the call site silences, so the check is off there.
  target_compile_options(${target} PRIVATE
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,14>>:-Wno-array-bounds>)
endfunction()
