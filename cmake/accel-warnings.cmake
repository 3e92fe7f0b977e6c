# Warnings as errors on accel's own targets only; nothing here reaches accel::accel's users.
function(accel_strict_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Werror)
endfunction()
