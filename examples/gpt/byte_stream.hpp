// A byte stream made of pieces of memory held elsewhere, read without copying it first: the gpt
// example's training and validation splits are pieces of the read-only mappings of the --text
// files (so the page cache holds the text, not the process's heap), or of buffers the split owns
// (the fortunes, which are rewritten as they are split).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace gpt {

class ByteStream {
 public:
  std::int64_t size() const { return size_; }
  // Pieces of memory the stream is made of: a file's consecutive chunks of one split are one.
  std::int64_t pieces() const { return static_cast<std::int64_t>(pieces_.size()); }

  // Appends the `count` bytes at `data`, which `owner` keeps alive as long as the stream (or a
  // copy of it) lives. A piece that continues the last one in memory extends it.
  void append(const std::shared_ptr<const void>& owner, const std::uint8_t* data,
              std::int64_t count);

  // Bytes [start, start + count) as int64 token ids, 1-D; needs 0 <= start and
  // start + count <= size(). Safe to call from several threads at once (the loader's workers).
  torch::Tensor tokens(std::int64_t start, std::int64_t count) const;

 private:
  struct Piece {
    std::int64_t at;  // where the piece starts in the stream
    const std::uint8_t* data;
    std::int64_t size;
  };
  std::vector<Piece> pieces_;
  std::vector<std::shared_ptr<const void>> owners_;  // each owner once
  std::int64_t size_ = 0;
};

}  // namespace gpt
