// expect: accel: cannot collate this sample field
#include <accel/accelerator.hpp>

struct Sample {
  torch::Tensor image;
  int label;  // a plain number cannot be stacked into a batch
};

int main() {
  std::vector<Sample> samples(2);
  accel::data::collate(std::span<const Sample>(samples));
}
