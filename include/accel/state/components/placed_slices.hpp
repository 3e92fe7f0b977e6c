// A range of a parameter, or of its optimizer state, in the full tensor's numbering, as the
// checkpoint components write and read it. Under every strategy without tensor parallelism the
// parameter is the full tensor and the range is one slice, "<tensor>@<begin>". A tensor-parallel
// slice (parallel/placement.hpp) is rows of the full tensor: a ColumnParallelLinear's rows are
// contiguous there, one slice again; a RowParallelLinear's columns are a block of rows `stride`
// apart, "<tensor>@<begin>:<stride>" (../slice_catalog.hpp). A range of such a slice (a Zero3
// shard of it) is at most three: the end of a row, whole rows, the start of a row.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../../parallel/placement.hpp"
#include "../slice_catalog.hpp"
#include "component.hpp"

namespace accel::state::components {

// `rows` rows of `width` elements, `stride` apart, the first at element `begin` of the full
// tensor: elements [local, local + rows * width) of the range.
struct FullBlock {
  std::int64_t begin = 0;
  std::int64_t rows = 1;
  std::int64_t width = 0;
  std::int64_t stride = 0;
  std::int64_t local = 0;
};

// Elements [begin, begin + numel) of a parameter placed as `place` says, as blocks of the full
// tensor.
inline std::vector<FullBlock> full_blocks(const parallel::Placement& place, std::int64_t begin,
                                          std::int64_t numel) {
  std::vector<FullBlock> blocks;
  if (numel <= 0) return blocks;
  if (place.whole()) return {{begin, 1, numel, numel, 0}};
  const std::int64_t w = place.width, end = begin + numel;
  auto full = [&](std::int64_t k) { return (k / w) * place.stride + place.offset + k % w; };
  auto contiguous = [&](std::int64_t k, std::int64_t n) {
    blocks.push_back({full(k), 1, n, n, k - begin});
  };
  std::int64_t k = begin;
  if (k % w != 0) {  // the end of a row
    const std::int64_t n = std::min(w - k % w, end - k);
    contiguous(k, n);
    k += n;
  }
  if (const std::int64_t rows = (end - k) / w; rows > 0) {
    if (rows == 1 || place.stride == w)
      contiguous(k, rows * w);
    else
      blocks.push_back({full(k), rows, w, place.stride, k - begin});
    k += rows * w;
  }
  if (k < end) contiguous(k, end - k);  // the start of a row
  return blocks;
}

// Save: `data`, elements [begin, begin + numel) of the parameter (or of a state field) flattened,
// as the slices of the full tensor `tensor` they are.
inline void add_placed(NamedTensors& named, const std::string& tensor, std::int64_t begin,
                       const torch::Tensor& data, const parallel::Placement& place) {
  for (const FullBlock& b : full_blocks(place, begin, data.numel())) {
    const torch::Tensor part = data.reshape({-1}).narrow(0, b.local, b.rows * b.width);
    if (b.rows == 1)
      named.emplace_back(slice_name(tensor, b.begin), detail::cpu_copy(part));
    else
      named.emplace_back(block_name(tensor, b.begin, b.stride),
                         detail::cpu_copy(part.reshape({b.rows, b.width})));
  }
}

// Load: elements [begin, begin + numel) of the parameter placed as `place` says, flattened, from
// whichever slices of the full tensor hold them.
inline torch::Tensor read_placed(const SliceCatalog& catalog, const std::string& tensor,
                                 std::int64_t begin, std::int64_t numel,
                                 const parallel::Placement& place, c10::ScalarType dtype) {
  const std::vector<FullBlock> blocks = full_blocks(place, begin, numel);
  if (blocks.size() == 1)
    return catalog.read_rows(tensor, blocks[0].begin, blocks[0].rows, blocks[0].width,
                             blocks[0].stride, dtype);
  torch::Tensor out = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
  for (const FullBlock& b : blocks)
    out.narrow(0, b.local, b.rows * b.width)
        .copy_(catalog.read_rows(tensor, b.begin, b.rows, b.width, b.stride, dtype));
  return out;
}

}  // namespace accel::state::components
