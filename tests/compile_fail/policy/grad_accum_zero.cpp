// expect: accel: GradAccum<N> needs N >= 1
#include <accel/accelerator.hpp>

int main() { accel::Accelerator<accel::Ddp, accel::Fp32, accel::GradAccum<0>> accelerator; }
