// expect: accel: a gradient compression .CompressFp16, CompressBf16. is an argument of DdpWith
#include <accel/accelerator.hpp>

int main() { accel::Accelerator<accel::CompressFp16> accelerator; }
