// accel-launch's subcommands, Accelerate's `accelerate env` and `accelerate test`:
//
//   accel-launch env                         what a bug report needs (versions, devices, BLAS, ...)
//   accel-launch test [--nproc N] [options]  a short self-check on N local processes (default 2)
//
// Both need torch, which accel-launch does not link: they run accel-check (tools/accel-check.cpp),
// found beside the accel-launch executable, else on PATH. A subcommand is recognised only as
// the very first argument; `accel-launch -- env ...` still launches a program named env.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "command_line.hpp"
#include "error.hpp"
#include "supervisor.hpp"

namespace accel {

inline constexpr std::string_view launch_test_usage =
    "usage: accel-launch test [--nproc N] [--grace S] [--rank-prefix]\n"
    "\n"
    "Runs accel's self-check on N local processes (default: ACCEL_NPROC, else 2): every\n"
    "collective the library uses, then a few Ddp and Zero2 steps compared with one process.\n"
    "Prints PASS or FAIL per check; exits 0 only when every check passed on every process.\n";

namespace launcher {

// `name` beside the running executable, else found on PATH; empty when neither has it.
inline std::string companion_program(const std::string& name) {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto beside = self.parent_path() / name;
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  const char* path = std::getenv("PATH");
  std::string_view folders = path != nullptr ? path : "";
  while (!folders.empty()) {
    const auto colon = folders.find(':');
    const std::string folder(folders.substr(0, colon));
    folders = colon == std::string_view::npos ? std::string_view() : folders.substr(colon + 1);
    if (folder.empty()) continue;
    const std::string candidate = folder + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

inline std::string accel_check_program(std::string_view subcommand) {
  const std::string found = companion_program("accel-check");
  if (found.empty())
    fail("accel-launch " + std::string(subcommand) +
         " runs accel-check, which is neither beside this accel-launch nor on PATH; build it "
         "(cmake --build BUILD --target accel-check) or install accel's tools");
  return found;
}

}  // namespace launcher

// Runs the subcommand argv[1] names and returns its exit status; nullopt when argv[1] is no
// subcommand (the arguments are then a launch). Throws LaunchError for a bad subcommand line.
inline std::optional<int> run_launch_subcommand(int argc, const char* const* argv) {
  if (argc < 2) return std::nullopt;
  const std::string_view subcommand = argv[1];
  if (subcommand == "env") {
    if (argc > 2)
      launcher::fail("accel-launch env takes no arguments, not '" + std::string(argv[2]) + "'");
    const std::string check = launcher::accel_check_program("env");
    const char* const arguments[] = {check.c_str(), "env", nullptr};
    ::execv(check.c_str(), const_cast<char* const*>(arguments));
    launcher::fail_with_errno("cannot run " + check);
  }
  if (subcommand != "test") return std::nullopt;

  std::vector<std::string> line{"accel-launch"};
  bool nproc_given = false;
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fwrite(launch_test_usage.data(), 1, launch_test_usage.size(), stdout);
      return 0;
    }
    if (arg != "--nproc" && !arg.starts_with("--nproc=") && arg != "--grace" &&
        !arg.starts_with("--grace=") && arg != "--rank-prefix")
      launcher::fail("accel-launch test takes --nproc, --grace and --rank-prefix, not '" +
                     std::string(arg) + "'; e.g. accel-launch test --nproc 3");
    nproc_given = nproc_given || arg.starts_with("--nproc");
    line.emplace_back(arg);
    if ((arg == "--nproc" || arg == "--grace") && i + 1 < argc) line.emplace_back(argv[++i]);
  }
  const char* from_environment = std::getenv("ACCEL_NPROC");
  if (!nproc_given && (from_environment == nullptr || *from_environment == '\0'))
    line.insert(line.begin() + 1, {"--nproc", "2"});
  const std::string check = launcher::accel_check_program("test");
  line.insert(line.end(), {"--", check, "test"});
  std::vector<const char*> pointers;
  for (const auto& word : line) pointers.push_back(word.c_str());
  const LaunchCommandLine parsed =
      parse_launch_command_line(static_cast<int>(pointers.size()), pointers.data());
  const int status = launch_workers(parsed.options, parsed.command);
  if (status != 0)
    std::fprintf(stderr, "accel-launch test: FAILED on %d process(es) (exit status %d)\n",
                 parsed.options.nproc, status);
  return status;
}

}  // namespace accel
