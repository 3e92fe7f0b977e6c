// The check macro and the runner every distributed test program uses, without torch (the
// shared-memory transport's worker has none): main runs one named scenario on this rank.
//
// A worker's scenario names are written once, in its table: each entry on a line of its own that
// starts with {"<name>", since tests/distributed/CMakeLists.txt reads them from there to register
// the dist.<name>.<ranks> tests. dist.scenario_table.<worker> checks that reading against the
// worker's own --list.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#define EXPECT(condition)                                                                     \
  do {                                                                                        \
    if (!(condition))                                                                         \
      throw std::runtime_error(fmt::format("check failed at {}:{}: {}", __FILE__, __LINE__,   \
                                           #condition));                                      \
  } while (0)

namespace accel_test {

using Scenarios = std::map<std::string, std::function<void()>>;

// This process's rank as the launcher gave it ("0" without one).
inline const char* this_rank() { return std::getenv("RANK") ? std::getenv("RANK") : "0"; }

// One scenario on this rank: 0 when its checks pass, 1 naming the failed check otherwise.
inline int run_one(const std::string& name, const std::function<void()>& run) {
  const char* rank = this_rank();
  try {
    run();
  } catch (const std::exception& error) {
    fmt::print(stderr, "rank {}: {} FAILED: {}\n", rank, name, error.what());
    return 1;
  }
  fmt::print("rank {}: {} passed\n", rank, name);
  std::fflush(stdout);
  return 0;
}

// --batch NAME,NAME...: the named scenarios one after the other in this process, stopping at
// the first that fails (its peers may be waiting in a collective it left; the launcher ends
// them). Each is recorded in $ACCEL_BATCH_RESULTS.rank<RANK>: a line "NAME started" before it
// runs, "NAME passed" or "NAME failed" after, so that tests/batch.sh can tell a scenario that
// failed from one that never finished and one that never ran, and name what stopped the batch.
// A group's ranks load libtorch once for all of its scenarios instead of once for each
// (tests/batch.sh). Exits 64 (EX_USAGE), before running any, when a name is not in the table or
// ACCEL_BATCH_RESULTS is not set, and when a line cannot be written.
inline int run_batch(std::string_view names, const Scenarios& scenarios) {
  const char* prefix = std::getenv("ACCEL_BATCH_RESULTS");
  if (prefix == nullptr) {
    fmt::print(stderr, "--batch: ACCEL_BATCH_RESULTS names no file prefix (tests/batch.sh)\n");
    return 64;
  }
  std::vector<Scenarios::const_iterator> batch;
  for (auto rest = names; !rest.empty();) {
    const auto comma = std::min(rest.find(','), rest.size());
    const auto found = scenarios.find(std::string(rest.substr(0, comma)));
    if (found == scenarios.end()) {
      fmt::print(stderr, "--batch: no scenario '{}' in this worker (--list names them)\n",
                 rest.substr(0, comma));
      return 64;
    }
    batch.push_back(found);
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  const std::string results = fmt::format("{}.rank{}", prefix, this_rank());
  const auto record = [&](const std::string& name, const char* what) {
    std::FILE* file = std::fopen(results.c_str(), "a");
    bool written = file != nullptr && std::fprintf(file, "%s %s\n", name.c_str(), what) >= 0;
    if (file != nullptr && std::fclose(file) != 0) written = false;
    if (!written) fmt::print(stderr, "--batch: cannot append to {}\n", results);
    return written;
  };
  for (const auto& scenario : batch) {
    if (!record(scenario->first, "started")) return 64;
    const int status = run_one(scenario->first, scenario->second);
    if (!record(scenario->first, status == 0 ? "passed" : "failed")) return 64;
    if (status != 0) return status;
  }
  return 0;
}

// Exits 0 when the scenario's checks pass on this rank; 1 naming the failed check otherwise;
// 2 for an unknown scenario. With --list: prints the scenario names, one a line, and exits 0.
// With --batch: run_batch.
inline int run_scenario(int argc, char** argv, const Scenarios& scenarios) {
  if (argc == 2 && std::string_view(argv[1]) == "--list") {
    for (const auto& [name, run] : scenarios) fmt::print("{}\n", name);
    return 0;
  }
  if (argc == 3 && std::string_view(argv[1]) == "--batch") return run_batch(argv[2], scenarios);
  const auto found = argc == 2 ? scenarios.find(argv[1]) : scenarios.end();
  if (found == scenarios.end()) {
    fmt::print(stderr, "usage: {} SCENARIO|--list|--batch NAME,NAME... (one of:",
               argc > 0 ? argv[0] : "worker");
    for (const auto& [name, run] : scenarios) fmt::print(stderr, " {}", name);
    fmt::print(stderr, ")\n");
    return 2;
  }
  return run_one(found->first, found->second);
}

}  // namespace accel_test
