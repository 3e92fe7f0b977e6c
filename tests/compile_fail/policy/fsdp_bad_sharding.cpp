// expect: accel: Fsdp<S> takes a sharding strategy as S
#include <accel/accelerator.hpp>

int main() { accel::Accelerator<accel::Fsdp<accel::Bf16>> accelerator; }
