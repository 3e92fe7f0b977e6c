// accel.cpp in the separately compiled mode: its target links accel::compiled, which defines
// ACCEL_SEPARATE_COMPILATION (bench/compile_cost.sh --separate times this TU in accel.cpp's place).
#include "accel.cpp"
