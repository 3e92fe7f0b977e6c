// expect: accel: Sharded<Holder>: the module's forward is not one plain member function
#include <accel/parallel/sharded.hpp>

// Sharded<Holder> gives the unit the module's own forward signature, which a static forward
// does not have; its twin's forward is a plain member function.
struct BlockImpl : torch::nn::Module {
#ifdef ACCEL_TWIN
  torch::Tensor forward(const torch::Tensor& x) { return x * 2; }
#else
  static torch::Tensor forward(const torch::Tensor& x) { return x * 2; }
#endif
};
TORCH_MODULE(Block);

int main() {
  accel::Sharded<Block> block;
  (void)block->forward(torch::ones({2}));
}
