// The launcher's subcommands; subcommands.hpp includes it.
#pragma once

#include "../subcommands.hpp"

namespace accel::launcher {

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

inline std::int64_t parameter_count(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  double scale = 1;
  const std::string suffix = end != nullptr ? std::string(end) : std::string();
  if (suffix == "K" || suffix == "k") scale = 1e3;
  else if (suffix == "M" || suffix == "m") scale = 1e6;
  else if (suffix == "B" || suffix == "b" || suffix == "G" || suffix == "g") scale = 1e9;
  else if (!suffix.empty()) scale = -1;
  if (end == text.c_str() || scale <= 0 || !(value > 0))
    fail("accel-launch estimate-memory: --params '" + text +
         "' is not a positive count; give one like 125000, 350M or 7B");
  return static_cast<std::int64_t>(value * scale + 0.5);
}

inline std::string bytes_text(std::int64_t bytes) {
  char out[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(out, sizeof out, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(out, sizeof out, "%.2f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(out, sizeof out, "%.2f KiB", b / 1024.0);
  else std::snprintf(out, sizeof out, "%lld B", static_cast<long long>(bytes));
  return out;
}

inline int estimate_memory(int argc, const char* const* argv) {
  std::int64_t params = 0;
  std::int64_t split_params = -1;  // --tp-params; -1: all of --params
  int world = 1, per_node = 0, bytes_per_param = 4, tp = 1;
  std::vector<std::string> strategies;
  std::string optimizer = "adam";
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fwrite(estimate_memory_usage.data(), 1, estimate_memory_usage.size(), stdout);
      return 0;
    }
    if (arg != "--params" && arg != "--strategy" && arg != "--world" && arg != "--optimizer" &&
        arg != "--bytes-per-param" && arg != "--nproc-per-node" && arg != "--tp" &&
        arg != "--tp-params")
      fail("accel-launch estimate-memory takes --params, --strategy, --world, --nproc-per-node, "
           "--optimizer, --bytes-per-param, --tp and --tp-params, not '" + arg + "'; e.g. "
           "accel-launch estimate-memory --params 7B --strategy zero3 --world 8");
    if (i + 1 >= argc) fail("accel-launch estimate-memory: " + arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--params") params = parameter_count(value);
    if (arg == "--tp-params") split_params = parameter_count(value);
    if (arg == "--tp") {
      tp = std::atoi(value.c_str());
      if (tp < 1 || std::to_string(tp) != value)
        fail("accel-launch estimate-memory: --tp '" + value + "' is not a tensor-parallel degree "
             ">= 1");
    }
    if (arg == "--strategy") {
      if (!memory::sharding_of(value))
        fail("accel-launch estimate-memory: --strategy '" + value + "' is none of ddp, zero2, "
             "zero3, fsdp-no-shard, fsdp-shard-grad-op, fsdp-full-shard, fsdp-hybrid-shard");
      strategies.push_back(value);
    }
    if (arg == "--world") {
      world = std::atoi(value.c_str());
      if (world < 1 || std::to_string(world) != value)
        fail("accel-launch estimate-memory: --world '" + value + "' is not a process count >= 1");
    }
    if (arg == "--nproc-per-node") {
      per_node = std::atoi(value.c_str());
      if (per_node < 1 || std::to_string(per_node) != value)
        fail("accel-launch estimate-memory: --nproc-per-node '" + value +
             "' is not a process count >= 1");
    }
    if (arg == "--optimizer") {
      if (!optimizer_kind(value))
        fail("accel-launch estimate-memory: --optimizer '" + value + "' is none of adam, adamw, "
             "sgd, sgd-momentum, adagrad, rmsprop");
      optimizer = value;
    }
    if (arg == "--bytes-per-param") {
      bytes_per_param = std::atoi(value.c_str());
      if (bytes_per_param != 2 && bytes_per_param != 4 && bytes_per_param != 8)
        fail("accel-launch estimate-memory: --bytes-per-param '" + value + "' is not 2, 4 or 8");
    }
  }
  if (params == 0)
    fail("accel-launch estimate-memory needs --params N, the model's trainable parameter count "
         "(e.g. --params 350M)");
  if (per_node == 0) per_node = world;
  if (world % per_node != 0)
    fail("accel-launch estimate-memory: --nproc-per-node " + std::to_string(per_node) +
         " does not divide --world " + std::to_string(world) + "; every node runs as many");
  if (strategies.empty()) strategies = {"ddp", "zero2", "zero3"};
  // Tensor parallelism: a rank holds 1/tp of the split layers' parameters and the others whole;
  // the strategy then shards what it holds over the data-parallel dimension, world / tp ranks.
  if (world % tp != 0)
    fail("accel-launch estimate-memory: --world " + std::to_string(world) + " is not a multiple "
         "of --tp " + std::to_string(tp) + "; every tensor-parallel group holds --tp ranks: "
         "pass a --world that --tp divides");
  if (split_params >= 0 && tp == 1)
    fail("accel-launch estimate-memory: --tp-params counts the parameters split across a "
         "tensor-parallel group; give the degree too (--tp 2, or more)");
  const std::string split_flag = split_params < 0 ? "--params" : "--tp-params";
  if (split_params < 0) split_params = params;
  if (split_params > params)
    fail("accel-launch estimate-memory: --tp-params " + std::to_string(split_params) +
         " is more than --params " + std::to_string(params) + "; the split layers' parameters "
         "are part of the model's");
  if (split_params % tp != 0)
    fail("accel-launch estimate-memory: " + split_flag + " " + std::to_string(split_params) +
         " (the parameters in split layers) does not split evenly across --tp " +
         std::to_string(tp) + "; a split layer's dimension is a multiple of the degree, so its "
         "parameters are too: give the split layers' count with --tp-params");
  if (tp > 1)
    for (const auto& name : strategies)
      if (name == "fsdp-hybrid-shard")
        fail("accel-launch estimate-memory: fsdp-hybrid-shard does not compose with --tp (its "
             "node groups would cross the tensor-parallel groups); use zero3 or fsdp-full-shard");
  const std::int64_t held = params - split_params + split_params / tp;
  std::printf("%lld parameters, %d byte(s) each, %s, %d process(es); bytes per rank between steps\n",
              static_cast<long long>(params), bytes_per_param, optimizer.c_str(), world);
  if (tp > 1)
    std::printf("tensor-parallel degree %d: %lld split (1/%d on each rank), %lld whole; %lld per "
                "rank, over %d data-parallel rank(s)\n",
                tp, static_cast<long long>(split_params), tp,
                static_cast<long long>(params - split_params), static_cast<long long>(held),
                world / tp);
  std::printf("%-20s %14s %14s %16s %14s %18s\n", "strategy", "parameters", "gradients",
              "optimizer state", "total", "+ during backward");
  for (const auto& name : strategies) {
    // fsdp-hybrid-shard shards within a node: there, the node is the world.
    const int sharded_over = name == "fsdp-hybrid-shard" ? per_node : world / tp;
    const memory::Sharding sharding = *memory::sharding_of(name);
    // Zero2's flats are its buckets, of Options::zero2's defaults (1 MiB, then 25 MiB; none in
    // flight).
    const auto flats = sharding == memory::Sharding::gradients_and_state
                           ? memory::buckets_of_count(held, bytes_per_param, 1.0, 25.0)
                           : std::vector<memory::FlatGroup>{{held, bytes_per_param, 0}};
    const auto e = memory::estimate_flats(sharding, flats, 0, sharded_over, 0,
                                          *optimizer_kind(optimizer));
    std::printf("%-20s %14s %14s %16s %14s %18s\n", name.c_str(), bytes_text(e.parameters).c_str(),
                bytes_text(e.gradients).c_str(), bytes_text(e.optimizer_state).c_str(),
                bytes_text(e.total()).c_str(), bytes_text(e.backward_extra).c_str());
  }
  return 0;
}

}  // namespace accel::launcher

namespace accel {

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
  if (subcommand == "checkpoint") {
    const std::string check = launcher::accel_check_program("checkpoint");
    std::vector<const char*> arguments{check.c_str()};
    arguments.insert(arguments.end(), argv + 1, argv + argc);
    arguments.push_back(nullptr);
    ::execv(check.c_str(), const_cast<char* const*>(arguments.data()));
    launcher::fail_with_errno("cannot run " + check);
  }
  if (subcommand == "estimate-memory") return launcher::estimate_memory(argc, argv);
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
