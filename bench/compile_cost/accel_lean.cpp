// accel.cpp in the separately compiled mode, including only what its alias needs
// (<accel/accelerator_class.hpp> and <accel/precision/bf16.hpp>, not <accel/accelerator.hpp>):
// bench/compile_cost.sh --lean times this TU in accel.cpp's place.
#define COMPILE_COST_LEAN
#include "accel.cpp"
