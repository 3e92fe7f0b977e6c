// accel-check env | test | checkpoint ...: the torch side of `accel-launch env`, `accel-launch
// test` and `accel-launch checkpoint` (accel-launch itself links no torch and runs this program,
// found beside it). `env` prints the environment report; `test` is one rank of the self-test,
// started by accel-launch on every process; `checkpoint` reads a checkpoint folder
// (accel/tools/checkpoint_command.hpp). See docs/how-to/launching.md and docs/how-to/resume.md.
#include <accel/tools/environment_report.hpp>
#include <accel/tools/self_test.hpp>
#include <accel/tools/checkpoint_command.hpp>

#include <cstdio>
#include <exception>
#include <string_view>

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "checkpoint")
    return accel::state::checkpoint_command(argc - 1, argv + 1);
  const std::string_view mode = argc == 2 ? argv[1] : "";
  try {
    if (mode == "env") {
      std::fputs(accel::diagnostics::to_text(accel::diagnostics::environment_report()).c_str(),
                 stdout);
      return 0;
    }
    if (mode == "test") return accel::diagnostics::self_test();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "accel-check %s: %s\n", argv[1], error.what());
    return 1;
  }
  std::fprintf(stderr, "usage: accel-check env|test|checkpoint (run through accel-launch env / test / checkpoint)\n");
  return 2;
}
