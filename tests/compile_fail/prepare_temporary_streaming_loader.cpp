// expect: accel: prepare.. keeps a pointer to the StreamingLoader
#include <accel/accelerator.hpp>

#include <optional>

struct Sample {
  torch::Tensor x;
};
struct Counting {  // one shard of four samples
  struct Reader {
    std::int64_t at;
    std::optional<Sample> next() {
      if (at >= 4) return std::nullopt;
      return Sample{torch::full({2}, static_cast<double>(at++))};
    }
  };
  std::int64_t shard_count() const { return 1; }
  Reader open(std::int64_t, std::int64_t position) const { return {position}; }
};

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
#ifdef ACCEL_TWIN
  accel::StreamingLoader loader(Counting{}, {.batch_size = 2});
  accelerator.prepare(loader);
#else
  accelerator.prepare(accel::StreamingLoader(Counting{}, {.batch_size = 2}));
#endif
}
