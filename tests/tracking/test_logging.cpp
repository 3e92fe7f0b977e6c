// The logger: levels and their threshold (option, ACCEL_LOG_LEVEL), the main process only unless
// a call asks for every process, the rank prefix, and log.txt in the run folder.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../unit/helpers.hpp"
#include "files.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace tracking_logging {

namespace fs = std::filesystem;
using accel::logging::Level;
using tracking_test::read_lines;
using tracking_test::read_text;
using tracking_test::TemporaryFolder;

namespace {

// What this process writes to stderr during the scope, read back with text().
class CapturedStderr {
 public:
  CapturedStderr() : file_(folder_.path() / "stderr") {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    std::FILE* out = std::fopen(file_.c_str(), "w");
    REQUIRE(out != nullptr);
    ::dup2(::fileno(out), STDERR_FILENO);
    std::fclose(out);
  }
  ~CapturedStderr() { restore(); }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;

  std::string text() {
    restore();
    return read_text(file_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }

  TemporaryFolder folder_;
  fs::path file_;
  int saved_ = -1;
};

}  // namespace

TEST_CASE("logger: lines below the level are dropped, the others say their level and name") {
  accel_test::ScopedEnv env("ACCEL_LOG_LEVEL", nullptr);
  CapturedStderr captured;
  const accel::Logger log("data", 0, {.level = Level::warning});
  log.debug("not {}", "shown");
  log.info("not shown");
  log.warning("{} shards for {} ranks", 3, 2);
  log.error("broken");
  log.log(Level::error, "{not a format}");
  CHECK(captured.text() ==
        "WARNING data: 3 shards for 2 ranks\nERROR data: broken\nERROR data: {not a format}\n");
  CHECK(log.enabled_for(Level::warning));
  CHECK_FALSE(log.enabled_for(Level::info));
  CHECK(accel::get_logger("x").level() == Level::info);  // neither option nor variable
}

TEST_CASE("logger: ACCEL_LOG_LEVEL sets the level in any case, the option wins, bad names fail") {
  {
    accel_test::ScopedEnv env("ACCEL_LOG_LEVEL", "DEBUG");
    CHECK(accel::get_logger("x").level() == Level::debug);
    CHECK(accel::get_logger("x", {.level = Level::error}).level() == Level::error);
    accel::Accelerator<accel::Ddp> accelerator;
    CHECK(accelerator.logger().level() == Level::debug);
  }
  {
    accel_test::ScopedEnv env("ACCEL_LOG_LEVEL", "verbose");
    CHECK_THROWS_WITH_AS(accel::get_logger("x"),
                         "accel: ACCEL_LOG_LEVEL='verbose' is not a log level; set it to debug, "
                         "info, warning or error (in any case), or unset it",
                         accel::Error);
    CHECK_THROWS_WITH_AS(accel::Accelerator<accel::Ddp>(),
                         doctest::Contains("ACCEL_LOG_LEVEL='verbose'"), accel::Error);
  }
  CHECK(accel::logging::parse_level("Warning") == Level::warning);
  CHECK(accel::logging::level_name(Level::warning) == "WARNING");
  CHECK_THROWS_WITH_AS(accel::logging::parse_level("loud"),
                       "accel: 'loud' is not a log level; use debug, info, warning or error",
                       accel::Error);
}

TEST_CASE("logger: the main process only, unless a call asks for every process, rank prefix") {
  accel_test::ScopedEnv env("ACCEL_LOG_LEVEL", nullptr);
  CapturedStderr captured;
  const accel::Logger other("data", 1);  // as on rank 1
  other.info("only on the main process");
  other.warning(accel::every_process, "rank {} saw an empty shard", 1);
  const accel::Logger prefixed("data", 1, {.rank_prefix = true});
  prefixed.error("only on the main process");
  prefixed.info(accel::every_process, "from {}", "here");
  const accel::Logger main("data", 0, {.rank_prefix = true});
  main.info("from the main process");
  CHECK(captured.text() ==
        "WARNING data: rank 1 saw an empty shard\n"
        "[rank 1] INFO data: from here\n"
        "[rank 0] INFO data: from the main process\n");
}

TEST_CASE("logger: lines go to the run's log.txt while its run is open, on the main process") {
  accel_test::ScopedEnv env("ACCEL_LOG_LEVEL", nullptr);
  TemporaryFolder logs;
  CapturedStderr captured;
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.logger().info("before the run");
  accelerator.init_trackers("p", {}, {.log_dir = logs.path(), .run_name = "r"});
  const fs::path file = logs.path() / "p" / "r" / "log.txt";
  CHECK_FALSE(fs::exists(file));  // made at the first line only
  accelerator.logger().info("step {}", 1);
  accel::get_logger("data").warning("from another logger");
  accelerator.logger().debug("below the level");
  accelerator.end_training();
  accelerator.logger().info("after the run");
  CHECK(read_lines(file) ==
        std::vector<std::string>{"INFO: step 1", "WARNING data: from another logger"});
  CHECK(captured.text() ==
        "INFO: before the run\nINFO: step 1\nWARNING data: from another logger\n"
        "INFO: after the run\n");
}

}  // namespace tracking_logging
