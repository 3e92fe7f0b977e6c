// The gpt example's text files, opened, read and mapped with the POSIX calls themselves, so that
// a failure names the file and the OS error (an std::ifstream reports neither), and so that a
// large --text file is mapped read-only instead of copied onto the heap: the page cache holds its
// bytes, shared and dropped under memory pressure, and the process keeps only the pages it reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

namespace gpt {

// Bad or unreadable text: the example prints it after "gpt: " and exits with status 2, before it
// creates anything (no run folder, no checkpoint).
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class TextFile {
 public:
  // Opens `path` for reading and checks, on the open file, that it is a regular file. Throws
  // DataError naming the path, the OS error and `fix` (what the user can do: "; give ...").
  TextFile(std::filesystem::path path, std::string fix);
  ~TextFile();
  TextFile(const TextFile&) = delete;
  TextFile& operator=(const TextFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The size the file system reports; 0 for the kernel's pseudo-files (/proc, /sys), which hold
  // bytes all the same: read_all() reads them.
  std::int64_t size() const { return size_; }

  // Up to `count` bytes at `offset`, fewer only at the end of the file. Throws DataError on a
  // failed read (EIO, a directory's EISDIR, ...), naming the path and the OS error.
  std::int64_t read(std::int64_t offset, char* out, std::int64_t count) const;
  // Everything up to the end of the file, whatever size() says.
  std::string read_all() const;
  // The first size() bytes, mapped read-only (PROT_READ, MAP_PRIVATE); the mapping lives as long
  // as the pointer or a copy of it, after the file is closed. Needs size() > 0. Null where the
  // file system cannot map the file: then read it.
  std::shared_ptr<const std::uint8_t> map() const;

 private:
  [[noreturn]] void fail(const std::string& what, int error) const;  // the constructor's

  std::filesystem::path path_;
  std::string fix_;
  int fd_ = -1;
  std::int64_t size_ = 0;
};

}  // namespace gpt
