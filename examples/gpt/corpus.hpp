// The gpt example's text: bytes (the model's vocabulary is the 256 byte values), split into a
// training stream and a validation stream by a fixed hash, so that the split is the same on every
// machine, rank and run, and does not depend on --seed.
//
//   - Default: the plain fortune files of Debian's `fortunes` package (kFortunesDir). Each file
//     holds fortunes separated by lines that hold only '%'. A fortune whose FNV-1a 64 hash of its
//     text falls in 1 of kValidationOneIn buckets goes to validation, the rest to training (about
//     5%); each stream is its fortunes, each followed by the line "%", as the files write them.
//     Identical fortunes (a few appear in two files) land in the same split.
//   - --text FILE or FOLDER: any bytes. The regular files of a folder (not hidden, not in
//     subfolders, in name order); each file is cut into chunks of kChunkBytes bytes (the last
//     one shorter), and a chunk's FNV-1a 64 hash picks its split the same way. The files are
//     read once, a block at a time, to hash the chunks, and mapped read-only: the two streams
//     are pieces of the mappings (byte_stream.hpp), so the process holds no copy of the text.
//   - --stream FOLDER: the folder's files (as --text lists them), one shard each, not read
//     ahead: accel::StreamingLoader reads their windows through accel::data::TextFiles as the
//     run goes. The last file by name is the validation split, whole; the others are the
//     training shards. Not hashed by chunks: that would read every file before the first step.
//
// Everything here throws DataError (text_files.hpp), whose text the example prints after
// "gpt: ", before it creates anything (no run folder, no checkpoint).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <accel/data/stream_files.hpp>

#include "byte_stream.hpp"
#include "text_files.hpp"

namespace gpt {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
inline constexpr std::uint64_t kValidationOneIn = 20;  // 1 in 20: about 5% to validation
inline constexpr std::int64_t kChunkBytes = 1024;      // --text: the unit of the split

// FNV-1a 64 over `bytes`.
std::uint64_t fnv1a64(std::string_view bytes);
// Whether a piece of text with this hash belongs to the validation split.
inline bool is_validation(std::uint64_t hash) { return hash % kValidationOneIn == 0; }

// --stream: the training shards, every file of the folder but the last (the validation file),
// which TextFiles lists last, so that leaving it out is lowering the count.
struct StreamShards {
  accel::data::TextFiles files;  // every file of the folder, by name
  std::int64_t shard_count() const { return files.shard_count() - 1; }
  accel::data::TextFiles::Reader open(std::int64_t shard, std::int64_t position) const {
    return files.open(shard, position);
  }
};

struct Corpus {
  ByteStream train;       // the training stream; empty with --stream
  ByteStream validation;  // the validation stream
  std::string source;     // what was read, for the log ("38 fortune files in ...")
  std::string unit;       // "fortunes" or "chunks": what the hash split
  std::int64_t train_pieces = 0, validation_pieces = 0;
  std::optional<StreamShards> stream;  // --stream: the training shards, read by the loader
  std::int64_t stream_bytes = 0;       // --stream: the training shards' bytes

  std::int64_t train_bytes() const { return stream ? stream_bytes : train.size(); }
};

// Reads and splits the text: `text` unset reads the fortunes. Both streams must hold at least
// `window` bytes (one training window: --seq + 1), or it throws DataError saying so.
Corpus load_corpus(const std::optional<std::filesystem::path>& text, std::int64_t window);

// --stream `folder`: at least 2 files; the last by name (the validation split) holds at least
// one window of `seq` + 1 bytes, and so does one of the others. Reads only the validation file
// (mapped); throws DataError otherwise.
Corpus load_stream_corpus(const std::filesystem::path& folder, std::int64_t seq);

}  // namespace gpt
