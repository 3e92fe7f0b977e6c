// expect: accel: cannot collate this sample field
#include <accel/data/tensor_tree.hpp>

#include <span>
#include <vector>

struct Sample {
  torch::Tensor image;
#ifdef ACCEL_TWIN
  torch::Tensor label;  // the fix: torch::tensor(label)
#else
  int label;  // a plain number cannot be stacked into a batch
#endif
};

int main() {
  std::vector<Sample> samples(2);
  accel::data::collate(std::span<const Sample>(samples));
}
