// accel-check env | test: the torch side of `accel-launch env` and `accel-launch test`
// (accel-launch itself links no torch and runs this program, found beside it). `env` prints the
// environment report; `test` is one rank of the self-test, started by accel-launch on every
// process. See docs/launching.md.
#include <accel/diagnostics/environment_report.hpp>
#include <accel/diagnostics/self_test.hpp>

#include <cstdio>
#include <exception>
#include <string_view>

int main(int argc, char** argv) {
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
  std::fprintf(stderr, "usage: accel-check env|test (run through accel-launch env / accel-launch test)\n");
  return 2;
}
