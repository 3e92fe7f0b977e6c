// expect: accel: SequenceParallel<M> marks a module with `weight` and `bias` members
#include <accel/parallel/sequence_parallel.hpp>

// SequenceParallel<M> sums the gradients of M's weight and bias over the tensor-parallel group;
// an activation has none to mark. Its twin marks a LayerNorm.
int main() {
#ifdef ACCEL_TWIN
  accel::SequenceParallel<torch::nn::LayerNorm> norm(torch::nn::LayerNormOptions({4}));
#else
  accel::SequenceParallel<torch::nn::GELU> norm;
#endif
  (void)norm;
}
