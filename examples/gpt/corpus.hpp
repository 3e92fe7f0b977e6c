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
//
// Everything here throws DataError (text_files.hpp), whose text the example prints after
// "gpt: ", before it creates anything (no run folder, no checkpoint).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

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

struct Corpus {
  ByteStream train;       // the training stream
  ByteStream validation;  // the validation stream
  std::string source;     // what was read, for the log ("38 fortune files in ...")
  std::string unit;       // "fortunes" or "chunks": what the hash split
  std::int64_t train_pieces = 0, validation_pieces = 0;
};

// Reads and splits the text: `text` unset reads the fortunes. Both streams must hold at least
// `window` bytes (one training window: --seq + 1), or it throws DataError saying so.
Corpus load_corpus(const std::optional<std::filesystem::path>& text, std::int64_t window);

}  // namespace gpt
