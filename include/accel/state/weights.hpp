// Consolidated model weights in a folder laid out as the HuggingFace ecosystem (transformers'
// save_pretrained, from_pretrained) lays them out, so that either side reads the other's:
//
//   model.safetensors                              everything fits in one file, or
//   model-00001-of-0000K.safetensors ...           shards filled in order, and
//   model.safetensors.index.json                   {"metadata": {"total_size": <data bytes>},
//                                                   "weight_map": {"<tensor>": "<file>"}}
//
// Each file carries {"format": "pt"} as transformers' does. A folder holds one layout: saving
// removes the other's files, and loading refuses a folder holding both.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "posix_file.hpp"
#include "safetensors.hpp"

namespace accel::state {

inline constexpr std::string_view weights_file = "model.safetensors";
inline constexpr std::string_view weights_index_file = "model.safetensors.index.json";

// transformers' shard name: model-00001-of-00003.safetensors (index from 1).
inline std::string weights_shard_name(std::size_t index, std::size_t count) {
  return fmt::format("model-{:05}-of-{:05}.safetensors", index, count);
}

namespace detail {

// model-DDDDD-of-DDDDD.safetensors
ACCEL_DECL bool is_shard_name(std::string_view name);

// Which tensors go in which file: in order, a new file when the next tensor would take the
// current one over the limit; a tensor larger than the limit gets a file of its own.
ACCEL_DECL std::vector<std::vector<std::size_t>> plan_shards(
    const std::vector<std::uint64_t>& bytes, std::uint64_t max_shard_bytes);

// Removes a temporary file unless it was renamed into place.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::filesystem::path final_path)
      : final_(std::move(final_path)),
        path_(final_.parent_path() /
              fmt::format(".{}.tmp.{}", final_.filename().string(), ::getpid())) {}
  ACCEL_DECL ~TemporaryFile();
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::filesystem::path& path() const { return path_; }
  ACCEL_DECL void commit();

 private:
  std::filesystem::path final_, path_;
  bool committed_ = false;
};

// std::filesystem calls whose failures become accel errors naming the path.
ACCEL_DECL void check_filesystem(const std::error_code& error, std::string_view what,
                                 const std::filesystem::path& path);
ACCEL_DECL bool path_exists(const std::filesystem::path& path);

// The index's weight_map, checked: an object of tensor name -> plain file name in the folder.
ACCEL_DECL std::map<std::string, std::string> read_weight_map(const std::filesystem::path& path);

}  // namespace detail

// Writes `named` into `dir` (created if needed): one model.safetensors when all the tensor data
// fits in max_shard_bytes, otherwise shards and the index. Every file is written under a
// temporary name, fsync'd and renamed into place, the index last; then the other layout's files
// are removed and the folder fsync'd.
ACCEL_DECL void save_weights(const std::filesystem::path& dir,
                             const std::vector<std::pair<std::string, torch::Tensor>>& named,
                             std::uint64_t max_shard_bytes);

// Reads either layout: the index when there is one (every file it names must exist and hold
// exactly the tensors it maps to it), else model.safetensors. Tensors come in file order, each
// file's in its own (offset) order.
ACCEL_DECL std::vector<std::pair<std::string, torch::Tensor>> load_weights(
    const std::filesystem::path& dir);

// The names a strict load compares: what the model expects against what the weights hold.
struct NameCheck {
  std::vector<std::string> missing;     // expected, not found (in the expected order)
  std::vector<std::string> unexpected;  // found, not expected (in the found order)

  bool ok() const { return missing.empty() && unexpected.empty(); }
  // "missing 2: "a", "b"; unexpected 1: "c"", at most `limit` names of each, then "and N more".
  ACCEL_DECL std::string describe(std::size_t limit = 10) const;
};

ACCEL_DECL NameCheck compare_names(const std::vector<std::string>& expected,
                                   const std::vector<std::string>& found);

}  // namespace accel::state

#include "weights_reader.hpp"

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/weights.ipp"
#endif
