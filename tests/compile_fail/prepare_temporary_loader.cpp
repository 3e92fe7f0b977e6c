// expect: accel: prepare.. keeps a pointer to the DataLoader
#include <accel/accelerator.hpp>

struct Sample {
  torch::Tensor x;
};
struct Data {
  std::int64_t size() const { return 4; }
  Sample get(std::int64_t i) const { return {torch::full({2}, static_cast<double>(i))}; }
};

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
#ifdef ACCEL_TWIN
  accel::DataLoader loader(Data{}, {.batch_size = 2});
  accelerator.prepare(loader);
#else
  accelerator.prepare(accel::DataLoader(Data{}, {.batch_size = 2}));
#endif
}
