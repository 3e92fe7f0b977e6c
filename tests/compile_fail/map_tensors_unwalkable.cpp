// expect: accel: cannot walk this type for tensors
// A struct with a constructor is not an aggregate: Boost.PFR cannot list its fields.
#include <accel/data/tensor_tree.hpp>

#ifdef ACCEL_TWIN
struct Outputs {
  torch::Tensor logits;
};
#else
struct Outputs {
  explicit Outputs(torch::Tensor l) : logits(std::move(l)) {}
  torch::Tensor logits;
};
#endif

int main() {
  const Outputs outputs{torch::ones({2})};
  accel::data::map_tensors(outputs, [](const torch::Tensor& t) { return t * 2; });
}
