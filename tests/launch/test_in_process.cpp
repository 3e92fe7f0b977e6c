// accel::launch() when it runs the user's function in this very process: as a worker of
// torchrun, srun or mpirun, or as the single process of a one-process launch.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <accel/launch.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"

namespace {

using Changes = std::vector<std::pair<const char*, const char*>>;

// Sets (or unsets) variables for one test case and puts them back afterwards.
class ScopedVariables {
 public:
  explicit ScopedVariables(const Changes& changes) {
    for (const auto& [name, value] : changes) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value)
        ::setenv(name, value, 1);
      else
        ::unsetenv(name);
    }
  }
  ScopedVariables(const ScopedVariables&) = delete;
  ScopedVariables& operator=(const ScopedVariables&) = delete;
  ~ScopedVariables() {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

const Changes no_launcher = {{"RANK", nullptr},
                             {"WORLD_SIZE", nullptr},
                             {"LOCAL_RANK", nullptr},
                             {"SLURM_PROCID", nullptr},
                             {"OMPI_COMM_WORLD_RANK", nullptr},
                             {"ACCEL_NPROC", nullptr},
                             {"ACCEL_STORE_DIR", nullptr},
                             {"MASTER_PORT", nullptr}};

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "<unset>";
}

struct Seen {
  int calls = 0;
  pid_t pid = 0;
  std::vector<std::string> arguments;
};

int call_launch(std::vector<std::string> arguments, Seen& seen) {
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  return accel::launch(static_cast<int>(arguments.size()), argv.data(), [&](int argc, char** args) {
    ++seen.calls;
    seen.pid = ::getpid();
    seen.arguments.assign(args, args + argc);
    CHECK(args[argc] == nullptr);
    return 7;
  });
}

}  // namespace

TEST_CASE("launch(): an existing worker (torchrun, srun, mpirun) just runs fn here") {
  for (const Changes& launcher :
       {Changes{{"RANK", "1"}, {"WORLD_SIZE", "4"}}, Changes{{"SLURM_PROCID", "1"}},
        Changes{{"OMPI_COMM_WORLD_RANK", "1"}}}) {
    const std::string marker = launcher.front().first;
    CAPTURE(marker);
    const ScopedVariables clean(no_launcher);
    const ScopedVariables worker(launcher);
    Seen seen;
    // --nproc would start four processes anywhere else; a worker never launches.
    CHECK(call_launch({"./train", "--nproc", "4", "--epochs", "2"}, seen) == 7);
    CHECK(seen.calls == 1);
    CHECK(seen.pid == ::getpid());
    CHECK(seen.arguments == std::vector<std::string>{"./train", "--epochs", "2"});
    CHECK(variable("RANK") == (marker == "RANK" ? "1" : "<unset>"));
    CHECK(variable("ACCEL_STORE_DIR") == "<unset>");
  }
}

TEST_CASE("launch(): defaults for the other settings, as docs/how-to/launching.md writes them") {
  const ScopedVariables worker(Changes{{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  char name[] = "./train";
  char* argv[] = {name, nullptr};
  const auto train = [](int, char**) { return 5; };
  CHECK(accel::launch(1, argv, train, {.grace = std::chrono::seconds(30), .rank_prefix = true}) ==
        5);
}

TEST_CASE("launch(): one process runs fn here with the variables of rank 0, then cleans up") {
  const ScopedVariables clean(no_launcher);
  const ScopedVariables stale(Changes{{"MASTER_ADDR", "stale-host"}});
  std::string store;
  std::string mode;
  std::vector<std::string> variables;
  std::vector<std::string> arguments = {"./train", "--nproc=1", "--x"};
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const int status = accel::launch(3, argv.data(), [&](int argc, char** args) {
    CHECK(argc == 2);
    CHECK(std::string(args[1]) == "--x");
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR"})
      variables.push_back(variable(name));
    CHECK(std::atoi(variable("MASTER_PORT").c_str()) > 0);
    store = variable("ACCEL_STORE_DIR");
    struct stat info {};
    REQUIRE(::stat(store.c_str(), &info) == 0);
    CHECK(S_ISDIR(info.st_mode));
    mode = std::to_string(info.st_mode & 0777);
    return 0;
  });
  CHECK(status == 0);
  CHECK(variables == std::vector<std::string>{"0", "0", "1", "1", "0", "127.0.0.1"});
  CHECK(mode == std::to_string(0700));
  CHECK_FALSE(launch_test::file_exists(store));
  // The environment is as it was.
  CHECK(variable("RANK") == "<unset>");
  CHECK(variable("ACCEL_STORE_DIR") == "<unset>");
  CHECK(variable("MASTER_ADDR") == "stale-host");
}

TEST_CASE("launch(): a bad --nproc or ACCEL_NPROC returns 2 without calling fn") {
  const ScopedVariables clean(no_launcher);
  Seen seen;
  CHECK(call_launch({"./train", "--nproc", "0"}, seen) == 2);
  CHECK(call_launch({"./train", "--nproc", "two"}, seen) == 2);
  const ScopedVariables bad(Changes{{"ACCEL_NPROC", "abc"}});
  CHECK(call_launch({"./train"}, seen) == 2);
  CHECK(seen.calls == 0);
}
