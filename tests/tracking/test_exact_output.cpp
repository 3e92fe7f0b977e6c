// What the run files hold, exactly: every JSON file valid UTF-8 for a strict parser whatever
// bytes a program logs (an invalid sequence becomes U+FFFD, as nlohmann-json's replace does),
// integers kept to the last digit (not rounded through a double), and the step refused when
// it is negative or would overflow.
#include <accel/accelerator.hpp>
#include <accel/detail/json.hpp>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "files.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace tracking_exact_output {

namespace fs = std::filesystem;
using tracking_test::read_lines;
using tracking_test::read_text;
using tracking_test::split;
using tracking_test::TemporaryFolder;

namespace {

// nlohmann's parser is strict: it refuses a string holding bytes that are not UTF-8.
nlohmann::json strict_parse(const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FAIL_CHECK("not valid JSON (" << text.size() << " bytes): " << std::string(e.what()));
    return {};
  }
}

const std::string replacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

TEST_CASE("every JSON file is valid UTF-8: bytes that are not become U+FFFD") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  // A Latin-1 file name (the GPT example's --text) as a value and as a key.
  const std::string latin1 = "caf\xE9.txt";
  accelerator.init_trackers("bytes", {{"text", latin1}, {"caf\xE9", 1}},
                            {.log_dir = logs.path(), .run_name = "r"});
  // A byte-level model's sample: stray bytes, a valid "é", a sequence cut short at the end.
  accelerator.log_text({{"sample", std::string("\xFF\xFE ok \xC3\xA9 \xE2\x82")}});
  accelerator.log({{"lo\xE9ss", 1.5}});
  accelerator.end_training();

  const fs::path run = logs.path() / "bytes" / "r";
  const nlohmann::json config = strict_parse(read_text(run / "config.json"));
  CHECK(config.value("text", "") == "caf" + replacement + ".txt");
  CHECK(config.value("caf" + replacement, 0) == 1);
  strict_parse(read_text(run / "run.json"));
  const auto lines = read_lines(run / "metrics.jsonl");
  REQUIRE(lines.size() == 2);
  CHECK(strict_parse(lines[0]).value("sample", "") ==
        replacement + replacement + " ok \xC3\xA9 " + replacement);
  CHECK(strict_parse(lines[1]).value("lo" + replacement + "ss", 0.0) == 1.5);
}

TEST_CASE("json::string replaces what is not UTF-8 as nlohmann's error_handler_t::replace does") {
  // Overlong forms, surrogates, beyond U+10FFFF, lone continuation bytes, cut sequences,
  // 5-byte leads, and valid text of every length around them.
  const std::vector<std::string> inputs = {
      "plain", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xED\xA0\x80",
      "\xED\x9F\xBF", "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80", "\xF4\x8F\xBF\xBF", "\x80",
      "\xBF\xBF", "\xC3", "a\xE2\x82", "\xF0\x9F\x98", "\xF0\x9F\x98\x80", "\xF8\x88\x80\x80\x80",
      "\xFE\xFF", "\xE2\x82\xAC\xE2\x82", "x\xC3(y", "\xE1\x80\xC0", "\x7F\x01\n\"\\",
      std::string("nul\0byte", 8)};
  for (const std::string& input : inputs) {
    const std::string ours = accel::tracking::json::string(input);
    const std::string reference =
        nlohmann::json(input).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    // The input named in ASCII (\ufffd for each replacement), so that the report prints.
    CHECK_MESSAGE(ours == reference,
                  nlohmann::json(input).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace));
    strict_parse(ours);
  }
}

TEST_CASE("integers are written exactly: beyond 2^53 they do not go through a double") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("ints", {{"seed", std::int64_t{9007199254740993}}},
                            {.log_dir = logs.path(), .run_name = "r"});
  constexpr std::int64_t big = 9007199254740993;  // 2^53 + 1: a double holds ...992
  accelerator.log({{"tokens", big},
                   {"tensor", torch::tensor(big, torch::kLong)},
                   {"least", std::numeric_limits<std::int64_t>::min()},
                   {"unsigned", std::uint32_t{4000000000}},
                   {"flag", true}},
                  1);
  accelerator.end_training();
  const fs::path run = logs.path() / "ints" / "r";
  CHECK(read_text(run / "config.json").find("\"seed\": 9007199254740993") != std::string::npos);
  const std::string line = read_lines(run / "metrics.jsonl")[0];
  CHECK(line.find("\"tokens\": 9007199254740993,") != std::string::npos);
  CHECK(line.find("\"tensor\": 9007199254740993,") != std::string::npos);
  CHECK(line.find("\"least\": -9223372036854775808,") != std::string::npos);
  CHECK(line.find("\"unsigned\": 4000000000,") != std::string::npos);
  CHECK(line.find("\"flag\": 1}") != std::string::npos);
  CHECK(strict_parse(line).value("tokens", std::int64_t{0}) == big);
  const auto row = split(read_lines(run / "metrics.csv")[1]);
  REQUIRE(row.size() == 7);
  CHECK(row[2] == "9007199254740993");
  CHECK(row[3] == "9007199254740993");
  CHECK(row[4] == "-9223372036854775808");
}

TEST_CASE("a negative step, or one past the largest, is refused naming it") {
  TemporaryFolder logs;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("steps", {}, {.log_dir = logs.path(), .run_name = "r"});
  CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 1}}, -1),
                       doctest::Contains("accel: log(): the step -1 is negative"), accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.log_text({{"note", "x"}}, -5),
                       doctest::Contains("accel: log_text(): the step -5 is negative"),
                       accel::Error);
  constexpr std::int64_t last = std::numeric_limits<std::int64_t>::max();
  accelerator.log({{"loss", 1}}, last);
  CHECK_THROWS_WITH_AS(accelerator.log({{"loss", 2}}),
                       doctest::Contains("accel: log(): the step after 9223372036854775807"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(accelerator.log_text({{"note", "x"}}),
                       doctest::Contains("the step after 9223372036854775807"), accel::Error);
  accelerator.log({{"loss", 3}}, 7);  // an explicit step still goes; the counter moves on
  accelerator.log({{"loss", 4}});
  accelerator.end_training();
  std::vector<std::string> steps;
  for (const auto& line : read_lines(logs.path() / "steps" / "r" / "metrics.csv"))
    steps.push_back(split(line)[0]);
  CHECK(steps == std::vector<std::string>{"step", "9223372036854775807", "7", "8"});
}

}  // namespace tracking_exact_output
