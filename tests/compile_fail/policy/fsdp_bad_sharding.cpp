// expect: accel: Fsdp<S> takes a sharding strategy as S
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Fsdp<accel::FullShard>;
#else
using Parallelism = accel::Fsdp<accel::Bf16>;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
