// expect: accel: release_memory.objects.... resets each object to empty
#include <accel/accelerator.hpp>

#include <mutex>

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  torch::Tensor activations = torch::ones({4});
#ifdef ACCEL_TWIN
  accelerator.release_memory(activations);
#else
  std::mutex lock;  // neither empty-able nor assignable: let it go out of scope instead
  accelerator.release_memory(activations, lock);
#endif
}
