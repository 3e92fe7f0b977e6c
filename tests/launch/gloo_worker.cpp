// A worker with torch for the launcher tests of the rendezvous and of failures over Gloo. It
// joins the job's process group through accel's runtime (no Accelerator: the group alone), as
// rank RANK of WORLD_SIZE, started by accel::launch() (`--nproc N`) or with the variables set by
// hand. What it does then is chosen by its arguments:
//
//   (none)             a barrier and an all-reduce, then exit 0
//   --dir D            where it writes pid.R and entering.R (R = its RANK)
//   --throw-rank R     every other rank writes entering.R and enters a barrier that rank R never
//                      joins; rank R waits until they are in it, then throws an error of its own
//   --linger S         ... and, its group gone, takes S more seconds to end (a slow exit: the
//                      others' failure on the closed connection then always ends first)
//   --squat            before joining, create the shared-memory segment names that anyone who
//                      sees the launch's folder in $TMPDIR could predict, as a squatter would
//
// Every error ends the worker with its message (one line) on stderr and status 1.
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <accel/launch.hpp>
#include <accel/runtime/bootstrap.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

namespace {

struct Behaviour {
  std::string dir;
  int throw_rank = -1;
  double linger = 0;
  bool squat = false;
};

double linger_after_error = 0;  // set by the rank that throws on purpose

void write_file(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp";
  FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) throw std::runtime_error("cannot write " + temporary);
  std::fputs(content.c_str(), file);
  std::fclose(file);
  std::rename(temporary.c_str(), path.c_str());
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The names the shared-memory path used before its names had a random part: derived from the
// launch's folder, which every user of the machine can list in /tmp.
void squat(const accel::runtime::Environment& env) {
  if (env.store_dir.empty()) return;
  const std::string token = accel::runtime::shm::run_token_of(env.store_dir);
  for (const std::string group : {"0", "1"}) {
    const std::string name = "/accel-shm." + token + "." + group;
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) ::close(fd);  // left for the test to remove
  }
}

int run(int argc, char** argv) {
  Behaviour b;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (arg == "--dir")
      b.dir = value();
    else if (arg == "--throw-rank")
      b.throw_rank = std::stoi(value());
    else if (arg == "--linger")
      b.linger = std::stod(value());
    else if (arg == "--squat")
      b.squat = true;
    else
      throw std::runtime_error("gloo worker: unknown argument '" + std::string(arg) + "'");
  }
  const accel::runtime::Environment env = accel::runtime::read_environment();
  const int rank = env.process.rank;
  const std::string r = std::to_string(rank);
  if (!b.dir.empty()) write_file(b.dir + "/pid." + r, std::to_string(::getpid()) + "\n");
  if (b.squat) squat(env);

  const auto group = accel::runtime::join_group(env, torch::Device(torch::kCPU),
                                                accel::runtime::with_environment({}));
  if (b.throw_rank < 0) {
    group->barrier();
    torch::Tensor ones = torch::ones({4});
    group->allreduce(ones);
    if (ones[0].item<float>() != static_cast<float>(env.process.world_size))
      throw std::runtime_error("gloo worker: wrong all-reduce sum");
    return 0;
  }
  if (rank != b.throw_rank) {
    write_file(b.dir + "/entering." + r, "1\n");
    group->barrier();  // rank throw_rank never joins it
    return 0;
  }
  // Give the others time to be inside their barrier (waiting on Gloo's connections).
  for (int other = 0; other < env.process.world_size; ++other)
    for (int tries = 0;
         other != rank && !exists(b.dir + "/entering." + std::to_string(other)) && tries < 3000;
         ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  linger_after_error = b.linger;
  throw std::runtime_error("rank " + r + " fails on its own (--throw-rank)");
}

}  // namespace

int main(int argc, char** argv) {
  return accel::launch(argc, argv, [](int count, char** args) {
    try {
      return run(count, args);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s\n", error.what());
      std::this_thread::sleep_for(std::chrono::duration<double>(linger_after_error));
      return 1;
    }
  });
}
