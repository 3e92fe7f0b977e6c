// What every distributed test program with an Accelerator shares: the check macro and the
// scenario runner (run_scenario.hpp), and the options the tests run with. Each area of the
// library keeps its scenarios in its own worker_*.cpp, whose table this folder's CMakeLists.txt
// reads to register them.
#pragma once

#include <accel/accelerator.hpp>

#include "run_scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>

namespace accel_test {

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

// The message of the accel::Error `run` throws ("" if none).
template <class Run>
std::string error_of(Run&& run) {
  try {
    run();
  } catch (const accel::Error& error) {
    return error.what();
  }
  return "";
}

// `run` fails with an accel::Error whose message holds `needle`.
template <class Run>
void expect_error(Run&& run, std::string_view needle) {
  const std::string what = error_of(run);
  if (what.empty()) throw std::runtime_error(fmt::format("no error; expected '{}'", needle));
  if (what.find(needle) == std::string::npos)
    throw std::runtime_error(fmt::format("unexpected error: {}", what));
}

}  // namespace accel_test
