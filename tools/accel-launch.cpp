// accel-launch [--config FILE] [--threads-per-process T] --nproc N [--nnodes M --node-rank K
//              --master-addr H --master-port P] [--grace S] [--rank-prefix] -- CMD ARGS...
// accel-launch env | test [--nproc N] | estimate-memory --params N ...   (accel/tools/subcommands.hpp)
// accel-launch config [-o FILE] [flags] (accel/tools/config_file.hpp), or its questions
//              (--interactive, or stdin a terminal and no setting given: tools/config_wizard.hpp)
// Everything is in accel/launch.hpp; see docs/how-to/launching.md.
#include <accel/launch.hpp>
#include <accel/tools/subcommands.hpp>
#include <cstdio>
#include <string_view>
#include <vector>
#if ACCEL_LAUNCH_HAS_YAML
#include <accel/tools/config_file.hpp>
#include <accel/tools/config_wizard.hpp>
#endif

int main(int argc, char** argv) {
  try {
    if (const auto status = accel::run_launch_subcommand(argc, argv)) return *status;
#if ACCEL_LAUNCH_HAS_YAML
    if (argc >= 2 && std::string_view(argv[1]) == "config") {
      if (const auto wizard = accel::launcher::wizard_request(argc, argv))
        return accel::launcher::run_config_wizard(*wizard);
      return accel::launcher::write_launch_config(argc, argv);
    }
    const auto configured = accel::launcher::apply_launch_config(argc, argv);
    std::vector<const char*> arguments;
    for (const auto& argument : configured.arguments) arguments.push_back(argument.c_str());
    accel::LaunchCommandLine line;
    try {
      line = accel::parse_launch_command_line(static_cast<int>(arguments.size()), arguments.data());
    } catch (const accel::LaunchError& error) {
      if (configured.config_path.empty()) throw;
      throw accel::LaunchError(std::string(error.what()) + " (the settings of --config " +
                               configured.config_path + " and the command line together; a key " +
                               "of the file is its flag without the dashes)");
    }
    if (!line.help) accel::launcher::apply_launch_extras(configured.extras);
#else
    for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i)
      if (std::string_view(argv[i]).starts_with("--config") || std::string_view(argv[1]) == "config")
        accel::launcher::fail("this accel-launch was built without yaml-cpp, so it reads no "
                              "--config file; install libyaml-cpp-dev and rebuild accel-launch");
    const accel::LaunchCommandLine line = accel::parse_launch_command_line(argc, argv);
#endif
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
