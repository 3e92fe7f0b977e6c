// What every distributed test program shares: the check macro, the options the tests run with,
// and a main that runs one named scenario on this rank. Each area of the library keeps its
// scenarios in its own worker_*.cpp (registered in this folder's CMakeLists.txt).
#pragma once

#include <accel/accelerator.hpp>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#define EXPECT(condition)                                                                     \
  do {                                                                                        \
    if (!(condition))                                                                         \
      throw std::runtime_error(fmt::format("check failed at {}:{}: {}", __FILE__, __LINE__,   \
                                           #condition));                                      \
  } while (0)

namespace accel_test {

using Scenarios = std::map<std::string, std::function<void()>>;

inline accel::Options test_options() {
  return {.timeout = std::chrono::seconds(60), .check_collectives = true};
}

// max |a - b| / max |b| over every parameter pair of two models of the same architecture: how
// far a distributed run is from its one-process reference.
inline double max_relative_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  const auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, ((pa[i] - pb[i]).abs().max() / pb[i].abs().max()).item<double>());
  return worst;
}

// Exits 0 when the scenario's checks pass on this rank; 1 naming the failed check otherwise;
// 2 for an unknown scenario.
inline int run_scenario(int argc, char** argv, const Scenarios& scenarios) {
  const char* rank = std::getenv("RANK") ? std::getenv("RANK") : "0";
  const auto found = argc == 2 ? scenarios.find(argv[1]) : scenarios.end();
  if (found == scenarios.end()) {
    fmt::print(stderr, "usage: {} SCENARIO (one of:", argc > 0 ? argv[0] : "worker");
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
