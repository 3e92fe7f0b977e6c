// The tensors of a checkpoint's rank files, found by name, with parameters and optimizer state
// read back as any slice of their flattened elements. A checkpoint names a slice
// "<tensor>@<first element>": Ddp's rank 0 writes "model0/fc.weight@0", the whole of it; Zero3's
// ranks write their pieces, "model0/fc.weight@0" and "model0/fc.weight@4096". A block of rows
// (a tensor-parallel slice that is not contiguous in the full tensor: a RowParallelLinear's
// columns) is "<tensor>@<first element>:<stride>", stored [rows, width]: row r holds the width
// elements from first + r * stride. Any reader asks for the elements it holds ([begin, begin +
// numel), or rows of them) and gets them from whichever pieces cover them, which is what makes a
// checkpoint load at another world size, mesh and strategy.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "manifest.hpp"
#include "safetensors.hpp"

namespace accel::state {

inline std::string slice_name(std::string_view tensor, std::int64_t begin) {
  return fmt::format("{}@{}", tensor, begin);
}
inline std::string block_name(std::string_view tensor, std::int64_t begin, std::int64_t stride) {
  return fmt::format("{}@{}:{}", tensor, begin, stride);
}

class SliceCatalog {
 public:
  // Takes a parsed rank file; `label` names it in errors (its path).
  ACCEL_DECL void add(safetensors::File file, std::string label);

  bool has(const std::string& name) const { return whole_.count(name) != 0; }

  // A tensor stored whole (not as slices): from the first file that holds it.
  ACCEL_DECL torch::Tensor whole(const std::string& name) const;

  // The names under `prefix` stored as slices (their part before '@'), for optimizer state.
  ACCEL_DECL std::vector<std::string> sliced_under(const std::string& prefix) const;

  // Elements [begin, begin + numel) of the flattened `tensor`, as `dtype`, from every slice that
  // covers part of them; an element no slice covers is an error naming the tensor. Where one
  // slice covers them all (a checkpoint loaded with the layout it was saved with) the result is
  // a read-only view of the file's bytes, valid while this catalog lives: loading then copies
  // each element once, into the live tensor.
  torch::Tensor read(const std::string& tensor, std::int64_t begin, std::int64_t numel,
                     c10::ScalarType dtype) const {
    return read_rows(tensor, begin, 1, numel, numel, dtype);
  }
  // `rows` rows of `width` elements, `stride` apart, the first at element `begin`, flattened:
  // a tensor-parallel slice of the full tensor. Errors as read()'s.
  ACCEL_DECL torch::Tensor read_rows(const std::string& tensor, std::int64_t begin,
                                     std::int64_t rows, std::int64_t width, std::int64_t stride,
                                     c10::ScalarType dtype) const;

  // How the slices of `tensor` lie: they tile [0, end) when `problem` is empty; otherwise it
  // describes the first gap, overlap or change of dtype, naming the files (for verify).
  struct Coverage {
    std::int64_t end = 0;
    std::optional<c10::ScalarType> dtype;  // the slices' (none for a dtype libtorch lacks)
    std::string problem;
  };
  ACCEL_DECL Coverage coverage(const std::string& tensor) const;

 private:
  struct Slice {
    std::size_t file;
    std::size_t entry;  // in its file's header
    std::int64_t begin;
    std::int64_t numel;
    // Its rows: one of numel elements, or a block's (stride > width).
    std::int64_t rows;
    std::int64_t width;
    std::int64_t stride;
  };

  // A slice's elements, flattened: a view of the file's bytes where their dtype and alignment
  // allow, a copy otherwise.
  ACCEL_DECL torch::Tensor stored(const Slice& slice, c10::ScalarType dtype) const;
  std::vector<safetensors::File> files_;
  std::vector<std::string> labels_;
  std::map<std::string, std::vector<Slice>> slices_;
  std::multimap<std::string, std::size_t> whole_;
};

// One rank file's bytes into `bytes`, or why they are not the ones the manifest describes
// (missing, another size, another checksum), naming the file.
ACCEL_DECL std::optional<std::string> read_rank_file(const std::filesystem::path& folder,
                                                    const FileRecord& file, std::string& bytes);

// A checkpoint's rank files, as its manifest names them, each read whole and checked against
// the manifest (present, its size, its XXH3-64) before it joins the catalog. Errors begin with
// `call` and name the file.
ACCEL_DECL SliceCatalog read_checkpoint_files(const std::filesystem::path& folder,
                                              const Manifest& manifest, std::string_view call);

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/slice_catalog.ipp"
#endif
