#include "corpus.hpp"

#include <fmt/format.h>

#include <accel/error.hpp>

#include <algorithm>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace gpt {

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

namespace {

bool ends_with(const std::string& name, std::string_view suffix) {
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The files of `dir`, in name order: regular files that are not hidden. The fortunes folder
// also drops symlinks (the .u8 names point at the plain files) and the strfile indexes (.dat).
std::vector<fs::path> files_in(const fs::path& dir, bool fortunes) {
  std::vector<fs::path> files;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with('.')) continue;
    if (fortunes && (it->is_symlink(error) || ends_with(name, ".dat") || ends_with(name, ".u8")))
      continue;
    if (it->is_regular_file(error)) files.push_back(it->path());
  }
  if (error) throw DataError(fmt::format("{} cannot be listed: {}", dir.string(), error.message()));
  std::sort(files.begin(), files.end());
  return files;
}

bool blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos;
}

// Appends each fortune of `file` (its lines up to a line holding only '%') to its split.
void split_fortunes(const std::string& file, Corpus& corpus, std::string& train,
                    std::string& validation) {
  std::string fortune;
  auto flush = [&] {
    if (!blank(fortune)) {
      const bool held_out = is_validation(fnv1a64(fortune));
      (held_out ? validation : train) += fortune + "%\n";
      ++(held_out ? corpus.validation_pieces : corpus.train_pieces);
    }
    fortune.clear();
  };
  for (std::size_t at = 0; at < file.size();) {
    std::size_t end = file.find('\n', at);
    if (end == std::string::npos) end = file.size();
    std::string_view line(file.data() + at, end - at);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line == "%")
      flush();
    else
      (fortune += std::string(file.data() + at, end - at)) += '\n';
    at = end + 1;
  }
  flush();
}

// Appends each chunk of `bytes` to its split's stream. `bytes` starts at a chunk boundary and
// holds, read into a buffer, what `at` points to in memory that `owner` keeps: the streams keep
// pointers into that memory (the file's mapping), not the buffer.
void split_chunks(std::string_view bytes, const std::shared_ptr<const void>& owner,
                  const std::uint8_t* at, Corpus& corpus) {
  for (std::size_t from = 0; from < bytes.size(); from += kChunkBytes) {
    const std::size_t size = std::min<std::size_t>(kChunkBytes, bytes.size() - from);
    const bool held_out = is_validation(fnv1a64(bytes.substr(from, size)));
    (held_out ? corpus.validation : corpus.train)
        .append(owner, at + from, static_cast<std::int64_t>(size));
    ++(held_out ? corpus.validation_pieces : corpus.train_pieces);
  }
}

// A --text file, split by chunks. A file with a size is hashed a block at a time through read()
// (which reports an unreadable file as an error, where a mapping would raise SIGBUS) and mapped
// for the streams. One whose size reads 0 (a pseudo-file of /proc), or that its file system
// cannot map (most of /sys), is read whole onto the heap instead.
void split_file(const fs::path& path, const std::string& fix, Corpus& corpus) {
  const TextFile file(path, fix);
  const std::shared_ptr<const std::uint8_t> mapping = file.size() > 0 ? file.map() : nullptr;
  if (mapping == nullptr) {
    auto bytes = std::make_shared<const std::string>(file.read_all());
    split_chunks(*bytes, bytes, reinterpret_cast<const std::uint8_t*>(bytes->data()), corpus);
    return;
  }
  constexpr std::int64_t kBlock = 1024 * kChunkBytes;  // whole chunks
  std::string block(static_cast<std::size_t>(kBlock), '\0');
  for (std::int64_t at = 0; at < file.size(); at += kBlock) {
    const std::int64_t want = std::min(kBlock, file.size() - at);
    if (file.read(at, block.data(), want) != want)
      throw DataError(fmt::format("{} changed while it was read: it ends before its {} bytes{}",
                                  path.string(), file.size(), fix));
    split_chunks(std::string_view(block.data(), static_cast<std::size_t>(want)), mapping,
                 mapping.get() + at, corpus);
  }
}

}  // namespace

Corpus load_corpus(const std::optional<fs::path>& text, std::int64_t window) {
  Corpus corpus;
  std::error_code error;
  if (!text) {
    const fs::path dir = kFortunesDir;
    const std::string fix =
        "; install the Debian package fortunes (scripts/setup-debian.sh does), or train on "
        "other text with --text PATH";
    if (!fs::is_directory(dir, error))
      throw DataError(fmt::format("{} does not exist{}", dir.string(), fix));
    const std::vector<fs::path> files = files_in(dir, /*fortunes=*/true);
    std::string train, validation;
    for (const fs::path& file : files)
      split_fortunes(TextFile(file, fix).read_all(), corpus, train, validation);
    for (auto [bytes, stream] : {std::pair{&train, &corpus.train},
                                 std::pair{&validation, &corpus.validation}}) {
      auto owned = std::make_shared<const std::string>(std::move(*bytes));
      stream->append(owned, reinterpret_cast<const std::uint8_t*>(owned->data()),
                     static_cast<std::int64_t>(owned->size()));
    }
    if (corpus.train_pieces + corpus.validation_pieces == 0)
      throw DataError(fmt::format("{} holds no fortunes ({} fortune files){}", dir.string(),
                                  files.size(), fix));
    corpus.source = fmt::format("{} fortune files in {}", files.size(), dir.string());
    corpus.unit = "fortunes";
  } else {
    const fs::path& path = *text;
    const std::string fix = "; give --text a text file or a folder of text files";
    const fs::file_status status = fs::status(path, error);
    if (!fs::exists(status))
      throw DataError(fmt::format("--text {} does not exist{}", path.string(), fix));
    std::vector<fs::path> files;
    if (fs::is_directory(status))
      files = files_in(path, /*fortunes=*/false);
    else if (fs::is_regular_file(status))
      files.push_back(path);
    else
      throw DataError(fmt::format("--text {} is neither a file nor a folder{}", path.string(), fix));
    for (const fs::path& file : files) split_file(file, fix, corpus);
    if (corpus.train.size() + corpus.validation.size() == 0)
      throw DataError(fmt::format("--text {} is empty{}{}", path.string(),
                                  fs::is_directory(status)
                                      ? fmt::format(" ({} files, no bytes)", files.size())
                                      : std::string(),
                                  fix));
    corpus.source = fs::is_directory(status)
                        ? fmt::format("{} files in {}", files.size(), path.string())
                        : path.string();
    corpus.unit = "chunks";
  }
  auto check = [&](const ByteStream& stream, std::string_view split) {
    if (stream.size() < window)
      throw DataError(fmt::format(
          "the {} split of {} holds {} bytes ({} {}), fewer than one window of --seq + 1 = {} "
          "bytes; give more text or a smaller --seq",
          split, corpus.source, stream.size(),
          split == "training" ? corpus.train_pieces : corpus.validation_pieces, corpus.unit,
          window));
  };
  check(corpus.train, "training");
  check(corpus.validation, "validation");
  return corpus;
}

Corpus load_stream_corpus(const fs::path& folder, std::int64_t seq) {
  const std::string fix = "; give --stream a folder of at least 2 text files (the last by name is "
                          "the validation split, the others are streamed for training)";
  std::error_code error;
  if (!fs::is_directory(folder, error))
    throw DataError(fmt::format("--stream {} is not a folder{}", folder.string(), fix));
  Corpus corpus;
  try {
    // Lists the files and checks their sizes; opens none (the loader's readers do, in turn).
    corpus.stream.emplace(StreamShards{accel::data::TextFiles(folder, seq)});
  } catch (const accel::Error& failed) {
    throw DataError(fmt::format("--stream {}: {}{}", folder.string(),
                                accel::detail::without_accel_prefix(failed.what()), fix));
  } catch (const fs::filesystem_error& failed) {
    throw DataError(fmt::format("--stream {}: {}{}", folder.string(), failed.what(), fix));
  }
  const std::vector<fs::path>& files = corpus.stream->files.files();
  if (files.size() < 2)
    throw DataError(fmt::format("--stream {} holds {} file ({}); it needs at least 2: the last by "
                                "name is the validation split, the others are streamed for "
                                "training",
                                folder.string(), files.size(), files.front().filename().string()));
  // The validation file, mapped (or read, where its file system cannot map it) as --text's are.
  const TextFile last(files.back(), fix);
  if (const auto mapping = last.size() > 0 ? last.map() : nullptr) {
    corpus.validation.append(mapping, mapping.get(), last.size());
  } else {
    auto bytes = std::make_shared<const std::string>(last.read_all());
    corpus.validation.append(bytes, reinterpret_cast<const std::uint8_t*>(bytes->data()),
                             static_cast<std::int64_t>(bytes->size()));
  }
  // A training file yields (bytes - 1) / seq windows: at least one of them must yield one.
  std::int64_t windows = 0;
  for (std::size_t i = 0; i + 1 < files.size(); ++i) {
    const auto bytes = static_cast<std::int64_t>(fs::file_size(files[i], error));
    if (error)
      throw DataError(
          fmt::format("{} cannot be read: {}{}", files[i].string(), error.message(), fix));
    corpus.stream_bytes += bytes;
    windows += bytes > 0 ? (bytes - 1) / seq : 0;
  }
  corpus.source = fmt::format("{} files in {}, streamed", files.size(), folder.string());
  corpus.unit = "files";
  corpus.train_pieces = static_cast<std::int64_t>(files.size()) - 1;
  corpus.validation_pieces = 1;
  if (windows == 0)
    throw DataError(fmt::format(
        "the {} training files of --stream {} hold {} bytes, no file a window of --seq + 1 = {} "
        "bytes; give longer files or a smaller --seq",
        corpus.train_pieces, folder.string(), corpus.stream_bytes, seq + 1));
  if (corpus.validation.size() < seq + 1)
    throw DataError(fmt::format(
        "the validation file of --stream {} ({}, the last by name) holds {} bytes, fewer than one "
        "window of --seq + 1 = {} bytes; give it more text or a smaller --seq",
        folder.string(), files.back().filename().string(), corpus.validation.size(), seq + 1));
  return corpus;
}

}  // namespace gpt
