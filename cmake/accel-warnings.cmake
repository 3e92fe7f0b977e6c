# Warnings as errors on accel's own targets only; nothing here reaches accel::accel's users.
function(accel_strict_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror)
  # GCC 14 (Debian 13) reports -Warray-bounds and -Wstringop-overflow inside libstdc++'s
  # std::vector<bool>::reserve wherever it is inlined into libtorch's
  # torch::autograd::Function<T>::apply (custom_function.h), which activation checkpointing
  # calls: false positives in system headers ("offset 8 is out of the bounds [0, 8]") that no
  # pragma at our call site silences. Only programs that checkpoint compile that code
  # (Options::activation_checkpointing is a function for that reason), and our tests do.
  # Likewise, with GCC 12 and libtorch 1.13 too, -Wmaybe-uninitialized inside c10's
  # intrusive_ptr, in the std::optional<at::Generator> that torch's random ops take ("target_ may
  # be used uninitialized", c10/util/intrusive_ptr.h), at -O1 in examples/gpt/model.cpp (the
  # examples compile at -O1 under ACCEL_QUICK_PROGRAMS, the Debian 13 leg everything).
  target_compile_options(${target} PRIVATE
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_GREATER_EQUAL:$<CXX_COMPILER_VERSION>,14>>:-Wno-array-bounds;-Wno-stringop-overflow>
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
endfunction()
