// Running the launcher as a real process from a test: its own process group, output in files,
// a bounded wait, and cleanup of everything it may have left even when a check fails.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <accel/launch/descendants.hpp>
#include <accel/launch/private_directory.hpp>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace launch_test {

using Clock = std::chrono::steady_clock;

inline std::string read_file(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  for (ssize_t count; (count = ::read(fd, buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(count));
  ::close(fd);
  return text;
}

inline bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

inline void sleep_ms(int ms) {
  timespec duration{ms / 1000, (ms % 1000) * 1'000'000L};
  ::nanosleep(&duration, nullptr);
}

// Waits (generously: the machine may be busy building) until every path exists.
inline bool wait_for_files(const std::vector<std::string>& paths, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    bool all = true;
    for (const std::string& path : paths) all = all && file_exists(path);
    if (all) return true;
    if (Clock::now() > deadline) return false;
    sleep_ms(10);
  }
}

// In /proc at all: running, stopped or a zombie nobody reaped.
inline bool process_exists(pid_t pid) {
  return pid > 0 && file_exists("/proc/" + std::to_string(pid));
}

// The state letter of /proc/<pid>/stat (R, S, T, Z, ...), or 0 when the process is gone.
inline char process_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

// Running or stopped: not gone and not a zombie.
inline bool process_running(pid_t pid) {
  const char state = process_state(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

inline long long monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

// A private folder for one test; on the way out, every process whose pid a worker wrote there
// is killed, and so is every child this test process has (it is a subreaper: orphans come here).
class TestDir {
 public:
  TestDir() {
    const char* tmpdir = std::getenv("TMPDIR");
    path_ = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/accel-launch-test-XXXXXX";
    REQUIRE(::mkdtemp(path_.data()) != nullptr);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;
  ~TestDir() {
    for (const char* kind : {"pid.", "grandchild."})
      for (int rank = 0; rank < 8; ++rank)
        if (const pid_t pid = pid_in(kind + std::to_string(rank)); process_running(pid))
          ::kill(pid, SIGKILL);
    for (const auto& child : accel::launcher::children_of(::getpid())) ::kill(child.pid, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    accel::launcher::remove_tree(path_);
  }

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }
  [[nodiscard]] std::string read(const std::string& name) const { return read_file(file(name)); }
  // The pid a worker wrote in `name`, 0 when there is none.
  [[nodiscard]] pid_t pid_in(const std::string& name) const {
    return static_cast<pid_t>(std::atol(read(name).c_str()));
  }
  [[nodiscard]] std::vector<std::string> files(const std::string& prefix, int count) const {
    std::vector<std::string> paths;
    for (int rank = 0; rank < count; ++rank) paths.push_back(file(prefix + std::to_string(rank)));
    return paths;
  }

 private:
  std::string path_;
};

struct Finished {
  bool exited = false;  // false: killed by a signal
  int code = -1;        // exit code, or the signal's number
  int status = -1;      // as a shell reports it: code, or 128 + signal
  std::string out;
  std::string err;
  long long ended_ns = 0;  // CLOCK_MONOTONIC, comparable with what workers write
  double seconds = 0;      // since start
};

using EnvironmentChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

// Whatever runs a test (a CI job under srun, say), nothing inherited names a run, a rank, a
// launcher or accel's timeouts; `extra` comes on top. OMP_NUM_THREADS is set, so that the
// launcher's note on the threads it would set (threads.hpp) stays out of the stderr the tests
// expect empty; test_threads.cpp covers the note.
inline EnvironmentChanges fresh(EnvironmentChanges extra = {}) {
  EnvironmentChanges changes;
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "SLURM_PROCID",
        "OMPI_COMM_WORLD_RANK", "ACCEL_NPROC", "ACCEL_STORE_DIR", "MASTER_ADDR", "MASTER_PORT",
        "ACCEL_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE",
        "OMPI_MCA_ess_base_jobid", "ACCEL_SHARED_MEMORY", "ACCEL_TIMEOUT",
        "ACCEL_RENDEZVOUS_TIMEOUT", "ACCEL_ERROR_FILE"})
    changes.emplace_back(name, std::nullopt);
  changes.emplace_back("OMP_NUM_THREADS", "1");
  changes.insert(changes.end(), extra.begin(), extra.end());
  return changes;
}

// Where the launcher's stdout goes: a file (read into Finished::out); a pipe whose read end the
// test holds (Process::stdout_pipe()) and reads; or a pipe that is full before the launcher
// starts and that nobody reads, so that the launcher's first write to it blocks for good.
enum class Stdout { file, pipe, stuck_pipe };

// Fills a pipe to the brim through its write end, which stays blocking afterwards.
inline void fill_pipe(int write_end) {
  const int flags = ::fcntl(write_end, F_GETFL);
  REQUIRE(::fcntl(write_end, F_SETFL, flags | O_NONBLOCK) == 0);
  const std::string block(4096, '#');
  while (::write(write_end, block.data(), block.size()) > 0) {
  }
  const std::string byte(1, '#');  // the last partial page, if any
  while (::write(write_end, byte.data(), 1) > 0) {
  }
  REQUIRE(::fcntl(write_end, F_SETFL, flags) == 0);
}

// `name` names its output files in `dir` (NAME.out, NAME.err): several processes of one test
// (the ranks of a job started by hand) each get their own.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const TestDir& dir,
          const EnvironmentChanges& environment = {}, Stdout stdout_to = Stdout::file,
          const std::string& name = "launcher")
      : out_(dir.file(name + ".out")), err_(dir.file(name + ".err")) {
    const std::string dir_path = dir.path();
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    int pipe_ends[2] = {-1, -1};
    if (stdout_to != Stdout::file) REQUIRE(::pipe2(pipe_ends, O_CLOEXEC) == 0);
    if (stdout_to == Stdout::stuck_pipe) fill_pipe(pipe_ends[1]);
    started_ = Clock::now();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::setpgid(0, 0);
      // Whatever the test runner ignores or blocks, the launcher starts with the defaults.
      for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD})
        ::signal(signal, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      // The launcher's private folder goes inside the test's, which is removed whatever happens
      // (a launcher killed with SIGKILL cannot remove it itself).
      ::setenv("TMPDIR", dir_path.c_str(), 1);
      for (const auto& [name, value] : environment) {
        if (value)
          ::setenv(name.c_str(), value->c_str(), 1);
        else
          ::unsetenv(name.c_str());
      }
      const int null = ::open("/dev/null", O_RDONLY);
      const int out = stdout_to != Stdout::file
                          ? pipe_ends[1]
                          : ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(null, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
    if (stdout_to != Stdout::file) {
      ::close(pipe_ends[1]);  // the launcher holds the only write end: EOF when it is gone
      stdout_pipe_ = pipe_ends[0];
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (stdout_pipe_ >= 0) ::close(stdout_pipe_);
    if (reaped_) return;
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  [[nodiscard]] pid_t pid() const { return pid_; }
  // The read end of the launcher's stdout with a pipe, else -1.
  [[nodiscard]] int stdout_pipe() const { return stdout_pipe_; }

  // Waits at most `limit` (a hang guard, far above what any test expects).
  Finished wait(std::chrono::seconds limit = std::chrono::seconds(60)) {
    Finished result;
    int status = 0;
    for (;;) {
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) break;
      if (Clock::now() - started_ > limit) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        reaped_ = true;
        FAIL("the launcher was still running after " << limit.count() << " s; its stderr:\n"
                                                     << read_file(err_));
      }
      sleep_ms(2);
    }
    reaped_ = true;
    result.ended_ns = monotonic_ns();
    result.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    result.exited = WIFEXITED(status);
    result.code = result.exited ? WEXITSTATUS(status) : WTERMSIG(status);
    result.status = result.exited ? result.code : 128 + result.code;
    result.out = read_file(out_);
    result.err = read_file(err_);
    return result;
  }

 private:
  std::string out_;
  std::string err_;
  Clock::time_point started_;
  pid_t pid_ = -1;
  int stdout_pipe_ = -1;
  bool reaped_ = false;
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace launch_test
