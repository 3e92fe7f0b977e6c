// libFuzzer target for the safetensors header parser (state/safetensors_format.hpp, no torch).
// Any input either fails with accel::Error (a message starting "accel: ") or parses to a header
// whose invariants hold: the entries tile the data exactly, and serialize_header writes them
// back to a file that parses to the same entries and metadata. Anything else (another
// exception, a sanitizer report, a broken invariant) is a crash. Built and run by run-fuzz.sh.
#include <accel/state/safetensors_format.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace st = accel::state::safetensors;

#define FUZZ_CHECK(condition)                                                                 \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "invariant broken: %s (%s:%d)\n", #condition, __FILE__, __LINE__); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (false)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  st::Header header;
  try {
    header = st::parse_header(bytes, "fuzz");
  } catch (const accel::Error& error) {
    FUZZ_CHECK(std::string_view(error.what())
                   .starts_with("accel: 'fuzz' is not a valid safetensors file: "));
    return 0;
  }
  FUZZ_CHECK(8 + header.header_bytes + header.data_bytes == size);
  std::uint64_t at = 0;
  for (const st::Entry& entry : header.entries) {
    FUZZ_CHECK(entry.begin == at && entry.end >= entry.begin);
    const auto expected = st::detail::byte_size(entry.dtype, entry.shape);
    FUZZ_CHECK(expected && *expected == entry.bytes());
    FUZZ_CHECK(header.find(entry.name) == &entry);
    at = entry.end;
  }
  FUZZ_CHECK(at == header.data_bytes);

  std::string again = st::serialize_header(header.entries, header.metadata);
  FUZZ_CHECK(again.size() % 8 == 0);
  again.append(header.data_bytes, '\0');
  const st::Header reparsed = st::parse_header(std::as_bytes(std::span(again)), "reserialized");
  FUZZ_CHECK(reparsed.entries == header.entries);
  FUZZ_CHECK(reparsed.metadata == header.metadata);
  FUZZ_CHECK(reparsed.data_bytes == header.data_bytes);
  return 0;
}
