// The check macro and the runner every distributed test program uses, without torch (the
// shared-memory transport's worker has none): main runs one named scenario on this rank.
//
// A worker's scenario names are written once, in its table: each entry on a line of its own that
// starts with {"<name>", since tests/distributed/CMakeLists.txt reads them from there to register
// the dist.<name>.<ranks> tests. dist.scenario_table.<worker> checks that reading against the
// worker's own --list.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#define EXPECT(condition)                                                                     \
  do {                                                                                        \
    if (!(condition))                                                                         \
      throw std::runtime_error(fmt::format("check failed at {}:{}: {}", __FILE__, __LINE__,   \
                                           #condition));                                      \
  } while (0)

namespace accel_test {

using Scenarios = std::map<std::string, std::function<void()>>;

// Exits 0 when the scenario's checks pass on this rank; 1 naming the failed check otherwise;
// 2 for an unknown scenario. With --list: prints the scenario names, one a line, and exits 0.
inline int run_scenario(int argc, char** argv, const Scenarios& scenarios) {
  if (argc == 2 && std::string_view(argv[1]) == "--list") {
    for (const auto& [name, run] : scenarios) fmt::print("{}\n", name);
    return 0;
  }
  const char* rank = std::getenv("RANK") ? std::getenv("RANK") : "0";
  const auto found = argc == 2 ? scenarios.find(argv[1]) : scenarios.end();
  if (found == scenarios.end()) {
    fmt::print(stderr, "usage: {} SCENARIO|--list (one of:", argc > 0 ? argv[0] : "worker");
    for (const auto& [name, run] : scenarios) fmt::print(stderr, " {}", name);
    fmt::print(stderr, ")\n");
    return 2;
  }
  try {
    found->second();
  } catch (const std::exception& error) {
    fmt::print(stderr, "rank {}: {} FAILED: {}\n", rank, argv[1], error.what());
    return 1;
  }
  fmt::print("rank {}: {} passed\n", rank, argv[1]);
  return 0;
}

}  // namespace accel_test
