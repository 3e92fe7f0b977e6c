// Options, command lines and the small pieces of the launcher, without starting processes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>

#include <accel/launch.hpp>
#include <algorithm>
#include <csignal>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "../skip.hpp"
#include "harness.hpp"

namespace {

accel::LaunchCommandLine parse(std::initializer_list<const char*> words) {
  std::vector<const char*> argv{"accel-launch"};
  argv.insert(argv.end(), words);
  return accel::parse_launch_command_line(static_cast<int>(argv.size()), argv.data());
}

// The message a bad command line gets, "" when it parses.
std::string error_of(std::initializer_list<const char*> words) {
  try {
    parse(words);
  } catch (const accel::LaunchError& error) {
    return error.what();
  }
  return "";
}

// accel-launch --config FILE run on `content` written to FILE in `dir`: the exit status and
// stderr. The file is read by the launcher executable, since config_file.hpp needs yaml-cpp and
// only accel-launch links it; the command it would start, `true`, is never reached on a bad file.
launch_test::Finished launch_with_config(const launch_test::TestDir& dir, const std::string& content,
                                         const std::string& name = "bad.yaml") {
  std::ofstream(dir.file(name), std::ios::binary) << content;
  launch_test::Process launcher({ACCEL_TEST_LAUNCHER, "--config", dir.file(name), "--", "true"},
                                dir, {{"ACCEL_NPROC", std::nullopt}, {"OMP_NUM_THREADS", "1"}});
  return launcher.wait();
}

// An accel-launch built without yaml-cpp reads no file: the config tests have nothing to check,
// and are skipped.
bool reads_config(const launch_test::Finished& finished) {
  if (!launch_test::contains(finished.err, "built without yaml-cpp")) return true;
  accel_test::skip("accel-launch was built without yaml-cpp");
  return false;
}

// The file is refused with status 2 and exactly `message` (after "accel: "; `FILE` in it stands
// for the file's path), before anything starts.
void check_refused(const std::string& content, std::string message) {
  const launch_test::TestDir dir;
  const auto finished = launch_with_config(dir, content);
  if (!reads_config(finished)) return;
  const std::string path = dir.file("bad.yaml");
  for (auto at = message.find("FILE"); at != std::string::npos; at = message.find("FILE", at))
    message.replace(at, 4, path);
  INFO("file:\n" << content);
  CHECK(finished.status == 2);
  CHECK(finished.err == "accel: " + message + "\n");
}

struct UnsetNproc {
  UnsetNproc() { ::unsetenv("ACCEL_NPROC"); }
  ~UnsetNproc() { ::unsetenv("ACCEL_NPROC"); }
};

}  // namespace

TEST_CASE("command line: options, then the command after --") {
  const UnsetNproc clean;
  const auto line = parse({"--nproc", "4", "--nnodes=2", "--node-rank", "1", "--master-addr",
                           "10.0.0.1", "--master-port=1234", "--grace", "0.5", "--rank-prefix",
                           "--", "./train", "--nproc", "9"});
  CHECK(line.options.nproc == 4);
  CHECK(line.options.nnodes == 2);
  CHECK(line.options.node_rank == 1);
  CHECK(line.options.master_addr == "10.0.0.1");
  CHECK(line.options.master_port == 1234);
  CHECK(line.options.grace == std::chrono::milliseconds(500));
  CHECK(line.options.rank_prefix);
  CHECK(line.command == std::vector<std::string>{"./train", "--nproc", "9"});
}

TEST_CASE("command line: defaults, ACCEL_NPROC, a command without --, --help") {
  const UnsetNproc clean;
  auto line = parse({"python3", "-c", "pass"});
  CHECK(line.options.nproc == 1);
  CHECK(line.options.nnodes == 1);
  CHECK_FALSE(line.options.master_port.has_value());
  CHECK(line.options.grace == std::chrono::seconds(5));
  CHECK_FALSE(line.options.rank_prefix);
  CHECK(line.command == std::vector<std::string>{"python3", "-c", "pass"});

  ::setenv("ACCEL_NPROC", "3", 1);
  CHECK(parse({"--", "true"}).options.nproc == 3);
  CHECK(parse({"--nproc", "2", "--", "true"}).options.nproc == 2);  // the flag wins
  CHECK(parse({"--help"}).help);
}

TEST_CASE("command line: every mistake gets an accel: message naming the value") {
  const UnsetNproc clean;
  const auto check = [](std::initializer_list<const char*> words,
                        std::initializer_list<const char*> parts) {
    const std::string message = error_of(words);
    INFO("message: " << message);
    CHECK(message.rfind("accel: ", 0) == 0);
    for (const char* part : parts) CHECK(launch_test::contains(message, part));
  };
  check({"--nproc", "0", "--", "true"}, {"--nproc 0", "at least 1"});
  check({"--nproc", "abc", "--", "true"}, {"--nproc 'abc'", "whole number", "--nproc 2"});
  check({"--nproc=2x", "--", "true"}, {"'2x'"});
  check({"--nproc"}, {"--nproc needs a value"});
  check({"--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "--", "true"},
        {"--node-rank 2", "--nnodes 2", "0 to 1"});
  check({"--nnodes", "2", "--", "true"}, {"--nnodes 2", "--master-addr"});
  check({"--master-port", "70000", "--", "true"}, {"--master-port 70000", "65535"});
  check({"--nnodes", "2", "--master-addr", "h", "--master-port", "0", "--", "true"},
        {"--master-port 0", "29500"});
  check({"--grace", "-1", "--", "true"}, {"--grace -1", "negative"});
  check({"--grace", "soon", "--", "true"}, {"--grace 'soon'"});
  check({"--rank-prefix=yes", "--", "true"}, {"--rank-prefix takes no value"});
  check({"--frobnicate", "--", "true"}, {"'--frobnicate'", "--help"});
  check({"--nproc", "2"}, {"no command", "after --"});
  check({"--nproc", "2", "--"}, {"no command"});

  ::setenv("ACCEL_NPROC", "abc", 1);
  check({"--", "true"}, {"ACCEL_NPROC='abc'", "unset it"});
  ::setenv("ACCEL_NPROC", "0", 1);
  check({"--", "true"}, {"ACCEL_NPROC=0", "at least 1"});
}

TEST_CASE("command line: --nnodes MIN:MAX, --min-nodes and --rendezvous-deadline") {
  const UnsetNproc clean;
  auto line = parse({"--nnodes", "1:3", "--node-rank", "2", "--master-addr", "h",
                     "--max-restarts", "2", "--rendezvous-deadline", "2.5", "--", "true"});
  CHECK(line.options.nnodes == 3);
  CHECK(line.options.min_nodes == 1);
  CHECK(line.options.rendezvous_deadline == std::chrono::milliseconds(2500));
  CHECK(accel::launcher::fewest_nodes(line.options) == 1);
  CHECK(accel::launcher::nodes_meet(line.options));
  line = parse({"--nnodes", "3", "--min-nodes", "2", "--master-addr", "h", "--", "true"});
  CHECK(line.options.nnodes == 3);
  CHECK(accel::launcher::fewest_nodes(line.options) == 2);
  // Fixed nodes meet only to restart; one node never does.
  line = parse({"--nnodes", "2", "--master-addr", "h", "--", "true"});
  CHECK(accel::launcher::fewest_nodes(line.options) == 2);
  CHECK_FALSE(accel::launcher::nodes_meet(line.options));
  CHECK(accel::launcher::nodes_meet(
      parse({"--nnodes", "2", "--master-addr", "h", "--max-restarts", "1", "--", "true"}).options));
  CHECK_FALSE(accel::launcher::nodes_meet(parse({"--max-restarts", "1", "--", "true"}).options));
  CHECK(parse({"--", "true"}).options.rendezvous_deadline == std::chrono::seconds(30));

  const auto check = [](std::initializer_list<const char*> words,
                        std::initializer_list<const char*> parts) {
    const std::string message = error_of(words);
    INFO("message: " << message);
    CHECK(message.rfind("accel: ", 0) == 0);
    for (const char* part : parts) CHECK(launch_test::contains(message, part));
  };
  check({"--nnodes", "3:2", "--master-addr", "h", "--", "true"}, {"--nnodes 3:2", "MIN <= MAX"});
  check({"--nnodes", "0:2", "--master-addr", "h", "--", "true"}, {"--nnodes 0:2", "1:2"});
  check({"--nnodes", "1:x", "--master-addr", "h", "--", "true"}, {"'1:x'", "--nnodes 1:2"});
  check({"--min-nodes", "2", "--", "true"}, {"--min-nodes 2", "--nnodes 1"});
  check({"--min-nodes", "0", "--", "true"}, {"--min-nodes 0", "at least 1"});
  check({"--rendezvous-deadline", "0", "--", "true"}, {"--rendezvous-deadline 0", "e.g."});
  check({"--rendezvous-deadline", "-2", "--", "true"}, {"--rendezvous-deadline -2", "negative"});
  check({"--rendezvous-deadline", "soon", "--", "true"}, {"--rendezvous-deadline 'soon'"});
  check({"--nnodes", "1:2", "--master-addr", "h", "--master-port", "65535", "--", "true"},
        {"--master-port 65535", "--master-port + 1"});
}

TEST_CASE("config file: a folder is refused, not read (it aborted the launcher)") {
  const launch_test::TestDir dir;
  launch_test::Process launcher({ACCEL_TEST_LAUNCHER, "--config", dir.path(), "--", "true"}, dir);
  const auto finished = launcher.wait();
  if (!reads_config(finished)) return;
  CHECK(finished.status == 2);
  CHECK(finished.err == "accel: --config " + dir.path() + " is a folder, not a YAML file; give " +
                            "the path of a file in it, e.g. --config " + dir.path() +
                            "/launch.yaml\n");
}

TEST_CASE("config file: a repeated key is refused with both lines, not last-wins") {
  check_refused("nproc: 2\ngrace: 1\nnproc: 2\n",
                "FILE:3: the file has 'nproc' twice, on lines 1 and 3; keep one of them");
  check_refused("env:\n  FOO: a\n  FOO: b\n",
                "FILE:3: 'env' has 'FOO' twice, on lines 2 and 3; keep one of them");
}

TEST_CASE("config file: an env name setenv() would refuse is an error, not dropped") {
  const std::string rule =
      ", which is not a variable name: a name must be non-empty and contain no '=' (nor a NUL); "
      "e.g. env: {NCCL_DEBUG: INFO}";
  check_refused("env:\n  OK: 1\n  \"BAD=NAME\": x\n", "FILE:3: 'env' has 'BAD=NAME'" + rule);
  check_refused("env:\n  \"\": y\n", "FILE:2: 'env' has ''" + rule);
  check_refused("env:\n  RANK: 3\n",
                "FILE:2: 'env' sets RANK, which the launcher sets for every worker itself; e.g. "
                "env: {NCCL_DEBUG: INFO}");
}

TEST_CASE("config file: threads-per-process above 1024 is out of range") {
  check_refused("threads-per-process: 100000\n",
                "FILE:1: threads-per-process '100000' is out of range; give at most 1024 threads "
                "per worker (no more than the node's cores), e.g. 8");
}

TEST_CASE("config file: a second YAML document is refused, not ignored") {
  check_refused("nproc: 1\n---\nnproc: 2\n",
                "FILE:3: a second YAML document (after a '---' line); accel-launch reads one "
                "document per file: remove the '---' and put all the settings in one mapping");
  // A '---' before the settings, or one with nothing after it, ignores nothing.
  const launch_test::TestDir dir;
  const auto finished = launch_with_config(dir, "---\nnproc: 1\n---\n", "ok.yaml");
  if (!reads_config(finished)) return;
  INFO("stderr: " << finished.err);
  CHECK(finished.status == 0);
}

TEST_CASE("launch(): --nproc is taken out of the program's arguments, before -- only") {
  const char* argv[] = {"./train",  "--epochs",  "3",  "--nproc", "4",
                        "--lr=0.1", "--nproc=2", "--", "--nproc", "7"};
  const auto program = accel::launcher::take_nproc_argument(10, argv);
  CHECK(program.nproc == 2);
  CHECK(program.arguments ==
        std::vector<std::string>{"./train", "--epochs", "3", "--lr=0.1", "--", "--nproc", "7"});
  const char* missing[] = {"./train", "--nproc"};
  CHECK_THROWS_WITH_AS(accel::launcher::take_nproc_argument(2, missing),
                       "accel: --nproc needs a value, e.g. --nproc 2", accel::LaunchError);
}

TEST_CASE("validate: options built in code are checked like the command line") {
  accel::LaunchOptions options;
  options.nproc = 2;
  CHECK_NOTHROW(accel::launcher::validate(options));
  options.grace = std::chrono::milliseconds(-1500);
  CHECK_THROWS_WITH_AS(accel::launcher::validate(options),
                       doctest::Contains("--grace -1.5 is negative"), accel::LaunchError);
  options.grace = std::chrono::seconds(1);
  options.nnodes = 0;
  CHECK_THROWS_WITH_AS(accel::launcher::validate(options), doctest::Contains("--nnodes 0"),
                       accel::LaunchError);
  CHECK_THROWS_AS(accel::launch_workers(options, std::vector<std::string>{"true"}),
                  accel::LaunchError);
}

TEST_CASE("worker variables: global rank from the node rank, the store folder on one node only, "
          "the run id") {
  accel::LaunchOptions options;
  options.nproc = 2;
  options.nnodes = 3;
  options.node_rank = 2;
  const accel::launcher::Rendezvous rendezvous{"10.1.2.3", 29500, "", "", "", ""};
  const auto variables = accel::launcher::worker_variables(options, rendezvous, 1);
  const accel::launcher::Variables expected = {{"RANK", "5"},           {"LOCAL_RANK", "1"},
                                               {"WORLD_SIZE", "6"},     {"LOCAL_WORLD_SIZE", "2"},
                                               {"GROUP_RANK", "2"},     {"MASTER_ADDR", "10.1.2.3"},
                                               {"MASTER_PORT", "29500"}};
  CHECK(variables == expected);

  // The inherited environment loses stale values of every variable the launcher sets.
  ::setenv("ACCEL_STORE_DIR", "/stale", 1);
  const auto environment = accel::launcher::worker_environment(variables);
  ::unsetenv("ACCEL_STORE_DIR");
  for (const std::string& entry : environment) CHECK(entry.rfind("ACCEL_STORE_DIR=", 0) != 0);
  CHECK(std::count(environment.begin(), environment.end(), std::string("RANK=5")) == 1);

  // The run id, the failure note's file and the progress record, when the launcher has them; a
  // run id replaces the inherited one (a worker's getenv() reads the first of two entries).
  const accel::launcher::Rendezvous with_run{"10.1.2.3", 29500, "", "c0ffee",
                                             "/tmp/accel-x", "/tmp/accel-x/progress"};
  const auto more = accel::launcher::worker_variables(options, with_run, 1);
  CHECK(std::count(more.begin(), more.end(), std::pair<std::string, std::string>(
                                                  "ACCEL_RUN_ID", "c0ffee")) == 1);
  CHECK(std::count(more.begin(), more.end(),
                   std::pair<std::string, std::string>("ACCEL_ERROR_FILE",
                                                       "/tmp/accel-x/failure.5")) == 1);
  CHECK(std::count(more.begin(), more.end(),
                   std::pair<std::string, std::string>("ACCEL_PROGRESS_FILE",
                                                       "/tmp/accel-x/progress")) == 1);
  ::setenv("ACCEL_RUN_ID", "inherited", 1);
  const auto replaced = accel::launcher::worker_environment(more);
  ::unsetenv("ACCEL_RUN_ID");
  CHECK(std::count_if(replaced.begin(), replaced.end(), [](const std::string& entry) {
          return entry.rfind("ACCEL_RUN_ID=", 0) == 0;
        }) == 1);
  CHECK(std::count(replaced.begin(), replaced.end(), std::string("ACCEL_RUN_ID=c0ffee")) == 1);
}

TEST_CASE("small pieces: signal names, seconds, a free port") {
  CHECK(accel::launcher::signal_name(SIGKILL) == "SIGKILL");
  CHECK(accel::launcher::signal_name(SIGTERM) == "SIGTERM");
  CHECK(accel::launcher::signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(accel::launcher::signal_name(SIGRTMIN + 3).rfind("signal ", 0) == 0);
  CHECK(accel::launcher::format_seconds(std::chrono::seconds(5)) == "5");
  CHECK(accel::launcher::format_seconds(std::chrono::milliseconds(1500)) == "1.5");
  CHECK(accel::launcher::format_seconds(std::chrono::milliseconds(50)) == "0.05");
  CHECK(accel::launcher::format_seconds(std::chrono::milliseconds(-500)) == "-0.5");
  const int port = accel::launcher::pick_free_port();
  CHECK(port > 0);
  CHECK(port < 65536);
}

// A pipe the output threads wake the test through, as they wake the supervisor.
struct Wake {
  accel::launcher::Pipe pipe = accel::launcher::make_pipe();
  Wake() {
    accel::launcher::set_nonblocking(pipe.read_end);
    accel::launcher::set_nonblocking(pipe.write_end);
  }
  // Until everything queued in `channel` is written (or dropped), at most a minute.
  void until_idle(const accel::launcher::OutputChannel& channel) const {
    for (int rounds = 0; !channel.idle() && rounds < 60; ++rounds) {
      pollfd ready{pipe.read_end.get(), POLLIN, 0};
      ::poll(&ready, 1, 1000);
      char buffer[64];
      while (::read(pipe.read_end.get(), buffer, sizeof buffer) > 0) {
      }
    }
  }
};

TEST_CASE("rank prefix: whole lines only, and a last line without newline") {
  using accel::launcher::FileDescriptor;
  auto input = accel::launcher::make_pipe();
  auto output = accel::launcher::make_pipe();
  accel::launcher::set_nonblocking(input.read_end);
  accel::launcher::set_nonblocking(output.read_end);
  const Wake wake;
  accel::launcher::OutputChannel channel(output.write_end.get(), wake.pipe.write_end.get());
  accel::launcher::PrefixedStream stream(std::move(input.read_end), channel, 7);
  const auto send = [&](const std::string& text) {
    CHECK(::write(input.write_end.get(), text.data(), text.size()) ==
          static_cast<ssize_t>(text.size()));
    stream.read_available();
  };
  const auto received = [&] {
    wake.until_idle(channel);
    std::string text;
    char buffer[4096];
    for (ssize_t count; (count = ::read(output.read_end.get(), buffer, sizeof buffer)) > 0;)
      text.append(buffer, static_cast<std::size_t>(count));
    return text;
  };
  send("one\ntw");
  CHECK(received() == "[rank 7] one\n");
  send("o\n\nthree");
  CHECK(received() == "[rank 7] two\n[rank 7] \n");
  input.write_end.reset();
  stream.read_available();  // end of file
  CHECK_FALSE(stream.open());
  CHECK(received() == "[rank 7] three\n");
}

TEST_CASE("output channel: a reader that never reads blocks only the channel's thread") {
  auto output = accel::launcher::make_pipe();  // nobody reads output.read_end
  const Wake wake;
  std::size_t dropped = 0;
  {
    accel::launcher::OutputChannel channel(output.write_end.get(), wake.pipe.write_end.get());
    const std::size_t total = 2 * accel::launcher::output_buffer_bytes;
    for (std::size_t queued = 0; queued < total; queued += 4096)
      channel.write(std::string(4096, 'x'));  // never blocks, whatever the reader does
    // The pipe takes its capacity and the thread blocks with one slice: the rest is held.
    CHECK_FALSE(channel.has_room());
    CHECK_FALSE(channel.idle());
    dropped = channel.give_up();
    const auto capacity = static_cast<std::size_t>(::fcntl(output.read_end.get(), F_GETPIPE_SZ));
    CHECK(dropped >= total - capacity - accel::launcher::output_write_bytes);
    CHECK(channel.idle());
    CHECK(channel.has_room());
    channel.write("after giving up");
    CHECK(channel.give_up() == dropped + 15);
  }  // does not wait for the thread, which stays blocked in write() until the pipe goes
}

TEST_CASE("output channel: a closed destination drops the output, never blocks a writer") {
  auto output = accel::launcher::make_pipe();
  output.read_end.reset();  // EPIPE from now on; the thread takes no SIGPIPE
  const Wake wake;
  accel::launcher::OutputChannel channel(output.write_end.get(), wake.pipe.write_end.get());
  channel.write("lost\n");
  wake.until_idle(channel);
  CHECK(channel.idle());
  CHECK(channel.has_room());
  channel.write("also lost\n");
  CHECK(channel.give_up() == 15);
}
