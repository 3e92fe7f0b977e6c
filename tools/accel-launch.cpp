// accel-launch --nproc N [--nnodes M --node-rank K --master-addr H --master-port P] [--grace S]
//              [--rank-prefix] -- CMD ARGS...
// Everything is in accel/launch.hpp; see docs/launching.md.
#include <accel/launch.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  try {
    const accel::LaunchCommandLine line = accel::parse_launch_command_line(argc, argv);
    if (line.help) {
      std::fwrite(accel::launch_usage.data(), 1, accel::launch_usage.size(), stdout);
      return 0;
    }
    return accel::launch_workers(line.options, line.command);
  } catch (const accel::LaunchError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
}
