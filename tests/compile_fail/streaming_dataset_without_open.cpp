// expect: accel: a streaming dataset needs `Reader open.std::int64_t shard, std::int64_t
#include <accel/accelerator.hpp>

#include <optional>

struct Sample {
  torch::Tensor x;
};
struct Files {
  struct Reader {
    std::optional<Sample> next() { return std::nullopt; }
  };
  std::int64_t shard_count() const { return 1; }
#ifdef ACCEL_TWIN
  Reader open(std::int64_t, std::int64_t) const { return {}; }
#else
  Reader open(std::int64_t) const { return {}; }  // no position: a resume could not seek
#endif
};

int main() { accel::StreamingLoader loader(Files{}, {.batch_size = 2}); }
