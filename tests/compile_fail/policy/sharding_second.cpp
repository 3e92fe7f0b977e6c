// expect: accel: Accelerator's second parameter is the precision policy, but a sharding strategy or gradient compression was given there
#include "accelerator.hpp"

#ifdef ACCEL_TWIN
using Parallelism = accel::Fsdp<accel::FullShard>;
using Precision = accel::Bf16;
#else
using Parallelism = accel::Fsdp<>;
using Precision = accel::FullShard;  // meant as Fsdp's argument
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism, Precision> accelerator; }
