// The rendezvous with real processes (the torch worker, gloo_worker.cpp): a run's identity, a
// stranger on the same MASTER_PORT, the rendezvous timeout, and shared-memory names nobody can
// take first. Ranks "by hand" get the variables a launcher would set and meet through a c10d
// TCPStore on 127.0.0.1, as under torchrun.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <accel/launch/free_port.hpp>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "harness.hpp"

namespace {

using launch_test::contains;
using launch_test::EnvironmentChanges;
using launch_test::Finished;
using launch_test::fresh;
using launch_test::Process;
using launch_test::Stdout;
using launch_test::TestDir;

// The one libtorch program here: a case that starts it runs on both libtorch legs only if its
// name matches a pattern of tests/launch/CMakeLists.txt.
const std::string gloo_worker = ACCEL_TEST_GLOO_WORKER;
const std::string worker = ACCEL_TEST_WORKER;
const std::string launcher = ACCEL_TEST_LAUNCHER;

// The variables of rank `rank` of `world` meeting at 127.0.0.1:`port`, and `extra`.
EnvironmentChanges by_hand(int rank, int world, int port, EnvironmentChanges extra = {}) {
  EnvironmentChanges changes = {{"RANK", std::to_string(rank)},
                                {"WORLD_SIZE", std::to_string(world)},
                                {"MASTER_ADDR", "127.0.0.1"},
                                {"MASTER_PORT", std::to_string(port)}};
  changes.insert(changes.end(), extra.begin(), extra.end());
  return fresh(changes);
}

// The lines of `text` that start with "accel: ".
std::vector<std::string> accel_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    const std::string line = text.substr(start, end == std::string::npos ? end : end - start);
    if (line.rfind("accel: ", 0) == 0) lines.push_back(line);
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return lines;
}

// One accel: line naming what went wrong, and no C++ stack trace (c10's errors carry one).
void check_one_accel_line(const Finished& finished) {
  INFO("stderr: " << finished.err);
  CHECK(accel_lines(finished.err).size() == 1);
  CHECK_FALSE(contains(finished.err, "frame #"));
  CHECK_FALSE(contains(finished.err, "Exception raised from"));
}

std::map<std::string, std::string> read_env_file(const TestDir& dir, int rank) {
  std::map<std::string, std::string> values;
  const std::string text = dir.read("env." + std::to_string(rank));
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    const auto equals = line.find('=');
    if (equals != std::string::npos) values[line.substr(0, equals)] = line.substr(equals + 1);
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return values;
}

bool is_hex(const std::string& text) {
  for (const char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return !text.empty();
}

}  // namespace

TEST_CASE("rendezvous: a rank of another job on the same MASTER_PORT is refused, naming both "
          "runs") {
  struct Case {
    const char* what;
    EnvironmentChanges job;       // every rank of the job
    int stranger_world;           // the stranger's WORLD_SIZE
    EnvironmentChanges stranger;  // the stranger's identity
    std::string job_named;        // how the messages name the job ...
    std::string stranger_named;   // ... and the stranger
  };
  const std::vector<Case> cases = {
      {"two run identities", {{"ACCEL_RUN_ID", "job-a"}}, 2, {{"ACCEL_RUN_ID", "job-b"}},
       "run 'job-a'", "run 'job-b'"},
      {"no identity: the world sizes differ", {}, 3, {}, "of 2 ranks", "of 3 ranks"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    TestDir dir;
    const int port = accel::launcher::pick_free_port();
    const EnvironmentChanges timeouts = {{"ACCEL_RENDEZVOUS_TIMEOUT", "30"},
                                         {"ACCEL_TIMEOUT", "30"}};
    EnvironmentChanges job = timeouts;
    job.insert(job.end(), c.job.begin(), c.job.end());
    EnvironmentChanges stranger = timeouts;
    stranger.insert(stranger.end(), c.stranger.begin(), c.stranger.end());

    // The job's rank 0 serves the store; the stranger (rank 1 of its own job) comes before the
    // job's own rank 1 does, is refused, and the job then meets and succeeds.
    Process rank0({gloo_worker}, dir, by_hand(0, 2, port, job), Stdout::file, "rank0");
    Process intruder({gloo_worker}, dir, by_hand(1, c.stranger_world, port, stranger),
                     Stdout::file, "stranger");
    const Finished refused = intruder.wait(std::chrono::seconds(60));
    INFO("stranger's stderr: " << refused.err);
    CHECK(refused.status == 1);
    CHECK(refused.seconds < 15);
    check_one_accel_line(refused);
    CHECK(contains(refused.err, c.job_named));
    CHECK(contains(refused.err, c.stranger_named));
    CHECK(contains(refused.err, "MASTER_PORT"));

    Process rank1({gloo_worker}, dir, by_hand(1, 2, port, job), Stdout::file, "rank1");
    const Finished first = rank0.wait(std::chrono::seconds(60));
    const Finished second = rank1.wait(std::chrono::seconds(60));
    INFO("rank 0's stderr: " << first.err);
    INFO("rank 1's stderr: " << second.err);
    CHECK(first.status == 0);
    CHECK(second.status == 0);
    // Rank 0 said whom it turned away, in one line naming both runs.
    const auto lines = accel_lines(first.err);
    REQUIRE(lines.size() == 1);
    CHECK(contains(lines[0], "refused"));
    CHECK(contains(lines[0], c.job_named));
    CHECK(contains(lines[0], c.stranger_named));
  }
}

TEST_CASE("rendezvous: a rank alone fails at the rendezvous timeout, with one accel: line") {
  // Rank 0 serves the store and waits for rank 1; rank 1 alone finds no store to reach.
  for (const int rank : {0, 1}) {
    CAPTURE(rank);
    TestDir dir;
    const int port = accel::launcher::pick_free_port();
    // ACCEL_TIMEOUT (the collectives') far above the rendezvous timeout: only the latter counts.
    // The upper bound tells the two apart, with room for a loaded machine's process start and
    // end (several seconds at a load of 8 on 2 cores).
    Process alone({gloo_worker}, dir,
                  by_hand(rank, 2, port,
                          {{"ACCEL_RENDEZVOUS_TIMEOUT", "2"}, {"ACCEL_TIMEOUT", "120"}}));
    const Finished finished = alone.wait(std::chrono::seconds(180));
    CHECK(finished.status == 1);
    CHECK(finished.seconds >= 2);
    CHECK(finished.seconds < 60);
    check_one_accel_line(finished);
    CHECK(contains(finished.err, "rendezvous timeout of 2 s"));
    CHECK(contains(finished.err, "ACCEL_RENDEZVOUS_TIMEOUT"));
  }
}

TEST_CASE("rendezvous: every launch gives its workers a run identity of its own") {
  std::vector<std::string> identities;
  for (int launch = 0; launch < 2; ++launch) {
    TestDir dir;
    Process process({launcher, "--nproc", "2", "--", worker, "--dir", dir.path(), "--dump-env"},
                    dir, fresh({{"ACCEL_RUN_ID", "inherited"}}));
    const Finished finished = process.wait();
    INFO("stderr: " << finished.err);
    REQUIRE(finished.status == 0);
    const auto first = read_env_file(dir, 0);
    const auto second = read_env_file(dir, 1);
    CHECK(first.at("ACCEL_RUN_ID") == second.at("ACCEL_RUN_ID"));
    CHECK(first.at("ACCEL_RUN_ID").size() == 32);
    CHECK(is_hex(first.at("ACCEL_RUN_ID")));
    identities.push_back(first.at("ACCEL_RUN_ID"));
  }
  CHECK(identities[0] != identities[1]);
}

TEST_CASE("shared memory: a segment squatting on a predictable name does not stop a launch") {
  TestDir dir;
  Process process({gloo_worker, "--nproc", "2", "--dir", dir.path(), "--squat"}, dir,
                  fresh({{"ACCEL_RENDEZVOUS_TIMEOUT", "30"}, {"ACCEL_TIMEOUT", "30"}}));
  const Finished finished = process.wait(std::chrono::seconds(60));
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 0);
  CHECK(finished.err.empty());
}
