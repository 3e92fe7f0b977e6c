// The one translation unit of accel's separately compiled mode: compile it with
// ACCEL_SEPARATE_COMPILATION defined, as every other TU of the program (accel/impl/src.hpp).
#include <accel/impl/src.hpp>
