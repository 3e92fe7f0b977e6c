// accel::Progress: a bar redrawn in place on a terminal, plain lines elsewhere, nothing when off
// or on a process other than the main one.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "../unit/helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace tracking_progress {

namespace {

// A FILE* into memory, read back with text().
class Captured {
 public:
  Captured() : file_(std::tmpfile()) {}
  ~Captured() { std::fclose(file_); }
  Captured(const Captured&) = delete;
  Captured& operator=(const Captured&) = delete;
  std::FILE* file() const { return file_; }
  std::string text() const {
    std::fflush(file_);
    std::rewind(file_);
    std::string all;
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file_)) > 0;) all.append(buffer, n);
    return all;
  }

 private:
  std::FILE* file_;
};

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t found = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++found;
  return found;
}

}  // namespace

TEST_CASE("lines mode: a line every `every` steps and at the last, with loss, rate and time left") {
  accel_test::ScopedEnv env("ACCEL_PROGRESS", nullptr);
  Captured out;
  {
    accel::Progress progress(true, 7,
                             {.mode = accel::ProgressMode::lines, .samples_per_step = 64,
                              .every = 3, .out = out.file()});
    for (int step = 1; step <= 7; ++step) progress.update(step, {{"loss", 1.0 / step}});
  }
  const std::string text = out.text();
  CHECK(count(text, "\n") == 3);  // steps 3, 6 and 7
  CHECK(text.find("step 3/7 | loss 0.3333 | ") == 0);
  CHECK(text.find("\nstep 6/7 | loss 0.1667 | ") != std::string::npos);
  CHECK(text.find("\nstep 7/7 | loss 0.1429 | ") != std::string::npos);
  CHECK(count(text, " samples/s | ") == 3);
  CHECK(count(text, " left | ") == 3);
  CHECK(text.find('\r') == std::string::npos);
}

TEST_CASE("lines mode without `every`: about 20 lines, the last step always among them") {
  accel_test::ScopedEnv env("ACCEL_PROGRESS", nullptr);
  Captured out;
  accel::Progress progress(true, 205, {.mode = accel::ProgressMode::lines, .out = out.file()});
  for (int step = 1; step <= 205; ++step) progress.update(step);
  CHECK(count(out.text(), "\n") == 21);  // every 10 steps, and step 205
  CHECK(out.text().find("step 205/205") != std::string::npos);
}

TEST_CASE("bar mode: one line redrawn with \\r, ended by a newline when closed") {
  accel_test::ScopedEnv env("ACCEL_PROGRESS", nullptr);
  Captured out;
  {
    accel::Progress progress(true, 4,
                             {.mode = accel::ProgressMode::bar, .samples_per_step = 8,
                              .refresh = std::chrono::milliseconds(0), .out = out.file()});
    for (int step = 1; step <= 4; ++step) progress.update(step, {{"loss", torch::tensor(0.5)}});
  }
  const std::string text = out.text();
  CHECK(count(text, "\r") == 4);
  CHECK(count(text, "\x1b[K") == 4);
  CHECK(count(text, "\n") == 1);
  CHECK(text.back() == '\n');
  CHECK(text.find("\r[#####...............]  25% step 1/4 | loss 0.5\x1b[K") == 0);
  CHECK(text.find("\r[####################] 100% step 4/4 | loss 0.5 | ") != std::string::npos);
}

TEST_CASE("off, on another process, or ACCEL_PROGRESS=off: nothing at all") {
  Captured out;
  {
    accel_test::ScopedEnv env("ACCEL_PROGRESS", nullptr);
    accel::Progress off(true, 3, {.mode = accel::ProgressMode::off, .out = out.file()});
    accel::Progress not_main(false, 3, {.mode = accel::ProgressMode::lines, .out = out.file()});
    for (int step = 1; step <= 3; ++step) off.update(step), not_main.update(step);
  }
  {
    accel_test::ScopedEnv env("ACCEL_PROGRESS", "off");
    accel::Progress silenced(true, 3, {.mode = accel::ProgressMode::bar, .out = out.file()});
    CHECK(silenced.mode() == accel::ProgressMode::off);
    for (int step = 1; step <= 3; ++step) silenced.update(step);
  }
  CHECK(out.text().empty());
}

TEST_CASE("automatic: a bar on a terminal, lines on a file, and ACCEL_PROGRESS replaces the choice") {
  accel_test::ScopedEnv unset("ACCEL_PROGRESS", nullptr);
  Captured file;
  CHECK(accel::Progress(true, 3, {.out = file.file()}).mode() == accel::ProgressMode::lines);

  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  std::FILE* terminal = std::fopen(::ptsname(master), "w");
  REQUIRE(terminal != nullptr);
  CHECK(accel::Progress(true, 3, {.out = terminal}).mode() == accel::ProgressMode::bar);
  {
    accel_test::ScopedEnv env("ACCEL_PROGRESS", "lines");
    CHECK(accel::Progress(true, 3, {.out = terminal}).mode() == accel::ProgressMode::lines);
  }
  std::fclose(terminal);
  ::close(master);

  accel::Accelerator<accel::Ddp> accelerator;  // the main process of one
  CHECK(accel::Progress(accelerator, 3, {.mode = accel::ProgressMode::lines}).mode() ==
        accel::ProgressMode::lines);
}

TEST_CASE("bad progress settings are accel: errors naming the value") {
  accel_test::ScopedEnv unset("ACCEL_PROGRESS", nullptr);
  CHECK_THROWS_WITH_AS(accel::Progress(true, 0), doctest::Contains("total_steps is 0"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(accel::Progress(true, 5, {.every = -1}), doctest::Contains("every is -1"),
                       accel::Error);
  accel_test::ScopedEnv env("ACCEL_PROGRESS", "fancy");
  CHECK_THROWS_WITH_AS(accel::Progress(true, 5),
                       "accel: ACCEL_PROGRESS='fancy' is not a progress mode; set it to auto, "
                       "bar, lines or off, or unset it",
                       accel::Error);
}

TEST_CASE("clock_text writes minutes:seconds, and hours when there are some") {
  CHECK(accel::tracking::clock_text(0) == "0:00");
  CHECK(accel::tracking::clock_text(75) == "1:15");
  CHECK(accel::tracking::clock_text(3725) == "1:02:05");
}

}  // namespace tracking_progress
