// The threads each worker's torch gets: OMP_NUM_THREADS = usable cores / local processes (at
// least 1) unless the user set it, announced once by the launcher (launch/threads.hpp).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <accel/launch.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "harness.hpp"

namespace {

using launch_test::contains;
using launch_test::Process;
using launch_test::TestDir;

const std::string launcher = ACCEL_TEST_LAUNCHER;

// OMP_NUM_THREADS as given for the scope, then back as it was.
class ScopedThreads {
 public:
  explicit ScopedThreads(const char* value) {
    if (const char* old = std::getenv("OMP_NUM_THREADS")) saved_ = old;
    if (value) ::setenv("OMP_NUM_THREADS", value, 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }
  ~ScopedThreads() {
    if (saved_) ::setenv("OMP_NUM_THREADS", saved_->c_str(), 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  std::optional<std::string> saved_;
};

std::optional<std::string> variable(const accel::launcher::Variables& variables,
                                    const std::string& name) {
  for (const auto& [key, value] : variables)
    if (key == name) return value;
  return std::nullopt;
}

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t found = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++found;
  return found;
}

}  // namespace

TEST_CASE("threads per process: the usable cores shared by the local processes, at least 1") {
  using accel::launcher::threads_per_process;
  CHECK(threads_per_process(16, 1) == 16);
  CHECK(threads_per_process(8, 3) == 2);
  CHECK(threads_per_process(2, 2) == 1);
  CHECK(threads_per_process(2, 3) == 1);
  CHECK(accel::launcher::usable_cores() >= 1);
}

TEST_CASE("a worker gets OMP_NUM_THREADS unless the user set it or it is the only worker") {
  const accel::launcher::Rendezvous rendezvous{"127.0.0.1", 29500, "", "", "", ""};
  const int expected = accel::launcher::threads_per_process(accel::launcher::usable_cores(), 2);
  auto with_threads = [&](const accel::LaunchOptions& options) {
    return accel::launcher::with_worker_threads(
        accel::launcher::worker_variables(options, rendezvous, 0), options);
  };
  {
    ScopedThreads unset(nullptr);
    CHECK(variable(with_threads({.nproc = 2}), "OMP_NUM_THREADS") == std::to_string(expected));
    CHECK_FALSE(variable(with_threads({.nproc = 1}), "OMP_NUM_THREADS"));
  }
  ScopedThreads chosen("3");
  CHECK_FALSE(variable(with_threads({.nproc = 2}), "OMP_NUM_THREADS"));
}

TEST_CASE("accel-launch sets OMP_NUM_THREADS in every worker and says so once, or keeps the user's") {
  const int expected = accel::launcher::threads_per_process(accel::launcher::usable_cores(), 3);
  const std::vector<std::string> command = {launcher, "--nproc", "3", "--", "sh", "-c",
                                            "echo \"rank $RANK threads $OMP_NUM_THREADS\""};
  {
    TestDir dir;
    Process process(command, dir, {{"OMP_NUM_THREADS", std::nullopt}});
    const auto finished = process.wait();
    INFO("stdout: " << finished.out << "\nstderr: " << finished.err);
    CHECK(finished.status == 0);
    for (const std::string rank : {"0", "1", "2"})
      CHECK(contains(finished.out, "rank " + rank + " threads " + std::to_string(expected) + "\n"));
    CHECK(count(finished.err, "accel-launch: OMP_NUM_THREADS=" + std::to_string(expected) +
                                  " for each of the 3 worker processes") == 1);
  }
  {
    TestDir dir;
    Process process(command, dir, {{"OMP_NUM_THREADS", "5"}});
    const auto finished = process.wait();
    INFO("stdout: " << finished.out << "\nstderr: " << finished.err);
    CHECK(finished.status == 0);
    CHECK(count(finished.out, " threads 5\n") == 3);
    CHECK_FALSE(contains(finished.err, "OMP_NUM_THREADS"));
  }
}
