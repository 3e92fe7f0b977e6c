// expect: accel: Accelerator's first parameter is the parallelism policy, but a precision policy
#include <accel/accelerator.hpp>

int main() { accel::Accelerator<accel::Bf16, accel::Ddp> accelerator; }
