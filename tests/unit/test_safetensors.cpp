// safetensors (state/safetensors_format.hpp, state/safetensors.hpp) and the weights folder
// (state/weights.hpp): round trips of every dtype, files byte-identical to the reference
// writer's, every rule of the format refused with a message that says which, and both layouts
// of a weights folder.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <accel/state/weights.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_safetensors {

namespace {

namespace st = accel::state::safetensors;
using Named = std::vector<std::pair<std::string, torch::Tensor>>;

// A file: the 8-byte little-endian N, the header text, the data.
std::string file_of(const std::string& header, const std::string& data = "",
                    std::optional<std::uint64_t> n = std::nullopt) {
  const std::uint64_t length = n.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>(length >> (8 * i) & 0xff);
  return out + header + data;
}

// What parse_header says about `bytes`, or "accepted".
std::string rejection(const std::string& bytes, st::Limits limits = {}) {
  try {
    (void)st::parse_header(std::as_bytes(std::span(bytes)), "test.safetensors", limits);
    return "accepted";
  } catch (const accel::Error& error) {
    return error.what();
  }
}

// Whether the message is accel's, names the file and contains each of `words`.
bool says(const std::string& message, std::initializer_list<std::string_view> words) {
  bool ok = message.starts_with("accel: 'test.safetensors' is not a valid safetensors file: ");
  for (const auto word : words) ok = ok && message.find(word) != std::string::npos;
  if (!ok) MESSAGE("message: ", message);
  return ok;
}

// One entry's JSON.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

std::string bytes_of(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

std::string little_endian_floats(std::initializer_list<float> values) {
  std::string out;
  for (const float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

struct TemporaryFolder {
  std::filesystem::path path;
  TemporaryFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "accel-st-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TemporaryFolder() { std::filesystem::remove_all(path); }
};

std::string error_of(const auto& op) {
  try {
    op();
    return "no error";
  } catch (const accel::Error& error) {
    return error.what();
  }
}

bool contains(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("'", part, "' is not in: ", text);
  return false;
}

}  // namespace

// --- Round trips -----------------------------------------------------------------------------

TEST_CASE("safetensors: every dtype this libtorch has round-trips, with 0-dim and empty shapes") {
  torch::manual_seed(3);
  const std::vector<std::vector<std::int64_t>> shapes = {{},     {0},       {5},
                                                         {2, 3}, {2, 0, 4}, {1, 1, 3}};
  Named tensors;
  for (const st::Dtype dtype : st::all_dtypes) {
    const auto type = st::to_scalar_type(dtype);
    if (!type) continue;  // F8 before libtorch 2.1
    for (std::size_t s = 0; s < shapes.size(); ++s) {
      torch::Tensor t = torch::randn(shapes[s]) * 10;
      t = dtype == st::Dtype::BOOL ? t > 0 : t.to(*type);
      tensors.emplace_back(fmt::format("{}.{}", st::name(dtype), s), t);
    }
  }
  const std::string bytes = st::serialize(tensors, {{"format", "pt"}, {"note", "é\n\"q\""}});
  const st::File file = st::File::from_bytes(bytes, "round trip");
  CHECK(file.header().entries.size() == tensors.size());
  CHECK(file.header().metadata ==
        std::map<std::string, std::string>{{"format", "pt"}, {"note", "é\n\"q\""}});
  CHECK(file.header().header_bytes % 8 == 0);
  for (const auto& [name, original] : tensors) {
    const torch::Tensor back = file.tensor(name);
    CHECK(accel_test::dtype_name(back) == accel_test::dtype_name(original));
    CHECK(back.sizes().vec() == original.sizes().vec());
    CHECK(back.is_contiguous());
    CHECK(bytes_of(back) == bytes_of(original));  // bitwise, also where == is not defined (F8)
  }
}

TEST_CASE("safetensors: tensors are written largest dtype first, then by name, each aligned") {
  const Named tensors = {{"u", torch::zeros({3}, torch::kByte)},
                         {"b", torch::zeros({1}, torch::kFloat)},
                         {"a", torch::zeros({2}, torch::kFloat)},
                         {"d", torch::zeros({1}, torch::kDouble)},
                         {"h", torch::zeros({1}, torch::kHalf)}};
  const st::File file = st::File::from_bytes(st::serialize(tensors), "order");
  std::vector<std::string> order;
  for (const auto& e : file.header().entries) {
    order.push_back(e.name);
    CHECK((8 + file.header().header_bytes + e.begin) % st::element_size(e.dtype) == 0);
  }
  CHECK(order == std::vector<std::string>{"d", "a", "b", "h", "u"});
}

TEST_CASE("safetensors: non-contiguous and autograd tensors are written as their values") {
  const torch::Tensor base = torch::arange(12, torch::kFloat).reshape({3, 4});
  const torch::Tensor leaf = torch::ones({2}, torch::requires_grad());
  const Named tensors = {
      {"t", base.t()}, {"slice", base.index({torch::indexing::Slice(), 1})}, {"leaf", leaf}};
  const st::File file = st::File::from_bytes(st::serialize(tensors), "views");
  CHECK(torch::equal(file.tensor("t"), base.t()));
  CHECK(torch::equal(file.tensor("slice"), base.index({torch::indexing::Slice(), 1})));
  CHECK(torch::equal(file.tensor("leaf"), torch::ones({2})));
  CHECK_FALSE(file.tensor("leaf").requires_grad());
}

TEST_CASE("safetensors: write_file writes what serialize returns, and File::read reads it") {
  TemporaryFolder folder;
  const Named tensors = {
      {"w", torch::randn({4, 3})}, {"i", torch::arange(5)}, {"t", torch::randn({3, 2}).t()}};
  const auto path = folder.path / "x.safetensors";
  st::write_file(path, tensors, {{"k", "v"}});
  std::ifstream in(path, std::ios::binary);
  const std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(on_disk == st::serialize(tensors, {{"k", "v"}}));
  const st::File file = st::File::read(path);
  CHECK(file.source() == path.string());
  CHECK(torch::equal(file.tensor("w"), tensors[0].second));
  CHECK(file.header().metadata.at("k") == "v");
}

// --- The reference writer's bytes ------------------------------------------------------------
// Each expected file is built here from the spec: N, the compact JSON with __metadata__ first
// and the fields in the order dtype, shape, data_offsets, spaces up to a multiple of 8, the
// data. The first four are the files the reference implementation's own tests expect of it.

TEST_CASE("safetensors: a 2x2 F32 tensor is written byte for byte as the reference writes it") {
  const std::string json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
  CHECK(json.size() == 57);
  const std::string expected =
      file_of(json + std::string(7, ' '), little_endian_floats({1, 2, 3, 4}));
  CHECK(expected.substr(0, 8) == std::string("\x40\0\0\0\0\0\0\0", 8));
  const torch::Tensor a = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2});
  CHECK(st::serialize({{"a", a}}) == expected);
  const st::File file = st::File::from_bytes(expected, "reference");
  CHECK(torch::equal(file.tensor("a"), a));
  CHECK(file.header().header_bytes == 64);
  CHECK(file.header().data_bytes == 16);
}

TEST_CASE("safetensors: the reference implementation's own expected files, read and written") {
  const std::string data = little_endian_floats({0, 1, 2, 3, 4, 5});
  const torch::Tensor six = torch::arange(6, torch::kFloat);
  SUBCASE("attn.0 [1,2,3]: 64 bytes of JSON, no padding") {
    const std::string expected =
        file_of(R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})", data);
    CHECK(expected.size() == 8 + 64 + 24);
    CHECK(st::serialize({{"attn.0", six.reshape({1, 2, 3})}}) == expected);
    CHECK(torch::equal(st::File::from_bytes(expected, "ref").tensor("attn.0"),
                       six.reshape({1, 2, 3})));
  }
  SUBCASE("attn0 [1,1,2,3]: padded with 7 spaces to 72") {
    const std::string expected = file_of(
        std::string(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})") +
            "       ",
        data);
    CHECK(expected.substr(0, 1) == "\x48");
    CHECK(st::serialize({{"attn0", six.reshape({1, 1, 2, 3})}}) == expected);
    CHECK(st::File::from_bytes(expected, "ref").header().header_bytes == 72);
  }
  SUBCASE("no tensors: {} and 6 spaces") {
    const std::string expected = file_of("{}      ");
    CHECK(st::serialize({}) == expected);
    CHECK(st::File::from_bytes(expected, "ref").header().entries.empty());
  }
  SUBCASE("no tensors, metadata {framework: pt}: 35 bytes of JSON and 5 spaces") {
    const std::string expected =
        file_of(R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '));
    CHECK(st::serialize({}, {{"framework", "pt"}}) == expected);
    CHECK(st::File::from_bytes(expected, "ref").header().metadata.at("framework") == "pt");
  }
}

TEST_CASE(
    "safetensors: files of other writers are read: any key order, no padding, empty tensors") {
  // Entries out of offset order, an empty tensor, a 0-dim one, no padding at all.
  const std::string json = "{" + entry("z", "I64", "[]", "[0,8]") + "," +
                           entry("e", "F32", "[0,3]", "[8,8]") + "," +
                           entry("b", "U8", "[2]", "[8,10]") + "}";
  std::string data(10, '\0');
  data[0] = 7;
  data[8] = 1;
  data[9] = 2;
  const st::File file = st::File::from_bytes(file_of(json, data), "other");
  CHECK(file.tensor("z").dim() == 0);
  CHECK(file.tensor("z").item<std::int64_t>() == 7);
  CHECK(file.tensor("e").sizes().vec() == std::vector<std::int64_t>{0, 3});
  CHECK(torch::equal(file.tensor("b"), torch::tensor({1, 2}, torch::kByte)));
  CHECK(file.header().entries.front().name == "z");
  CHECK(file.header().find("b")->begin == 8);
  CHECK(file.header().find("nope") == nullptr);
}

// --- The torch layer's errors ----------------------------------------------------------------

TEST_CASE("safetensors: a missing tensor is named, with some of those the file has") {
  const st::File file = st::File::from_bytes(
      st::serialize({{"w", torch::ones({1})}, {"b", torch::ones({1})}}), "m.safetensors");
  const std::string message = error_of([&] { (void)file.tensor("bias"); });
  CHECK(contains(message,
                 "accel: 'm.safetensors' has no tensor \"bias\"; it has 2 tensors: \"b\", \"w\""));
}

TEST_CASE(
    "safetensors: writing refuses duplicate names, undefined tensors and dtypes the format lacks") {
  CHECK(contains(error_of([] {
                   (void)st::serialize({{"a", torch::ones({1})}, {"a", torch::ones({2})}});
                 }),
                 "two tensors are named \"a\""));
  CHECK(contains(error_of([] {
                   (void)st::serialize({{"a", torch::Tensor()}});
                 }),
                 "\"a\" is undefined"));
  CHECK(contains(error_of([] {
                   (void)st::serialize({{"c", torch::ones({1}, torch::kComplexFloat)}});
                 }),
                 "tensor \"c\" is ComplexFloat"));
  CHECK(contains(error_of([] {
                   (void)st::serialize({{"__metadata__", torch::ones({1})}});
                 }),
                 "may not be named __metadata__"));
  CHECK(contains(error_of([] {
                   (void)st::serialize({{std::string("\xff"), torch::ones({1})}});
                 }),
                 "not valid UTF-8"));
  TemporaryFolder folder;
  CHECK(contains(
      error_of([&] {
        st::write_file(folder.path / "no" / "x", {{"a", torch::ones({1})}});
      }),
      "cannot open '" + (folder.path / "no" / "x").string() + "': No such file or directory"));
}

TEST_CASE("safetensors: reading refuses a path that is missing or a folder, naming it") {
  TemporaryFolder folder;
  CHECK(
      contains(error_of([&] { (void)st::File::read(folder.path / "none"); }),
               "cannot open '" + (folder.path / "none").string() + "': No such file or directory"));
  CHECK(contains(error_of([&] { (void)st::File::read(folder.path); }), "is not a regular file"));
}

TEST_CASE("safetensors: a BOOL element other than 0 or 1 is refused") {
  const std::string bytes =
      file_of("{" + entry("m", "BOOL", "[2]", "[0,2]") + "}", std::string("\x01\x02", 2));
  const st::File file = st::File::from_bytes(bytes, "b.safetensors");
  CHECK(contains(error_of([&] { (void)file.tensor("m"); }),
                 "tensor \"m\" is BOOL, but its element 1 is byte 0x02"));
}

TEST_CASE("safetensors: an F8 tensor is read where libtorch has float8, else refused by name") {
  const std::string bytes = file_of("{" + entry("f8", "F8_E4M3", "[2]", "[0,2]") + "," +
                                        entry("g8", "F8_E5M2", "[1]", "[2,3]") + "}",
                                    std::string("\x38\x40\x3c", 3));  // e4m3 1, 2; e5m2 1
  const st::File file = st::File::from_bytes(bytes, "f8.safetensors");
  if (accel::detail::has_float8) {
    CHECK(torch::equal(file.tensor("f8").to(torch::kFloat), torch::tensor({1.0f, 2.0f})));
    CHECK(torch::equal(file.tensor("g8").to(torch::kFloat), torch::tensor({1.0f})));
  } else {
    CHECK(contains(error_of([&] { (void)file.tensor("f8"); }),
                   fmt::format("'f8.safetensors': tensor \"f8\" is F8_E4M3, which libtorch {} has "
                               "no dtype for (float8 needs libtorch 2.1 or newer)",
                               TORCH_VERSION)));
  }
}

// --- Every rule of the format ----------------------------------------------------------------

TEST_CASE(
    "safetensors: the header length N: too short, over the limit, past the end, overflow, empty") {
  CHECK(says(rejection(std::string("\x08\0\0\0\0", 5)), {"it is 5 bytes, too short"}));
  CHECK(says(rejection(file_of("{}", "", 100'000'001)),
             {"N = 100000001 is over the limit of 100000000"}));
  CHECK(
      says(rejection(file_of("{}      "), st::Limits{4}), {"N = 8 is over the limit of 4 bytes"}));
  CHECK(says(rejection(file_of("{}", "", 100)),
             {"N = 100 runs past the end of the file (10 bytes, so N can be at most 2)"}));
  const std::uint64_t huge = std::numeric_limits<std::uint64_t>::max();
  CHECK(says(rejection(file_of("{}", "", huge)), {"N = 18446744073709551615 is over the limit"}));
  // With no limit, 8 + N would wrap around to 7: it must still be refused as past the end.
  CHECK(says(rejection(file_of("{}", "", huge), st::Limits{huge}),
             {"N = 18446744073709551615 runs past the end"}));
  CHECK(says(rejection(file_of("")), {"is empty (N = 0)"}));
  CHECK(rejection(file_of("{}")) == "accepted");
}

TEST_CASE("safetensors: from a file's first bytes, a head shorter than 8 + N is the caller's error") {
  // Nothing past the bytes given is read: the file may hold the header, the head does not.
  const std::string head = file_of("{}", "", 100);
  CHECK(error_of([&] {
          (void)st::parse_header(std::as_bytes(std::span(head)), 1000, "test.safetensors");
        }) == "accel: parse_header('test.safetensors'): the header length N = 100 needs the "
              "file's first 108 bytes, and only 10 were given; pass at least the 8-byte length "
              "and the header it gives");
  const std::string header = "{" + entry("a", "U8", "[990]", "[0,990]") + "}";
  const std::string whole = file_of(header, std::string(990, '\0'));
  CHECK(st::parse_header(std::as_bytes(std::span(whole).first(8 + header.size())), whole.size(),
                         "test.safetensors")
            .entries.size() == 1);
}

TEST_CASE("safetensors: the header must be a JSON object, valid UTF-8, padded with spaces only") {
  CHECK(says(rejection(file_of("{\"a\":")), {"not valid JSON", "unexpected end of input"}));
  CHECK(says(rejection(file_of("{\"a\xff\":1}")), {"not valid JSON", "UTF-8", "\\xff"}));
  // Found by the fuzzer: nlohmann/json throws out_of_range, not parse_error, for this one.
  CHECK(says(rejection(file_of(R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})")),
             {"not valid JSON", "number overflow parsing '1e400'"}));
  CHECK(says(rejection(file_of("[1,2]")),
             {"begins with byte 0x5b", "JSON object", "must begin with '{'"}));
  CHECK(says(rejection(file_of(" {}")), {"begins with byte 0x20"}));
  CHECK(says(rejection(file_of("{}x")),
             {"unexpected byte 0x78 after the JSON object, at byte 2", "only spaces"}));
  CHECK(says(rejection(file_of("{} {}")), {"unexpected byte 0x7b after the JSON object"}));
  CHECK(says(rejection(file_of("{}\n   ")),
             {"unexpected byte 0x0a after the JSON object, at byte 2"}));
  CHECK(says(rejection(file_of("{}\t")), {"unexpected byte 0x09"}));
  CHECK(says(rejection(file_of(std::string("{}\0", 3))),
             {"unexpected byte 0x00 after the JSON object"}));
  CHECK(says(rejection(file_of("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}")),
             {"nests deeper than 64 levels"}));
  CHECK(rejection(file_of("{}" + std::string(100, ' '))) == "accepted");
}

TEST_CASE("safetensors: a name, or a key of an entry, appearing twice is refused") {
  const std::string a = entry("a", "F32", "[1]", "[0,4]");
  CHECK(says(rejection(file_of("{" + a + "," + entry("a", "F32", "[1]", "[4,8]") + "}",
                               std::string(8, '\0'))),
             {"key \"a\" appears twice; each tensor name"}));
  CHECK(says(
      rejection(file_of(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                        std::string(4, '\0'))),
      {"key \"dtype\" appears twice in the object of \"a\""}));
  CHECK(says(rejection(file_of(R"({"__metadata__":{"k":"1","k":"2"}})")),
             {"key \"k\" appears twice"}));
}

TEST_CASE("safetensors: __metadata__ must be an object of string to string") {
  CHECK(says(rejection(file_of(R"({"__metadata__":{"k":1}})")),
             {"__metadata__ \"k\" is an integer (1); metadata values must be strings"}));
  CHECK(says(rejection(file_of(R"({"__metadata__":{"k":null}})")), {"is null", "must be strings"}));
  CHECK(says(rejection(file_of(R"({"__metadata__":{"k":{"x":"y"}}})")),
             {"is an object", "must be strings"}));
  CHECK(says(rejection(file_of(R"({"__metadata__":["k"]})")),
             {"__metadata__ is an array", "must be an object"}));
  CHECK(rejection(file_of(R"({"__metadata__":{}})")) == "accepted");
}

TEST_CASE("safetensors: an entry is an object with exactly dtype, shape and data_offsets") {
  CHECK(says(rejection(file_of(R"({"a":5})")),
             {"tensor \"a\" is an integer (5); a tensor is an object"}));
  CHECK(
      says(rejection(file_of(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"foo":1}})")),
           {"tensor \"a\" has an unexpected field \"foo\""}));
  CHECK(says(rejection(file_of(R"({"a":{"dtype":"F32","data_offsets":[0,0]}})")),
             {"tensor \"a\" has no \"shape\""}));
  CHECK(says(rejection(file_of(R"({"a":{"shape":[0],"data_offsets":[0,0]}})")),
             {"has no \"dtype\""}));
  CHECK(says(rejection(file_of(R"({"a":{"dtype":"F32","shape":[0]}})")),
             {"has no \"data_offsets\""}));
}

TEST_CASE("safetensors: dtype must be a known name") {
  CHECK(
      says(rejection(file_of("{" + entry("a", "F31", "[1]", "[0,4]") + "}", std::string(4, '\0'))),
           {"tensor \"a\": unknown dtype \"F31\"; accel reads F64, F32, F16, BF16"}));
  CHECK(
      says(rejection(file_of("{" + entry("a", "f32", "[1]", "[0,4]") + "}", std::string(4, '\0'))),
           {"unknown dtype \"f32\""}));
  CHECK(says(rejection(file_of(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})",
                               std::string(4, '\0'))),
             {"unknown dtype 4"}));
  CHECK(
      says(rejection(file_of("{" + entry("a", "U32", "[1]", "[0,4]") + "}", std::string(4, '\0'))),
           {"unknown dtype \"U32\""}));
}

TEST_CASE("safetensors: shape must be an array of non-negative integers") {
  const auto with_shape = [](const std::string& shape) {
    return rejection(
        file_of(R"({"a":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,0]}})"));
  };
  CHECK(says(with_shape("[2,-1]"), {"tensor \"a\": shape dimension 1 is -1 (negative)"}));
  CHECK(says(with_shape("[2.5]"), {"shape dimension 0 is 2.5, a non-integer number"}));
  CHECK(says(with_shape("[1e2]"), {"shape dimension 0 is 100.0, a non-integer number"}));
  CHECK(says(with_shape("[\"2\"]"), {"shape dimension 0 is \"2\", a string"}));
  CHECK(says(with_shape("[[2]]"), {"shape dimension 0 is [2], an array"}));
  CHECK(says(with_shape("\"2x2\""), {"shape is a string (\"2x2\"), not an array"}));
  CHECK(says(with_shape("{}"), {"shape is an object ({}), not an array"}));
  CHECK(says(with_shape("[0,9223372036854775808]"),
             {"shape dimension 1 is 9223372036854775808 (too large)"}));
  CHECK(says(with_shape("[0,18446744073709551616]"),
             {"shape dimension 1 is 1.8446744073709552e+19"}));
  CHECK(with_shape("[0,9223372036854775807]") == "accepted");
}

TEST_CASE("safetensors: data_offsets must be [begin, end], unsigned, begin <= end") {
  const auto with_offsets = [](const std::string& offsets) {
    return rejection(file_of(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":)" + offsets + "}}",
                             std::string(4, '\0')));
  };
  CHECK(says(with_offsets("[0]"), {"tensor \"a\": data_offsets is [0]; it must be [begin, end]"}));
  CHECK(says(with_offsets("[0,4,4]"), {"data_offsets is [0,4,4]; it must be [begin, end]"}));
  CHECK(says(with_offsets("\"0-4\""), {"data_offsets is \"0-4\""}));
  CHECK(says(with_offsets("[4,0]"), {"data_offsets [4, 0] begin after they end"}));
  CHECK(says(with_offsets("[0,\"4\"]"), {"data_offsets [0,\"4\"] are not unsigned integers"}));
  CHECK(says(with_offsets("[-1,3]"), {"data_offsets [-1,3] are not unsigned integers"}));
  CHECK(says(with_offsets("[0,4.0]"), {"data_offsets [0,4.0] are not unsigned integers"}));
  CHECK(with_offsets("[0,4]") == "accepted");
}

TEST_CASE("safetensors: the size of shape x dtype must equal end - begin, without overflow") {
  CHECK(says(
      rejection(file_of("{" + entry("a", "F32", "[2,2]", "[0,12]") + "}", std::string(12, '\0'))),
      {"tensor \"a\": shape [2, 2] of F32 is 16 bytes (4 per element), but data_offsets [0, 12] "
       "span 12 bytes"}));
  // 2^32 x 2^32 x 4 wraps to 0 in 64 bits: the reference refuses it as an overflow, and so do we.
  CHECK(says(
      rejection(file_of("{" + entry("a", "F32", "[4294967296,4294967296]", "[0,0]") + "}")),
      {"shape [4294967296, 4294967296] of F32 has more than 2^64 bytes (the size overflows)"}));
  CHECK(says(rejection(file_of("{" + entry("a", "F64", "[2305843009213693952]", "[0,0]") + "}")),
             {"of F64 has more than 2^64 bytes"}));
  // An overflow before a 0 dimension is still an overflow (as in the reference).
  CHECK(says(rejection(file_of("{" + entry("a", "U8", "[4294967296,4294967296,0]", "[0,0]") + "}")),
             {"the size overflows"}));
  CHECK(rejection(file_of("{" + entry("a", "U8", "[0,4294967296,4294967296]", "[0,0]") + "}")) ==
        "accepted");
}

TEST_CASE(
    "safetensors: the tensors must tile the data exactly: from 0, no overlap, no hole, no tail") {
  const auto two = [](const std::string& a, const std::string& b, std::size_t data) {
    return rejection(
        file_of("{" + entry("a", "U8", "[8]", a) + "," + entry("b", "U8", "[8]", b) + "}",
                std::string(data, '\0')));
  };
  CHECK(two("[0,8]", "[8,16]", 16) == "accepted");
  CHECK(two("[8,16]", "[0,8]", 16) == "accepted");  // any key order
  CHECK(says(two("[0,8]", "[4,12]", 12),
             {"tensor \"b\" (data_offsets [4, 12]) overlaps tensor \"a\" (data_offsets [0, 8])"}));
  CHECK(says(two("[0,8]", "[0,8]", 8), {"overlaps"}));
  CHECK(
      says(two("[0,8]", "[12,20]", 20), {"a hole: bytes [8, 12) of the data belong to no tensor"}));
  CHECK(says(two("[4,12]", "[12,20]", 20),
             {"the first tensor \"a\" begins at data offset 4, not 0"}));
  CHECK(says(two("[0,8]", "[8,16]", 20),
             {"4 trailing bytes: the data is 20 bytes but the tensors end at 16"}));
  CHECK(says(two("[0,8]", "[8,16]", 12),
             {"tensor \"b\" ends at data offset 16, past the end of the data (12 bytes)"}));
  CHECK(says(rejection(file_of("{}", "xyz")), {"3 trailing bytes: the header names no tensor"}));
  // An empty tensor may sit anywhere between two others, but not inside one.
  const std::string empty = entry("e", "F32", "[0]", "[8,8]");
  CHECK(rejection(file_of("{" + entry("a", "U8", "[8]", "[0,8]") + "," + empty + "}",
                          std::string(8, '\0'))) == "accepted");
  CHECK(says(rejection(file_of("{" + entry("a", "U8", "[8]", "[0,8]") + "," +
                                   entry("e", "F32", "[0]", "[4,4]") + "}",
                               std::string(8, '\0'))),
             {"tensor \"e\" (data_offsets [4, 4]) overlaps"}));
}

TEST_CASE("safetensors: offsets spanning more bytes than the shape, or a byte past the data") {
  CHECK(says(
      rejection(file_of("{" + entry("a", "F32", "[2]", "[0,12]") + "}", std::string(12, '\0'))),
      {"tensor \"a\": shape [2] of F32 is 8 bytes (4 per element), but data_offsets [0, 12] "
       "span 12 bytes"}));
  CHECK(says(rejection(file_of("{" + entry("a", "U8", "[8]", "[0,8]") + "," +
                                   entry("b", "U8", "[8]", "[8,16]") + "}",
                               std::string(15, '\0'))),
             {"tensor \"b\" ends at data offset 16, past the end of the data (15 bytes)"}));
}

TEST_CASE("safetensors: an untrusted name is quoted and cut short in messages") {
  const std::string name(1000, 'n');
  const std::string message = rejection(
      file_of("{" + entry(name + "\\n", "F31", "[1]", "[0,4]") + "}", std::string(4, '\0')));
  CHECK(says(message, {"tensor \"nnnn", "nnn\"...: unknown dtype"}));
  CHECK(message.size() < 300);
}

TEST_CASE("safetensors: serialize_header refuses what it cannot write as a valid file") {
  const auto error = [](std::vector<st::Entry> entries) {
    return error_of([&] { (void)st::serialize_header(entries, {}); });
  };
  CHECK(contains(error({{"a", st::Dtype::F32, {2}, 0, 4}}),
                 "cannot write a safetensors header: tensor \"a\": shape [2] of F32 is 8 bytes"));
  CHECK(contains(error({{"a", st::Dtype::U8, {4}, 4, 8}}), "begins at data offset 4, not 0"));
  CHECK(contains(error({{"a", st::Dtype::U8, {-4}, 0, 0}}), "shape dimension 0 is -4"));
  CHECK(contains(error({{"a", st::Dtype::U8, {4}, 0, 4}, {"a", st::Dtype::U8, {4}, 4, 8}}),
                 "two tensors are named \"a\""));
}

TEST_CASE("safetensors: the header is padded to a multiple of 8 bytes with at most 7 spaces") {
  // Names of 1 to 8 characters: the unpadded header takes every length modulo 8, 0 included.
  for (std::size_t length = 1; length <= 8; ++length) {
    CAPTURE(length);
    const std::string header =
        st::serialize_header({{std::string(length, 'n'), st::Dtype::U8, {4}, 0, 4}}, {});
    CHECK(header.size() % 8 == 0);
    const std::size_t json_end = header.find_last_not_of(' ') + 1;
    CHECK(header[json_end - 1] == '}');
    CHECK(header.size() - json_end < 8);
  }
}

// --- The weights folder ----------------------------------------------------------------------

namespace {

Named some_weights() {
  torch::manual_seed(11);
  return {{"embed.weight", torch::randn({10, 10})},  // 400 bytes each
          {"layer.0.weight", torch::randn({10, 10})},
          {"layer.0.bias", torch::randn({10})},  // 40
          {"layer.1.weight", torch::randn({10, 10})},
          {"head.weight", torch::randn({10, 10}).to(torch::kBFloat16)}};  // 200
}

std::vector<std::string> files_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void check_same(const Named& loaded, const Named& saved) {
  REQUIRE(loaded.size() == saved.size());
  std::map<std::string, torch::Tensor> by_name(loaded.begin(), loaded.end());
  for (const auto& [name, tensor] : saved) {
    REQUIRE(by_name.contains(name));
    CHECK(accel_test::dtype_name(by_name[name]) == accel_test::dtype_name(tensor));
    CHECK(torch::equal(by_name[name], tensor));
  }
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("safetensors: weights that fit are one model.safetensors with format pt, and load back") {
  TemporaryFolder folder;
  const Named weights = some_weights();
  accel::state::save_weights(folder.path / "w", weights, 5'000'000'000);
  CHECK(files_in(folder.path / "w") == std::vector<std::string>{"model.safetensors"});
  const st::File file = st::File::read(folder.path / "w" / "model.safetensors");
  CHECK(file.header().metadata == std::map<std::string, std::string>{{"format", "pt"}});
  check_same(accel::state::load_weights(folder.path / "w"), weights);
}

TEST_CASE("safetensors: weights over the limit are shards in order plus the index, and load back") {
  TemporaryFolder folder;
  const Named weights = some_weights();
  // 400 | 400 40 | 400 200 with a limit of 799.
  accel::state::save_weights(folder.path, weights, 799);
  CHECK(files_in(folder.path) == std::vector<std::string>{"model-00001-of-00003.safetensors",
                                                          "model-00002-of-00003.safetensors",
                                                          "model-00003-of-00003.safetensors",
                                                          "model.safetensors.index.json"});
  std::ifstream in(folder.path / "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(in);
  CHECK(index["metadata"]["total_size"] == 1440);
  CHECK(index["weight_map"] ==
        nlohmann::json{{"embed.weight", "model-00001-of-00003.safetensors"},
                       {"layer.0.weight", "model-00002-of-00003.safetensors"},
                       {"layer.0.bias", "model-00002-of-00003.safetensors"},
                       {"layer.1.weight", "model-00003-of-00003.safetensors"},
                       {"head.weight", "model-00003-of-00003.safetensors"}});
  CHECK(st::File::read(folder.path / "model-00002-of-00003.safetensors")
            .header()
            .metadata.at("format") == "pt");
  const Named loaded = accel::state::load_weights(folder.path);
  check_same(loaded, weights);
  CHECK(loaded.front().first == "embed.weight");  // file order
}

TEST_CASE("safetensors: a tensor larger than the limit gets a file of its own") {
  TemporaryFolder folder;
  const Named weights = {
      {"small", torch::zeros({2})}, {"big", torch::zeros({100})}, {"tail", torch::zeros({2})}};
  accel::state::save_weights(folder.path, weights, 100);
  std::ifstream in(folder.path / "model.safetensors.index.json");
  const auto map = nlohmann::json::parse(in)["weight_map"];
  CHECK(map["small"] == "model-00001-of-00003.safetensors");
  CHECK(map["big"] == "model-00002-of-00003.safetensors");
  CHECK(map["tail"] == "model-00003-of-00003.safetensors");
  check_same(accel::state::load_weights(folder.path), weights);
}

TEST_CASE("safetensors: saving again replaces the other layout's files") {
  TemporaryFolder folder;
  const Named weights = some_weights();
  accel::state::save_weights(folder.path, weights, 799);
  accel::state::save_weights(folder.path, weights, 1000);  // 800 | 640: 2 shards now
  CHECK(files_in(folder.path) == std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                          "model-00002-of-00002.safetensors",
                                                          "model.safetensors.index.json"});
  write_text(folder.path / "notes.txt", "kept");
  accel::state::save_weights(folder.path, weights, 1'000'000);
  CHECK(files_in(folder.path) == std::vector<std::string>{"model.safetensors", "notes.txt"});
  accel::state::save_weights(folder.path, weights, 799);
  CHECK(files_in(folder.path).size() == 5);
  check_same(accel::state::load_weights(folder.path), weights);
}

TEST_CASE("safetensors: save_weights refuses bad input before writing anything") {
  TemporaryFolder folder;
  CHECK(
      contains(error_of([&] { accel::state::save_weights(folder.path / "w", some_weights(), 0); }),
               "max_shard_bytes is 0"));
  CHECK(contains(error_of([&] {
                   accel::state::save_weights(
                       folder.path / "w", {{"a", torch::ones({1})}, {"a", torch::ones({1})}}, 10);
                 }),
                 "two tensors are named \"a\""));
  CHECK(contains(error_of([&] {
                   accel::state::save_weights(
                       folder.path / "w",
                       {{"a", torch::ones({1})}, {"c", torch::ones({1}, torch::kComplexDouble)}},
                       1);
                 }),
                 "tensor \"c\" is ComplexDouble"));
  CHECK_FALSE(std::filesystem::exists(folder.path / "w"));
  write_text(folder.path / "file", "");
  CHECK(contains(
      error_of([&] { accel::state::save_weights(folder.path / "file" / "w", some_weights(), 10); }),
      "cannot create the folder '" + (folder.path / "file" / "w").string() + "': "));
}

TEST_CASE("safetensors: an index that disagrees with its files is refused, naming both") {
  TemporaryFolder folder;
  const auto& dir = folder.path;
  accel::state::save_weights(dir, some_weights(), 799);
  const auto index_path = dir / "model.safetensors.index.json";
  std::ifstream in(index_path);
  const auto index = nlohmann::json::parse(in);
  const auto load_with = [&](const nlohmann::json& changed) {
    write_text(index_path, changed.dump());
    return error_of([&] { (void)accel::state::load_weights(dir); });
  };
  SUBCASE("a file that does not exist") {
    auto changed = index;
    changed["weight_map"]["head.weight"] = "model-00004-of-00004.safetensors";
    CHECK(contains(load_with(changed), "maps tensor \"head.weight\" to '" +
                                           (dir / "model-00004-of-00004.safetensors").string() +
                                           "', which does not exist"));
  }
  SUBCASE("a tensor in two files") {
    auto changed = index;
    changed["weight_map"]["layer.0.bias"] = "model-00001-of-00003.safetensors";
    st::write_file(
        dir / "model-00001-of-00003.safetensors",
        {{"embed.weight", torch::zeros({10, 10})}, {"layer.0.bias", torch::zeros({10})}});
    CHECK(contains(load_with(changed), "tensor \"layer.0.bias\" is in '" +
                                           (dir / "model-00002-of-00003.safetensors").string() +
                                           "', but the index maps it to '" +
                                           (dir / "model-00001-of-00003.safetensors").string() +
                                           "'; a tensor must be in one file only"));
  }
  SUBCASE("a tensor the named file does not hold") {
    auto changed = index;
    changed["weight_map"]["extra"] = "model-00001-of-00003.safetensors";
    CHECK(contains(load_with(changed), "maps tensor \"extra\" to '" +
                                           (dir / "model-00001-of-00003.safetensors").string() +
                                           "', which does not hold it"));
  }
  SUBCASE("a tensor the index does not list") {
    auto changed = index;
    changed["weight_map"].erase("layer.0.bias");
    CHECK(contains(load_with(changed), "holds tensor \"layer.0.bias\", which '" +
                                           index_path.string() + "' does not list"));
  }
  SUBCASE("a file outside the folder") {
    auto changed = index;
    changed["weight_map"]["head.weight"] = "../model-00003-of-00003.safetensors";
    CHECK(contains(load_with(changed), "without '/'"));
  }
  SUBCASE("not an index") {
    CHECK(contains(load_with(nlohmann::json::array()), "a \"weight_map\" object"));
    write_text(index_path, R"({"weight_map":{"a":"x","a":"y"}})");
    CHECK(contains(error_of([&] { (void)accel::state::load_weights(dir); }),
                   "key \"a\" appears twice"));
  }
  SUBCASE("both layouts, or neither") {
    write_text(dir / "model.safetensors", "");
    CHECK(contains(error_of([&] { (void)accel::state::load_weights(dir); }),
                   "holds both model.safetensors and model.safetensors.index.json"));
    TemporaryFolder empty;
    CHECK(
        contains(error_of([&] { (void)accel::state::load_weights(empty.path); }), "holds neither"));
  }
}

TEST_CASE("safetensors: compare_names lists missing and unexpected names, at most 10 of each") {
  const auto check = accel::state::compare_names({"a", "b", "c"}, {"c", "d", "a"});
  CHECK(check.missing == std::vector<std::string>{"b"});
  CHECK(check.unexpected == std::vector<std::string>{"d"});
  CHECK_FALSE(check.ok());
  CHECK(check.describe() == "missing 1: \"b\"; unexpected 1: \"d\"");
  CHECK(accel::state::compare_names({"a", "b"}, {"b", "a"}).ok());
  std::vector<std::string> many;
  for (int i = 0; i < 15; ++i) many.push_back(fmt::format("p{}", i));
  const std::string text = accel::state::compare_names(many, {}).describe();
  CHECK(text ==
        "missing 15: \"p0\", \"p1\", \"p2\", \"p3\", \"p4\", \"p5\", \"p6\", \"p7\", \"p8\", "
        "\"p9\" and 5 more");
}

}  // namespace unit_safetensors
