// expect: accel: checkpoint\(fn, inputs...\): fn returns nothing
#include <accel/memory/activation_checkpoint.hpp>

// A checkpointed function must return what backward flows through; its twin returns the tensor.
int main() {
  const torch::Tensor x = torch::ones({2}, torch::requires_grad());
#ifdef ACCEL_TWIN
  auto y = accel::checkpoint([](const torch::Tensor& t) { return t * 2; }, x);
#else
  accel::checkpoint([](const torch::Tensor& t) { (void)(t * 2); }, x);
#endif
}
