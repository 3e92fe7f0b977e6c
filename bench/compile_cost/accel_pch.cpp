// accel.cpp compiled over a precompiled header (bench/compile_cost.sh --pch): torch and <accel/accelerator.hpp>.
#include "accel.cpp"
