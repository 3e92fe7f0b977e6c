// expect: accel: a streaming dataset's reader needs `std::optional<Sample> next..`
#include <accel/accelerator.hpp>

#include <optional>

struct Sample {
  torch::Tensor x;
};
struct Files {
  struct Reader {
#ifdef ACCEL_TWIN
    std::optional<Sample> next() { return std::nullopt; }
#else
    Sample next() { return {}; }  // no way to say the shard has ended
#endif
  };
  std::int64_t shard_count() const { return 1; }
  Reader open(std::int64_t, std::int64_t) const { return {}; }
};

int main() { accel::StreamingLoader loader(Files{}, {.batch_size = 2}); }
