// expect: accel: Accelerator's first parameter is not an accel policy
#include "accelerator.hpp"

struct MyStrategy {};  // no category: not a policy

#ifdef ACCEL_TWIN
using Parallelism = accel::Ddp;
#else
using Parallelism = MyStrategy;
#endif

int main() { [[maybe_unused]] Accelerator<Parallelism> accelerator; }
