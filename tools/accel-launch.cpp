// accel-launch --nproc N [--nnodes M --node-rank K --master-addr H --master-port P] [--grace S]
//              [--rank-prefix] -- CMD ARGS...
// accel-launch env | test [--nproc N]  (launch/subcommands.hpp)
// Everything is in accel/launch.hpp; see docs/launching.md.
#include <accel/launch.hpp>
#include <accel/launch/subcommands.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  try {
    if (const auto status = accel::run_launch_subcommand(argc, argv)) return *status;
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
