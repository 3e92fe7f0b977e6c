// A worker for the launcher tests, started through accel::launch() (so `--nproc N` makes it
// its own launcher). What it does is chosen by its arguments:
//
//   --dir D               where it writes pid.R, ready.R, env.R, grandchild.R (R = its RANK)
//   --dump-env            write env.R: the launcher's variables, the store folder's mode, argv
//   --grandchild          start a child that sleeps forever; write its pid to grandchild.R
//   --grandchild-setsid   the same, in a session of its own (out of the worker's process group)
//   --ignore-sigterm      ignore SIGTERM (the grandchild too)
//   --print TEXT          print "TEXT from rank R" on stdout, a line and a partial line on stderr
//   --print-lines N       print N numbered lines of 100 bytes (newline included) on stdout
//   --fail-rank R         rank R exits with --exit-code once every rank is ready
//   --fail-on-file NAME   ... and once D/NAME exists (the test says when)
//   --fail-after-rank R   every other rank waits until rank R's process has ended, then exits
//                         with 1, as a peer does when its connection to a dead rank breaks
//   --flood-rank R        rank R, once ready, prints 100-byte lines on stdout until killed;
//                         past 70 KiB (more than its pipe, 64 KiB, and stdio's buffer hold, so
//                         the launcher has read some) it writes flooded.R
//   --kill-rank R         rank R sends itself SIGKILL once every rank is ready
//   --stop-rank R         rank R stops itself (SIGSTOP) once it is ready
//   --sleep S             every other rank sleeps S seconds, then exits with 0
//   --exit-code C         the failing rank's exit code; without --fail-rank, every rank's
//   --call-exit           end with std::exit() instead of returning from main
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <accel/launch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

struct Behaviour {
  std::string dir;
  bool dump_env = false;
  bool grandchild = false;
  bool grandchild_setsid = false;
  bool ignore_sigterm = false;
  std::string print;
  int print_lines = 0;
  int fail_rank = -1;
  std::string fail_on_file;
  int fail_after_rank = -1;
  int flood_rank = -1;
  int kill_rank = -1;
  int stop_rank = -1;
  int exit_code = 0;
  double sleep_seconds = 0;
  bool call_exit = false;
};

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "<unset>";
}

// Written to a temporary name and renamed, so that a reader never sees half a file.
void write_file(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp";
  FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) std::_Exit(90);
  std::fputs(content.c_str(), file);
  std::fclose(file);
  std::rename(temporary.c_str(), path.c_str());
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string read_file(const std::string& path) {
  std::string text;
  if (FILE* file = std::fopen(path.c_str(), "r")) {
    char buffer[256];
    for (std::size_t count; (count = std::fread(buffer, 1, sizeof buffer, file)) > 0;)
      text.append(buffer, count);
    std::fclose(file);
  }
  return text;
}

long long monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1'000'000'000LL + now.tv_nsec;
}

void sleep_seconds(double seconds) {
  timespec duration{static_cast<time_t>(seconds),
                    static_cast<long>((seconds - static_cast<time_t>(seconds)) * 1e9)};
  while (::nanosleep(&duration, &duration) != 0) {
  }
}

// Waits until every rank has written its ready file (at most a minute).
void wait_for_every_rank(const Behaviour& b, int world_size) {
  for (int r = 0; r < world_size; ++r)
    for (int tries = 0; !exists(b.dir + "/ready." + std::to_string(r)) && tries < 6000; ++tries)
      sleep_seconds(0.01);
}

// Blocks until process `pid` has ended (a zombie counts): its pidfd becomes readable then.
void wait_for_exit(pid_t pid) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return;  // already reaped: gone
  pollfd ended{fd, POLLIN, 0};
  while (::poll(&ended, 1, -1) < 0) {
  }
  ::close(fd);
}

[[noreturn]] void flood(const Behaviour& b, const std::string& rank) {
  const std::string tail(78, 'x');  // 100 bytes a line for a one-digit rank
  const long marker_line = 70 * 1024 / 100;
  for (long line = 0;; ++line) {
    std::printf("rank %s flood %07ld %s\n", rank.c_str(), line % 10'000'000, tail.c_str());
    if (line == marker_line) write_file(b.dir + "/flooded." + rank, "1\n");
  }
}

void start_grandchild(const Behaviour& b, const std::string& rank) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (b.grandchild_setsid) ::setsid();
    for (;;) ::pause();
  }
  write_file(b.dir + "/grandchild." + rank, std::to_string(pid) + "\n");
}

int worker_main(int argc, char** argv) {
  Behaviour b;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (arg == "--dir")
      b.dir = value();
    else if (arg == "--dump-env")
      b.dump_env = true;
    else if (arg == "--grandchild")
      b.grandchild = true;
    else if (arg == "--grandchild-setsid")
      b.grandchild = b.grandchild_setsid = true;
    else if (arg == "--ignore-sigterm")
      b.ignore_sigterm = true;
    else if (arg == "--print")
      b.print = value();
    else if (arg == "--print-lines")
      b.print_lines = std::stoi(value());
    else if (arg == "--fail-rank")
      b.fail_rank = std::stoi(value());
    else if (arg == "--fail-on-file")
      b.fail_on_file = value();
    else if (arg == "--fail-after-rank")
      b.fail_after_rank = std::stoi(value());
    else if (arg == "--flood-rank")
      b.flood_rank = std::stoi(value());
    else if (arg == "--kill-rank")
      b.kill_rank = std::stoi(value());
    else if (arg == "--stop-rank")
      b.stop_rank = std::stoi(value());
    else if (arg == "--exit-code")
      b.exit_code = std::stoi(value());
    else if (arg == "--call-exit")
      b.call_exit = true;
    else if (arg == "--sleep")
      b.sleep_seconds = std::stod(value());
    else {
      std::fprintf(stderr, "worker: unknown argument '%s'\n", argv[i]);
      return 64;
    }
  }
  const std::string rank = std::getenv("RANK") ? std::getenv("RANK") : "none";
  const int world_size = std::getenv("WORLD_SIZE") ? std::atoi(std::getenv("WORLD_SIZE")) : 1;
  if (b.ignore_sigterm) ::signal(SIGTERM, SIG_IGN);
  if (!b.dir.empty()) write_file(b.dir + "/pid." + rank, std::to_string(::getpid()) + "\n");
  if (b.grandchild) start_grandchild(b, rank);

  if (b.dump_env) {
    std::string text;
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                             "MASTER_ADDR", "MASTER_PORT", "ACCEL_STORE_DIR", "ACCEL_RUN_ID",
                             "ACCEL_ERROR_FILE"})
      text += std::string(name) + "=" + env(name) + "\n";
    struct stat info {};
    if (std::getenv("ACCEL_STORE_DIR") && ::stat(std::getenv("ACCEL_STORE_DIR"), &info) == 0) {
      char mode[16];
      std::snprintf(mode, sizeof mode, "%o", static_cast<unsigned>(info.st_mode & 07777));
      text += std::string("store_mode=") + mode + "\n";
      text += std::string("store_is_dir=") + (S_ISDIR(info.st_mode) ? "1" : "0") + "\n";
    }
    text += "argv=";
    for (int i = 1; i < argc; ++i) text += std::string(i > 1 ? " " : "") + argv[i];
    text += "\npid=" + std::to_string(::getpid()) + "\n";
    write_file(b.dir + "/env." + rank, text);
  }
  if (!b.print.empty()) {
    std::printf("%s from rank %s\n", b.print.c_str(), rank.c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "error line from rank %s\npartial from rank %s", rank.c_str(),
                 rank.c_str());
  }
  for (int line = 0; line < b.print_lines; ++line)
    std::printf("rank %s line %07d %s\n", rank.c_str(), line, std::string(79, 'x').c_str());
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return 65;  // output lost: EAGAIN, EPIPE
  if (!b.dir.empty()) write_file(b.dir + "/ready." + rank, "1\n");

  if (std::to_string(b.stop_rank) == rank) ::raise(SIGSTOP);
  if (std::to_string(b.flood_rank) == rank) flood(b, rank);
  const bool fails = std::to_string(b.fail_rank) == rank;
  const bool killed = std::to_string(b.kill_rank) == rank;
  if (fails || killed) {
    // Everyone has started (and started its grandchild) before this rank fails.
    wait_for_every_rank(b, world_size);
    for (int tries = 0;
         !b.fail_on_file.empty() && !exists(b.dir + "/" + b.fail_on_file) && tries < 6000; ++tries)
      sleep_seconds(0.01);
    write_file(b.dir + "/failed-at", std::to_string(monotonic_ns()) + "\n");
    if (killed) ::kill(::getpid(), SIGKILL);
    return b.exit_code;
  }
  if (b.fail_after_rank >= 0 && std::to_string(b.fail_after_rank) != rank) {
    wait_for_every_rank(b, world_size);
    const std::string peer = std::to_string(b.fail_after_rank);
    wait_for_exit(static_cast<pid_t>(std::atol(read_file(b.dir + "/pid." + peer).c_str())));
    std::fprintf(stderr, "rank %s: the connection to rank %s broke\n", rank.c_str(), peer.c_str());
    return 1;
  }
  if (b.sleep_seconds > 0) sleep_seconds(b.sleep_seconds);
  if (b.call_exit) std::exit(b.fail_rank >= 0 || b.kill_rank >= 0 ? 0 : b.exit_code);
  return b.fail_rank >= 0 || b.kill_rank >= 0 ? 0 : b.exit_code;
}

}  // namespace

int main(int argc, char** argv) { return accel::launch(argc, argv, worker_main); }
