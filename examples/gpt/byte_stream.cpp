#include "byte_stream.hpp"

#include <algorithm>
#include <stdexcept>

namespace gpt {

void ByteStream::append(const std::shared_ptr<const void>& owner, const std::uint8_t* data,
                        std::int64_t count) {
  if (count <= 0) return;
  if (owners_.empty() || owners_.back() != owner) owners_.push_back(owner);
  if (!pieces_.empty() && pieces_.back().data + pieces_.back().size == data)
    pieces_.back().size += count;
  else
    pieces_.push_back({size_, data, count});
  size_ += count;
}

torch::Tensor ByteStream::tokens(std::int64_t start, std::int64_t count) const {
  if (start < 0 || count < 0 || start > size_ - count)
    throw std::out_of_range("ByteStream::tokens: bytes outside the stream");
  torch::Tensor out = torch::empty({count}, torch::kLong);
  if (count == 0) return out;
  auto* to = out.data_ptr<std::int64_t>();
  // The last piece that starts at or before `start`.
  auto piece = std::upper_bound(pieces_.begin(), pieces_.end(), start,
                                [](std::int64_t at, const Piece& p) { return at < p.at; }) - 1;
  for (std::int64_t done = 0; done < count; ++piece) {
    const std::int64_t from = start + done - piece->at;
    const std::int64_t n = std::min(count - done, piece->size - from);
    std::copy(piece->data + from, piece->data + from + n, to + done);
    done += n;
  }
  return out;
}

}  // namespace gpt
