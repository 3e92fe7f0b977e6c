// A weights folder (either layout of weights.hpp) opened by its headers alone, each tensor then
// read in any element range by positioned reads (pread): under a sharded strategy load_model
// reads this rank's slices of the parameters and nothing else, so a rank never holds, or reads,
// a whole model it will keep only a piece of. The folder is checked as load_weights checks it:
// one layout, every file the index names there, holding exactly the tensors mapped to it.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../detail/separate_compilation.hpp"
#include "safetensors_format.hpp"

namespace accel::state {

class WeightsReader {
 public:
  struct Tensor {
    std::string name;
    std::size_t file;         // index into files()
    safetensors::Entry entry;  // offsets relative to that file's data section
    std::int64_t numel() const;
  };

  ACCEL_DECL explicit WeightsReader(const std::filesystem::path& dir);

  // In file order, each file's in offset order (as load_weights returns them).
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const {
    const auto found = by_name_.find(name);
    return found == by_name_.end() ? nullptr : &tensors_[found->second];
  }
  const std::filesystem::path& file(std::size_t index) const { return files_[index].path; }

  // Elements [begin, begin + numel) of the flattened tensor, in its stored dtype: a new CPU
  // tensor holding only those bytes, read from the file in one positioned read.
  ACCEL_DECL torch::Tensor read(const Tensor& tensor, std::int64_t begin, std::int64_t numel) const;
  torch::Tensor read(const Tensor& tensor) const { return read(tensor, 0, tensor.numel()); }

  // Tensor bytes read by every WeightsReader of this process so far (tests, benchmarks).
  static std::uint64_t bytes_read_in_process() { return bytes_read().load(); }

 private:
  struct File {
    std::filesystem::path path;
    std::uint64_t data_offset;  // 8 + the header's length
  };
  static std::atomic<std::uint64_t>& bytes_read() {
    static std::atomic<std::uint64_t> counter{0};
    return counter;
  }
  ACCEL_DECL void add_file(const std::filesystem::path& path,
                           const std::map<std::string, std::string>* weight_map,
                           const std::filesystem::path& index_path);

  std::vector<File> files_;
  std::vector<Tensor> tensors_;
  std::map<std::string, std::size_t> by_name_;
};

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/weights_reader.ipp"
#endif
