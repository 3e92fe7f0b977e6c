// expect: accel: a streaming dataset needs `std::int64_t shard_count.. const`
#include <accel/accelerator.hpp>

#include <optional>

struct Sample {
  torch::Tensor x;
};
struct Files {
  struct Reader {
    std::optional<Sample> next() { return std::nullopt; }
  };
#ifdef ACCEL_TWIN
  std::int64_t shard_count() const { return 1; }
#else
  std::int64_t size() const { return 1; }  // a map-style name: the loader cannot tell the shards
#endif
  Reader open(std::int64_t, std::int64_t) const { return {}; }
};

int main() { accel::StreamingLoader loader(Files{}, {.batch_size = 2}); }
