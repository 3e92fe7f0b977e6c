// The launcher with real processes: accel-launch, and the test worker launching itself through
// accel::launch(). Every check on time uses generous bounds: the machine may be busy.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <accel/launch/signal_names.hpp>
#include <chrono>
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

const std::string worker = ACCEL_TEST_WORKER;
const std::string launcher = ACCEL_TEST_LAUNCHER;
// The one libtorch program here: a case that starts it runs on both libtorch legs only if its
// name matches a pattern of tests/launch/CMakeLists.txt.
const std::string gloo_worker = ACCEL_TEST_GLOO_WORKER;

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

// Nothing a worker wrote a pid for exists any more: not running, not a zombie.
void check_nothing_left(const TestDir& dir, int ranks, bool grandchildren) {
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string r = std::to_string(rank);
    const pid_t pid = dir.pid_in("pid." + r);
    CAPTURE(rank);
    CHECK(pid > 0);
    CHECK_FALSE(launch_test::process_exists(pid));
    if (grandchildren) {
      const pid_t grandchild = dir.pid_in("grandchild." + r);
      CHECK(grandchild > 0);
      CHECK_FALSE(launch_test::process_exists(grandchild));
    }
  }
}

std::string pid_of(const TestDir& dir, int rank) {
  return std::to_string(dir.pid_in("pid." + std::to_string(rank)));
}

// Milliseconds from the failing rank's last moment to the launcher's exit.
double ms_since_failure(const TestDir& dir, const Finished& finished) {
  return static_cast<double>(finished.ended_ns - std::atoll(dir.read("failed-at").c_str())) / 1e6;
}

// Waits (at most `limit`, generously) until `ready()` holds; false if it never did.
template <class Predicate>
bool wait_until(Predicate ready, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    launch_test::sleep_ms(2);
  }
  return true;
}

void create_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("2 and 3 ranks: distinct ranks, one port, one private store folder removed at the end") {
  for (const int ranks : {2, 3}) {
    CAPTURE(ranks);
    TestDir dir;
    // 2 ranks through accel::launch() (the worker launches itself), 3 through accel-launch.
    const std::vector<std::string> argv =
        ranks == 2 ? std::vector<std::string>{worker, "--dir",      dir.path(), "--nproc",
                                              "2",    "--dump-env", "--sleep",  "0"}
                   : std::vector<std::string>{launcher, "--nproc",  "3",          "--",      worker,
                                              "--dir",  dir.path(), "--dump-env", "--sleep", "0"};
    Process process(argv, dir, fresh());
    const Finished finished = process.wait();
    INFO("stderr: " << finished.err);
    CHECK(finished.status == 0);
    CHECK(finished.err.empty());

    const auto first = read_env_file(dir, 0);
    for (int rank = 0; rank < ranks; ++rank) {
      CAPTURE(rank);
      auto env = read_env_file(dir, rank);
      CHECK(env["RANK"] == std::to_string(rank));
      CHECK(env["LOCAL_RANK"] == std::to_string(rank));
      CHECK(env["WORLD_SIZE"] == std::to_string(ranks));
      CHECK(env["LOCAL_WORLD_SIZE"] == std::to_string(ranks));
      CHECK(env["GROUP_RANK"] == "0");
      CHECK(env["MASTER_ADDR"] == "127.0.0.1");
      CHECK(env["MASTER_PORT"] == first.at("MASTER_PORT"));
      CHECK(std::atoi(env["MASTER_PORT"].c_str()) > 0);
      CHECK(env["ACCEL_STORE_DIR"] == first.at("ACCEL_STORE_DIR"));
      CHECK(env["store_is_dir"] == "1");
      CHECK(env["store_mode"] == "700");
      CHECK(env["argv"] == "--dir " + dir.path() + " --dump-env --sleep 0");
    }
    CHECK(first.at("ACCEL_STORE_DIR").rfind(dir.path() + "/accel-", 0) == 0);  // under $TMPDIR
    CHECK_FALSE(launch_test::file_exists(first.at("ACCEL_STORE_DIR")));
    check_nothing_left(dir, ranks, false);
  }
}

TEST_CASE("one process: fn runs in the launching process, the folder goes even after exit()") {
  TestDir dir;
  Process process({worker, "--dir", dir.path(), "--dump-env", "--call-exit", "--exit-code", "4"},
                  dir, fresh());
  const Finished finished = process.wait();
  CHECK(finished.status == 4);
  auto env = read_env_file(dir, 0);
  CHECK(env["pid"] == std::to_string(process.pid()));
  CHECK(env["WORLD_SIZE"] == "1");
  CHECK(env["store_mode"] == "700");
  CHECK_FALSE(launch_test::file_exists(env["ACCEL_STORE_DIR"]));
}

TEST_CASE("rank 1 exits with 3: status 3 within 10 s, rank 1 named, nothing left running") {
  TestDir dir;
  Process process({worker, "--nproc", "3", "--dir", dir.path(), "--dump-env", "--grandchild",
                   "--fail-rank", "1", "--exit-code", "3", "--sleep", "120"},
                  dir, fresh());
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 3);
  CHECK(finished.seconds < 10);
  CHECK(contains(finished.err, "accel-launch: rank 1 (pid " + pid_of(dir, 1) +
                                   ") failed first: exit code 3 (root cause)\n"));
  for (const int rank : {0, 2})
    CHECK(contains(finished.err, "accel-launch: rank " + std::to_string(rank) + " (pid " +
                                     pid_of(dir, rank) +
                                     "): terminated by the launcher with SIGTERM\n"));
  CHECK(contains(finished.err, "accel-launch: exiting with status 3\n"));
  check_nothing_left(dir, 3, true);
  CHECK_FALSE(launch_test::file_exists(read_env_file(dir, 0).at("ACCEL_STORE_DIR")));
  MESSAGE("failure to launcher exit: " << ms_since_failure(dir, finished) << " ms");
}

TEST_CASE("a rank killed by SIGKILL is named with the signal") {
  TestDir dir;
  Process process({launcher, "--nproc", "2", "--", worker, "--dir", dir.path(), "--grandchild",
                   "--kill-rank", "1", "--sleep", "120"},
                  dir, fresh());
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 128 + SIGKILL);
  CHECK(contains(finished.err, "accel-launch: rank 1 (pid " + pid_of(dir, 1) +
                                   ") failed first: killed by signal SIGKILL (root cause)\n"));
  CHECK(contains(finished.err, "accel-launch: rank 0 (pid " + pid_of(dir, 0) +
                                   "): terminated by the launcher with SIGTERM\n"));
  check_nothing_left(dir, 2, true);
  MESSAGE("failure to launcher exit: " << ms_since_failure(dir, finished) << " ms");
}

TEST_CASE("SIGTERM, SIGINT and SIGHUP to the launcher reach every worker") {
  for (const int signal : {SIGTERM, SIGINT, SIGHUP}) {
    const std::string name = accel::launcher::signal_name(signal);
    CAPTURE(name);
    TestDir dir;
    Process process({worker, "--nproc", "2", "--dir", dir.path(), "--grandchild", "--sleep", "120"},
                    dir, fresh());
    REQUIRE(launch_test::wait_for_files(dir.files("ready.", 2), std::chrono::seconds(30)));
    const auto sent = launch_test::monotonic_ns();
    ::kill(process.pid(), signal);
    const Finished finished = process.wait();
    INFO("stderr: " << finished.err);
    CHECK(finished.status == 128 + signal);
    CHECK(contains(finished.err, "accel-launch: received " + name +
                                     " and forwarded it to every worker (root cause)\n"));
    for (const int rank : {0, 1})
      CHECK(contains(finished.err, "accel-launch: rank " + std::to_string(rank) + " (pid " +
                                       pid_of(dir, rank) + "): terminated by the forwarded " +
                                       name + "\n"));
    check_nothing_left(dir, 2, true);
    MESSAGE(name << " to launcher exit: " << (finished.ended_ns - sent) / 1e6 << " ms");
  }
}

TEST_CASE("a stopped worker (SIGSTOP) is continued, so SIGTERM ends it without the grace") {
  TestDir dir;
  Process process({launcher, "--grace", "60", "--nproc", "2", "--", worker, "--dir", dir.path(),
                   "--stop-rank", "1", "--sleep", "120"},
                  dir, fresh());
  REQUIRE(launch_test::wait_for_files(dir.files("ready.", 2), std::chrono::seconds(30)));
  const pid_t stopped = dir.pid_in("pid.1");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (launch_test::process_state(stopped) != 'T' && std::chrono::steady_clock::now() < deadline)
    launch_test::sleep_ms(5);
  REQUIRE(launch_test::process_state(stopped) == 'T');
  const auto sent = launch_test::monotonic_ns();
  ::kill(process.pid(), SIGTERM);
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 128 + SIGTERM);
  CHECK((finished.ended_ns - sent) / 1e9 < 30);
  CHECK(contains(finished.err, "accel-launch: rank 1 (pid " + pid_of(dir, 1) +
                                   "): terminated by the forwarded SIGTERM\n"));
  check_nothing_left(dir, 2, false);
}

TEST_CASE("a second signal to the launcher while stopping: SIGKILL now, not after the grace") {
  TestDir dir;
  Process process({launcher, "--grace", "60", "--nproc", "2", "--", worker, "--dir", dir.path(),
                   "--ignore-sigterm", "--sleep", "120"},
                  dir, fresh());
  REQUIRE(launch_test::wait_for_files(dir.files("ready.", 2), std::chrono::seconds(30)));
  ::kill(process.pid(), SIGTERM);
  ::kill(process.pid(), SIGINT);
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 128 + SIGTERM);
  CHECK(finished.seconds < 30);
  for (const int rank : {0, 1})
    CHECK(contains(finished.err, "accel-launch: rank " + std::to_string(rank) + " (pid " +
                                     pid_of(dir, rank) +
                                     "): killed by the launcher with SIGKILL (SIGINT to the "
                                     "launcher while stopping)\n"));
  check_nothing_left(dir, 2, false);
}

TEST_CASE("a worker that ignores SIGTERM gets SIGKILL after the grace period") {
  TestDir dir;
  Process process({launcher, "--grace", "1", "--nproc", "2", "--", worker, "--dir", dir.path(),
                   "--ignore-sigterm", "--grandchild", "--fail-rank", "0", "--exit-code", "1",
                   "--sleep", "120"},
                  dir, fresh());
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 1);
  const double delay = ms_since_failure(dir, finished);
  CHECK(delay >= 900);
  CHECK(delay < 10'000);
  CHECK(contains(finished.err, "accel-launch: rank 0 (pid " + pid_of(dir, 0) +
                                   ") failed first: exit code 1 (root cause)\n"));
  CHECK(contains(finished.err,
                 "accel-launch: rank 1 (pid " + pid_of(dir, 1) +
                     "): killed by the launcher with SIGKILL (still running after the 1 s grace "
                     "period)\n"));
  check_nothing_left(dir, 2, true);
  MESSAGE("failure to launcher exit with a 1 s grace: " << delay << " ms");
}

TEST_CASE("rank prefix: every line of every worker, stdout and stderr, off by default") {
  TestDir dir;
  Process prefixed({launcher, "--rank-prefix", "--nproc", "2", "--", worker, "--print", "hello"},
                   dir, fresh());
  const Finished finished = prefixed.wait();
  INFO("stdout: " << finished.out << "\nstderr: " << finished.err);
  CHECK(finished.status == 0);
  for (const std::string rank : {"0", "1"}) {
    CHECK(contains(finished.out, "[rank " + rank + "] hello from rank " + rank + "\n"));
    CHECK(contains(finished.err, "[rank " + rank + "] error line from rank " + rank + "\n"));
    CHECK(contains(finished.err, "[rank " + rank + "] partial from rank " + rank + "\n"));
  }
  for (const std::string* text : {&finished.out, &finished.err}) {
    std::size_t start = 0;
    while (start < text->size()) {
      CHECK(text->compare(start, 6, "[rank ") == 0);
      start = text->find('\n', start) + 1;
    }
  }

  // Far more than a pipe holds: nothing lost, nothing cut, the lines of each rank in order.
  TestDir big_dir;
  Process big({launcher, "--rank-prefix", "--nproc", "2", "--", worker, "--print-lines", "20000"},
              big_dir, fresh());
  const Finished flood = big.wait();
  CHECK(flood.status == 0);
  for (const std::string rank : {"0", "1"}) {
    int next = 0;
    bool in_order = true;
    const std::string start = "[rank " + rank + "] rank " + rank + " line ";
    for (std::size_t at = flood.out.find(start); at != std::string::npos;
         at = flood.out.find(start, at + 1)) {
      in_order = in_order && std::atoi(flood.out.c_str() + at + start.size()) == next;
      ++next;
    }
    CHECK(next == 20000);
    CHECK(in_order);
  }
  CHECK(flood.out.size() == 2 * 20000 * (9 + 100));

  TestDir plain_dir;
  Process plain({launcher, "--nproc", "2", "--", worker, "--print", "hello"}, plain_dir, fresh());
  const Finished unprefixed = plain.wait();
  CHECK(unprefixed.status == 0);
  CHECK(contains(unprefixed.out, "hello from rank 1\n"));
  CHECK_FALSE(contains(unprefixed.out, "[rank"));
}

TEST_CASE("rank prefix with a stdout nobody reads: a failure or a signal still ends the launch") {
  // The launcher's stdout is a pipe that is full from the start and that this test never reads.
  // Rank 0 prints without end; once it has printed more than its pipe holds (so the launcher
  // holds output it cannot write), rank 1 fails or the launcher gets SIGTERM: supervision must
  // go on although no output can be written.
  for (const bool signal : {false, true}) {
    CAPTURE(signal);
    TestDir dir;
    Process process({launcher, "--rank-prefix", "--nproc", "2", "--", worker, "--dir", dir.path(),
                     "--flood-rank", "0", "--fail-rank", "1", "--exit-code", "3", "--fail-on-file",
                     signal ? "never" : "go"},
                    dir, fresh(), Stdout::stuck_pipe);
    REQUIRE(launch_test::wait_for_files(dir.files("ready.", 2), std::chrono::seconds(30)));
    REQUIRE(launch_test::wait_for_files({dir.file("flooded.0")}, std::chrono::seconds(30)));
    const auto stuck = launch_test::monotonic_ns();
    if (signal)
      ::kill(process.pid(), SIGTERM);
    else
      create_file(dir.file("go"));
    const Finished finished = process.wait(std::chrono::seconds(30));
    INFO("stderr: " << finished.err);
    CHECK(finished.status == (signal ? 128 + SIGTERM : 3));
    // The launcher gives up on output that nobody takes for 2 s; a hang is what this catches.
    CHECK((finished.ended_ns - stuck) / 1e9 < 10);
    if (signal) {
      CHECK(contains(finished.err, "accel-launch: received SIGTERM and forwarded it"));
    } else {
      CHECK(contains(finished.err, "accel-launch: rank 1 (pid " + pid_of(dir, 1) +
                                       ") failed first: exit code 3 (root cause)\n"));
      CHECK(contains(finished.err, "accel-launch: rank 0 (pid " + pid_of(dir, 0) +
                                       "): terminated by the launcher with SIGTERM\n"));
    }
    CHECK(contains(finished.err, "bytes of the workers' output: stdout took nothing for 2 s"));
    check_nothing_left(dir, 2, false);
    MESSAGE((signal ? "SIGTERM" : "failure") << " with a stuck stdout to launcher exit: "
                                             << (finished.ended_ns - stuck) / 1e6 << " ms");
  }
}

TEST_CASE("rank prefix through a pipe read in small pieces: nothing lost, the launch waits") {
  TestDir dir;
  Process process(
      {launcher, "--rank-prefix", "--nproc", "2", "--", worker, "--print-lines", "30000"}, dir,
      fresh(), Stdout::pipe);
  std::string out;
  char buffer[512];  // slower than the workers write: the launcher's buffer fills up
  for (ssize_t count; (count = ::read(process.stdout_pipe(), buffer, sizeof buffer)) != 0;)
    if (count > 0) out.append(buffer, static_cast<std::size_t>(count));
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 0);
  CHECK(finished.err.empty());
  CHECK(out.size() == 2 * 30000 * (9 + 100));
  for (const std::string rank : {"0", "1"}) {
    const std::string start = "[rank " + rank + "] rank " + rank + " line ";
    int next = 0;
    for (std::size_t at = out.find(start); at != std::string::npos; at = out.find(start, at + 1))
      if (std::atoi(out.c_str() + at + start.size()) == next) ++next;
    CHECK(next == 30000);
  }
}

TEST_CASE("rank 0 fails because rank 1 did: rank 1 is the root cause, every time") {
  // Rank 0 exits with 1 as soon as rank 1's process has ended, as a peer does whose connection
  // broke. Held: the launcher is stopped (SIGSTOP) while both exit, so that it finds both exits
  // at once, in whatever order waitpid() gives them, as a busy launcher would.
  for (const bool held : {false, true}) {
    for (int run = 0; run < 5; ++run) {
      CAPTURE(held);
      CAPTURE(run);
      TestDir dir;
      std::vector<std::string> argv = {launcher, "--nproc",     "2",        "--",
                                       worker,   "--dir",       dir.path(), "--fail-rank",
                                       "1",      "--exit-code", "3",        "--fail-after-rank",
                                       "1"};
      if (held) argv.insert(argv.end(), {"--fail-on-file", "go"});
      Process process(argv, dir, fresh());
      if (held) {
        REQUIRE(launch_test::wait_for_files(dir.files("ready.", 2), std::chrono::seconds(30)));
        ::kill(process.pid(), SIGSTOP);
        REQUIRE(wait_until([&] { return launch_test::process_state(process.pid()) == 'T'; }));
        create_file(dir.file("go"));
        for (const int rank : {0, 1})
          REQUIRE(wait_until([&] {
            return launch_test::process_state(dir.pid_in("pid." + std::to_string(rank))) == 'Z';
          }));
        ::kill(process.pid(), SIGCONT);
      }
      const Finished finished = process.wait();
      INFO("stderr: " << finished.err);
      CHECK(finished.status == 3);
      CHECK(contains(finished.err, "accel-launch: rank 1 (pid " + pid_of(dir, 1) +
                                       ") failed first: exit code 3 (root cause)\n"));
      // Unless held, the launcher's SIGTERM may reach rank 0 before rank 0 exits on its own.
      if (held)
        CHECK(contains(finished.err,
                       "accel-launch: rank 0 (pid " + pid_of(dir, 0) + "): exit code 1\n"));
    }
  }
}

TEST_CASE("over Gloo, rank 1 throws while rank 0 waits in a barrier: rank 1 is the root cause") {
  // Rank 1's error closes its Gloo connections while it unwinds, and rank 0's barrier fails at
  // once on the closed connection; rank 0, whose process may end first, was named as the root
  // cause in most runs. In the last runs rank 1 takes half a second more to end, so rank 0's
  // exit always comes first. ACCEL_SHARED_MEMORY=0: every collective goes over Gloo.
  for (int run = 0; run < 5; ++run) {
    CAPTURE(run);
    TestDir dir;
    const std::string linger = run < 3 ? "0" : "0.5";
    Process process({gloo_worker, "--nproc", "2", "--dir", dir.path(), "--throw-rank", "1",
                     "--linger", linger},
                    dir,
                    fresh({{"ACCEL_SHARED_MEMORY", "0"}, {"ACCEL_TIMEOUT", "30"},
                           {"ACCEL_RENDEZVOUS_TIMEOUT", "30"}}));
    const Finished finished = process.wait();
    INFO("stderr: " << finished.err);
    CHECK(finished.status == 1);
    CHECK(contains(finished.err, "accel-launch: rank 1 (pid " + pid_of(dir, 1) +
                                     ") failed first: exit code 1 (root cause)\n"));
    CHECK(contains(finished.err, "rank 1 fails on its own"));
    if (linger != "0")  // rank 0 had ended on its own, and said why
      CHECK(contains(finished.err, "accel-launch: rank 0 (pid " + pid_of(dir, 0) +
                                       "): exit code 1 (its collective failed: a peer had "
                                       "gone)\n"));
  }
}

TEST_CASE("several nodes: global ranks from --node-rank, the given port, no store folder") {
  TestDir dir;
  Process process(
      {launcher, "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
       "29555", "--nproc", "2", "--", worker, "--dir", dir.path(), "--dump-env"},
      dir, fresh({{"ACCEL_STORE_DIR", "/stale/from/an/outer/launch"}}));
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 0);
  for (const int local : {0, 1}) {
    auto env = read_env_file(dir, 2 + local);
    CHECK(env["RANK"] == std::to_string(2 + local));
    CHECK(env["LOCAL_RANK"] == std::to_string(local));
    CHECK(env["WORLD_SIZE"] == "4");
    CHECK(env["LOCAL_WORLD_SIZE"] == "2");
    CHECK(env["GROUP_RANK"] == "1");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(env["MASTER_PORT"] == "29555");
    CHECK(env["ACCEL_STORE_DIR"] == "<unset>");
  }
}

TEST_CASE("processes the workers leave behind are stopped, even outside their process group") {
  TestDir dir;
  Process process({worker, "--nproc", "2", "--dir", dir.path(), "--grandchild-setsid"}, dir,
                  fresh());
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 0);
  CHECK(contains(finished.err,
                 "accel-launch: stopped 2 processes that the workers had left "
                 "running"));
  check_nothing_left(dir, 2, true);
}

TEST_CASE("the workers die with the launcher, even when it is killed with SIGKILL") {
  TestDir dir;
  Process process({worker, "--nproc", "2", "--dir", dir.path(), "--sleep", "120"}, dir, fresh());
  REQUIRE(launch_test::wait_for_files(dir.files("ready.", 2), std::chrono::seconds(30)));
  ::kill(process.pid(), SIGKILL);
  const Finished finished = process.wait();
  CHECK_FALSE(finished.exited);
  // PR_SET_PDEATHSIG: each worker gets SIGKILL from the kernel; this test process, a
  // subreaper, inherits them as zombies until TestDir reaps them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const int rank : {0, 1}) {
    const pid_t pid = dir.pid_in("pid." + std::to_string(rank));
    while (launch_test::process_running(pid) && std::chrono::steady_clock::now() < deadline)
      launch_test::sleep_ms(5);
    CHECK_FALSE(launch_test::process_running(pid));
  }
}

TEST_CASE("RANK and WORLD_SIZE already set: the program runs once, as that rank") {
  TestDir dir;
  Process process({worker, "--nproc", "3", "--dir", dir.path(), "--dump-env"}, dir,
                  fresh({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  const Finished finished = process.wait();
  CHECK(finished.status == 0);
  auto env = read_env_file(dir, 0);
  CHECK(env["RANK"] == "0");
  CHECK(env["ACCEL_STORE_DIR"] == "<unset>");
  CHECK(env["argv"] == "--dir " + dir.path() + " --dump-env");
  CHECK(env["pid"] == std::to_string(process.pid()));
  CHECK_FALSE(launch_test::file_exists(dir.file("env.1")));
}

TEST_CASE("bad arguments or environment: an accel: message and status 2, nothing started") {
  struct Case {
    std::vector<std::string> argv;
    EnvironmentChanges environment;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{launcher, "--nproc", "0", "--", worker}, {}, "accel: --nproc 0 is out of range"},
      {{launcher, "--nnodes", "2", "--", worker}, {}, "accel: --nnodes 2 needs --master-addr"},
      {{launcher, "--nproc", "2"}, {}, "accel: no command to launch"},
      {{launcher, "--", worker}, {{"ACCEL_NPROC", "abc"}}, "accel: ACCEL_NPROC='abc'"},
      {{worker, "--nproc", "x"}, {}, "accel: --nproc 'x' is not a whole number"},
      {{worker}, {{"ACCEL_NPROC", "abc"}}, "accel: ACCEL_NPROC='abc' is not a whole number"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    TestDir dir;
    Process process(c.argv, dir, fresh(c.environment));
    const Finished finished = process.wait();
    CHECK(finished.status == 2);
    CHECK(finished.err.rfind(c.message, 0) == 0);
  }
  TestDir dir;
  Process help({launcher, "--help"}, dir, fresh());
  const Finished finished = help.wait();
  CHECK(finished.status == 0);
  CHECK(contains(finished.out, "usage: accel-launch"));
}

TEST_CASE("a command that cannot start: status 127 and the reason") {
  TestDir dir;
  Process process({launcher, "--nproc", "2", "--", "/nonexistent/accel-program"}, dir, fresh());
  const Finished finished = process.wait();
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 127);
  CHECK(contains(finished.err,
                 "accel: cannot run '/nonexistent/accel-program': No such file or directory"));
  CHECK(contains(finished.err, "accel-launch: rank 0 could not start (root cause)\n"));
}
