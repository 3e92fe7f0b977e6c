// The launcher's command line parsers; command_line.hpp includes it in header-only mode.
#pragma once

#include "../command_line.hpp"

namespace accel::launcher {

ACCEL_DECL int parse_whole_number(std::string_view text, const std::string& shown,
                                  const std::string& fix) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size())
    fail(shown + " is not a whole number; " + fix);
  return value;
}

ACCEL_DECL std::chrono::milliseconds parse_seconds(std::string_view text, std::string_view flag) {
  const std::string name(flag);
  const std::string example = flag == "--grace" ? " 5" : " 30";
  double seconds = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() ||
      !(seconds >= -1e6 && seconds <= 1e6))  // also false for nan and infinities
    fail(name + " '" + std::string(text) + "' is not a number of seconds; give one such as " +
         name + example + " or " + name + " 0.5");
  if (seconds < 0)
    fail(name + " " + std::string(text) + " is negative; give " +
         (flag == "--grace" ? "the seconds between SIGTERM and SIGKILL"
                            : "the seconds node 0 waits for the other nodes at a start") +
         ", e.g. " + name + example);
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000 + 0.5));
}

ACCEL_DECL void parse_nnodes(std::string_view text, LaunchOptions& options) {
  const auto colon = text.find(':');
  const std::string shown = "--nnodes '" + std::string(text) + "'";
  const std::string fix = "give the number of nodes, e.g. --nnodes 2, or the fewest and the most "
                          "a restart may go on with, e.g. --nnodes 1:2";
  if (colon == std::string_view::npos) {
    options.nnodes = parse_whole_number(text, shown, fix);
    return;
  }
  options.min_nodes = parse_whole_number(text.substr(0, colon), shown, fix);
  options.nnodes = parse_whole_number(text.substr(colon + 1), shown, fix);
  if (options.min_nodes < 1)
    fail("--nnodes " + std::string(text) + " is out of range; give MIN:MAX with 1 <= MIN <= MAX, "
         "e.g. --nnodes 1:2");
}

ACCEL_DECL int nproc_from_environment(int fallback) {
  const char* raw = std::getenv("ACCEL_NPROC");
  if (raw == nullptr || *raw == '\0') return fallback;
  const std::string text(raw);
  const int value = parse_whole_number(
      text, "ACCEL_NPROC='" + text + "'",
      "set it to the number of worker processes per node (e.g. ACCEL_NPROC=2) or unset it");
  if (value < 1)
    fail("ACCEL_NPROC=" + text +
         " is out of range; set it to at least 1 (e.g. ACCEL_NPROC=2) or unset it");
  return value;
}

ACCEL_DECL ProgramArguments take_nproc_argument(int argc, const char* const* argv) {
  ProgramArguments result;
  bool options_ended = false;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i == 0 || options_ended) {
      result.arguments.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      result.arguments.emplace_back(arg);
    } else if (arg == "--nproc") {
      if (i + 1 >= argc) fail("--nproc needs a value, e.g. --nproc 2");
      result.nproc = parse_nproc_flag(argv[++i]);
    } else if (arg.starts_with("--nproc=")) {
      result.nproc = parse_nproc_flag(arg.substr(8));
    } else {
      result.arguments.emplace_back(arg);
    }
  }
  return result;
}

}  // namespace accel::launcher

namespace accel {

ACCEL_DECL LaunchCommandLine parse_launch_command_line(int argc, const char* const* argv) {
  using launcher::fail;
  LaunchCommandLine line;
  LaunchOptions& options = line.options;
  std::optional<int> nproc;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (!arg.starts_with("-") || arg == "-") break;
    if (arg == "-h" || arg == "--help") {
      line.help = true;
      return line;
    }
    const auto equals = arg.find('=');
    const std::string_view name = arg.substr(0, equals);
    std::optional<std::string_view> inline_value;
    if (equals != std::string_view::npos) inline_value = arg.substr(equals + 1);

    if (name == "--rank-prefix") {
      if (inline_value) fail("--rank-prefix takes no value; write just --rank-prefix");
      options.rank_prefix = true;
      continue;
    }
    const auto known = {"--nproc",       "--nnodes",      "--node-rank",    "--master-addr",
                        "--master-port", "--grace",       "--max-restarts", "--min-nodes",
                        "--rendezvous-deadline"};
    bool is_known = false;
    for (const std::string_view option : known) is_known = is_known || name == option;
    if (!is_known)
      fail("unknown option '" + std::string(arg) +
           "'; run accel-launch --help for the options, and put the command after --");
    std::string_view value;
    if (inline_value) {
      value = *inline_value;
    } else {
      if (i + 1 >= argc) fail(std::string(name) + " needs a value; run accel-launch --help");
      value = argv[++i];
    }
    const std::string shown = std::string(name) + " '" + std::string(value) + "'";
    if (name == "--nproc") {
      nproc = launcher::parse_nproc_flag(value);
    } else if (name == "--nnodes") {
      launcher::parse_nnodes(value, options);
    } else if (name == "--min-nodes") {
      options.min_nodes = launcher::parse_whole_number(
          value, shown, "give the fewest nodes a restart may go on with, e.g. --min-nodes 1");
      if (options.min_nodes < 1)
        fail("--min-nodes " + std::to_string(options.min_nodes) +
             " is out of range; give at least 1, e.g. --min-nodes 1");
    } else if (name == "--rendezvous-deadline") {
      options.rendezvous_deadline = launcher::parse_seconds(value, "--rendezvous-deadline");
    } else if (name == "--node-rank") {
      options.node_rank = launcher::parse_whole_number(
          value, shown, "give this node's index counted from 0, e.g. --node-rank 1");
    } else if (name == "--master-addr") {
      if (value.empty()) fail("--master-addr needs a host name or address, e.g. 10.0.0.1");
      options.master_addr = std::string(value);
    } else if (name == "--master-port") {
      options.master_port = launcher::parse_whole_number(
          value, shown, "give a port from 1 to 65535, e.g. --master-port 29500");
    } else if (name == "--max-restarts") {
      options.max_restarts = launcher::parse_whole_number(
          value, shown, "give how many times the group may be started again, e.g. --max-restarts 3");
    } else {
      options.grace = launcher::parse_seconds(value);
    }
  }
  options.nproc = nproc ? *nproc : launcher::nproc_from_environment(options.nproc);
  for (; i < argc; ++i) line.command.emplace_back(argv[i]);
  if (line.command.empty())
    fail("no command to launch; write it after --, e.g. accel-launch --nproc 2 -- ./train");
  launcher::validate(options);
  return line;
}

}  // namespace accel
