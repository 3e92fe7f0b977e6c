#include "text_files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace gpt {

TextFile::TextFile(std::filesystem::path path, std::string fix)
    : path_(std::move(path)), fix_(std::move(fix)) {
  // O_NONBLOCK: a FIFO put in place of a file opens at once (and is refused below) instead of
  // waiting for a writer; it changes nothing for a regular file.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail("cannot be opened", errno);
  struct stat status {};
  if (::fstat(fd_, &status) != 0) fail("cannot be examined", errno);
  if (!S_ISREG(status.st_mode)) {
    ::close(fd_);
    throw DataError(fmt::format("{} is not a regular file{}", path_.string(), fix_));
  }
  size_ = static_cast<std::int64_t>(status.st_size);
}

TextFile::~TextFile() {
  if (fd_ >= 0) ::close(fd_);
}

// The constructor's errors: it closes what it opened, as no destructor runs after it throws.
void TextFile::fail(const std::string& what, int error) const {
  if (fd_ >= 0) ::close(fd_);
  throw DataError(
      fmt::format("{} {}: {}{}", path_.string(), what, std::strerror(error), fix_));
}

std::int64_t TextFile::read(std::int64_t offset, char* out, std::int64_t count) const {
  std::int64_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd_, out + done, static_cast<std::size_t>(count - done),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw DataError(fmt::format("{} cannot be read: {}{}", path_.string(),
                                  std::strerror(errno), fix_));
    if (n == 0) break;
    done += n;
  }
  return done;
}

std::string TextFile::read_all() const {
  std::string bytes;
  constexpr std::int64_t kBlock = 1 << 16;
  for (std::int64_t n = kBlock; n == kBlock;) {
    const std::size_t at = bytes.size();
    bytes.resize(at + kBlock);
    n = read(static_cast<std::int64_t>(at), bytes.data() + at, kBlock);
    bytes.resize(at + static_cast<std::size_t>(n));
  }
  return bytes;
}

std::shared_ptr<const std::uint8_t> TextFile::map() const {
  const auto length = static_cast<std::size_t>(size_);
  void* at = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (at == MAP_FAILED) return nullptr;
  // Training reads windows at random places: no read-ahead around each one.
  ::madvise(at, length, MADV_RANDOM);
  return {static_cast<const std::uint8_t*>(at),
          [length](const std::uint8_t* data) {
            ::munmap(const_cast<std::uint8_t*>(data), length);
          }};
}

}  // namespace gpt
