// Two streaming datasets (stream.hpp) over files, one shard per file: a folder of text files read
// as bytes, and flat binary token files (uint16 or uint32, nanoGPT's .bin). Each sample is a
// window of `length` + 1 tokens: `input` its first `length`, `target` its last `length`;
// consecutive windows of a file overlap by one token. A reader maps its file read-only and hands
// the pages it has passed back to the kernel as it goes (madvise MADV_DONTNEED), so the process's
// resident memory stays at a few megabytes per reader however large the corpus: the page cache
// holds the bytes, shared and dropped under memory pressure.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../detail/error.hpp"

namespace accel::data {

/// A window of a token stream: `input` and `target`, int64, `length` each, `target` shifted by one.
struct TokenWindow {
  torch::Tensor input;   ///< the window's first `length` tokens
  torch::Tensor target;  ///< its last `length` tokens: each input token's successor
};

/// A file mapped read-only (PROT_READ, MAP_PRIVATE) for as long as it lives.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      accel::detail::fail("streaming data: {} cannot be opened: {}; check the path and its "
                          "permissions",
                          path.string(), std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      accel::detail::fail("streaming data: {} is not a regular file; give files of tokens or text",
                          path.string());
    }
    size_ = static_cast<std::size_t>(info.st_size);
    if (size_ > 0) {
      void* at = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int error = errno;
      ::close(fd);
      if (at == MAP_FAILED)
        accel::detail::fail("streaming data: {} cannot be mapped: {}; give a file on a file system "
                            "that supports mmap",
                            path.string(), std::strerror(error));
      data_ = static_cast<const std::uint8_t*>(at);
      ::madvise(at, size_, MADV_SEQUENTIAL);  // read front to back: read ahead, drop behind
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

  /// The pages wholly before byte `end` are not needed again: their memory goes back to the
  /// kernel (read again from the file if they are).
  void release_before(std::size_t end) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t upto = std::min(end, size_) / page * page;
    if (data_ == nullptr || upto <= released_ + (std::size_t{4} << 20)) return;  // by 4 MiB
    ::madvise(const_cast<std::uint8_t*>(data_) + released_, upto - released_, MADV_DONTNEED);
    released_ = upto;
  }

 private:
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t released_ = 0;
};

/// One shard per file: the regular, non-hidden files of `folder`, by name; or `folder` itself
/// when it is a file.
inline std::vector<std::filesystem::path> shard_files(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_regular_file(folder, error)) return {folder};
  if (!fs::is_directory(folder, error))
    accel::detail::fail("streaming data: {} is neither a folder nor a file; give the folder of "
                        "the shard files",
                        folder.string());
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.is_regular_file() && entry.path().filename().string().rfind('.', 0) != 0)
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  if (files.empty())
    accel::detail::fail("streaming data: {} holds no file (hidden ones are skipped); put the "
                        "shard files there",
                        folder.string());
  return files;
}

/// Files of tokens, each `width` bytes little-endian (1: bytes of text, 2: uint16, 4: uint32),
/// in windows of `length` + 1 tokens.
class TokenFiles {
 public:
  /// The files of `folder` (shard_files()); refuses a width other than 1, 2 or 4, a length
  /// below 1 and a file that is not a whole number of tokens, naming it.
  TokenFiles(const std::filesystem::path& folder, int width, std::int64_t length)
      : files_(shard_files(folder)), width_(width), length_(length) {
    if (width != 1 && width != 2 && width != 4)
      accel::detail::fail("TokenFiles: a token of {} bytes; tokens are 1 (text), 2 (uint16) or 4 "
                          "(uint32) bytes",
                          width);
    if (length < 1)
      accel::detail::fail("TokenFiles: a window of {} tokens; it must be at least 1", length);
    for (const auto& file : files_)
      if (const auto bytes = std::filesystem::file_size(file);
          bytes % static_cast<unsigned>(width) != 0)
        accel::detail::fail("TokenFiles: {} holds {} bytes, not a whole number of {}-byte "
                            "tokens; give files of uint{} tokens, or the right width",
                            file.string(), bytes, width, 8 * width);
  }

  /// One shard per file.
  std::int64_t shard_count() const { return static_cast<std::int64_t>(files_.size()); }
  /// The files, by name: shard i is files()[i].
  const std::vector<std::filesystem::path>& files() const { return files_; }

  /// A reader of one file, mapped while it lives. Used by one thread at a time.
  class Reader {
   public:
    /// The file's next window, or nothing once fewer than `length` + 1 tokens are left.
    std::optional<TokenWindow> next() {
      const auto tokens = static_cast<std::int64_t>(file_->size()) / width_;
      const std::int64_t start = window_ * length_;
      if (start + length_ + 1 > tokens) return std::nullopt;
      ++window_;
      torch::Tensor window = torch::empty({length_ + 1}, torch::kInt64);
      auto* out = window.data_ptr<std::int64_t>();
      const std::uint8_t* in = file_->data() + start * width_;
      switch (width_) {
        case 1: widen<std::uint8_t>(in, out, length_ + 1); break;
        case 2: widen<std::uint16_t>(in, out, length_ + 1); break;
        default: widen<std::uint32_t>(in, out, length_ + 1); break;
      }
      file_->release_before(static_cast<std::size_t>((start + length_) * width_));
      return TokenWindow{window.narrow(0, 0, length_), window.narrow(0, 1, length_)};
    }

   private:
    friend class TokenFiles;
    // One loop per width, so that each token's copy has a size the compiler knows (a copy of
    // width_ bytes would be a call per token).
    template <class Token>
    static void widen(const std::uint8_t* in, std::int64_t* out, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i) {
        Token token;
        std::memcpy(&token, in + i * static_cast<std::int64_t>(sizeof(Token)),
                    sizeof(Token));  // little-endian hosts
        out[i] = token;
      }
    }
    std::shared_ptr<MappedFile> file_;
    std::int64_t width_ = 1, length_ = 1, window_ = 0;
  };

  /// A reader of file `shard` from window `position`.
  Reader open(std::int64_t shard, std::int64_t position) const {
    Reader reader;
    reader.file_ = std::make_shared<MappedFile>(files_.at(static_cast<std::size_t>(shard)));
    reader.width_ = width_;
    reader.length_ = length_;
    reader.window_ = position;
    return reader;
  }

 private:
  std::vector<std::filesystem::path> files_;
  std::int64_t width_;
  std::int64_t length_;
};

/// A folder of text files as bytes (tokens 0..255), in windows of `length` + 1 bytes.
class TextFiles : public TokenFiles {
 public:
  /// The files of `folder`, in windows of `length` + 1 bytes.
  TextFiles(const std::filesystem::path& folder, std::int64_t length)
      : TokenFiles(folder, 1, length) {}
};

}  // namespace accel::data
