// expect: accel: backward\(loss_sum, tokens\) takes the token count as an integer
#include <accel/accelerator.hpp>

// The count divides the window's gradients after an all-reduce of integers: a tensor (or a
// float, or a bool) is refused; the twin passes the count as an integer.
int main() {
  accel::Accelerator<accel::Ddp> acc;
  const torch::Tensor mask = torch::ones({4});
  const torch::Tensor loss_sum = (torch::ones({4}, torch::requires_grad()) * mask).sum();
#ifdef ACCEL_TWIN
  acc.backward(loss_sum, mask.sum().item<std::int64_t>());
#else
  acc.backward(loss_sum, mask.sum());
#endif
}
