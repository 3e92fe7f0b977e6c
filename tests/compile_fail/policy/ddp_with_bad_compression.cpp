// expect: accel: DdpWith<C> takes a gradient compression as C
#include <accel/accelerator.hpp>

int main() { accel::Accelerator<accel::DdpWith<accel::Fp16>> accelerator; }
