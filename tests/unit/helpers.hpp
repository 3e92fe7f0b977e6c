// Small models, datasets and helpers shared by the unit tests.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel_test {

struct Sample {
  torch::Tensor x;
  torch::Tensor y;
};

// A fixed regression problem: y = x . w + noise, the same for every run.
struct Regression {
  torch::Tensor inputs, targets;
  explicit Regression(std::int64_t n, std::int64_t features = 6) {
    torch::manual_seed(1234);
    inputs = torch::randn({n, features});
    targets = inputs.matmul(torch::linspace(-1, 1, features)).unsqueeze(1) +
              0.1 * torch::randn({n, 1});
  }
  std::int64_t size() const { return inputs.size(0); }
  Sample get(std::int64_t i) const { return {inputs[i], targets[i]}; }
};

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  explicit MlpImpl(std::int64_t features = 6) {
    fc1 = register_module("fc1", torch::nn::Linear(features, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
};
TORCH_MODULE(Mlp);

// A dtype's name, for checks: doctest cannot print c10::ScalarType itself (c10::toString, found
// by argument-dependent lookup, returns const char*).
inline std::string dtype_name(c10::ScalarType type) { return c10::toString(type); }
inline std::string dtype_name(const torch::Tensor& t) { return c10::toString(t.scalar_type()); }

inline Mlp seeded_mlp(std::uint64_t seed = 7) {
  torch::manual_seed(seed);
  return Mlp();
}

// max |a - b| / max |b| over every parameter pair.
inline double max_relative_difference(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double worst = 0.0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const double scale = pb[i].abs().max().item<double>();
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

// Environment variables set (a null value: unset) for one scope. Each variable gets its previous
// value (or absence) back at the end, in reverse order, so that a variable listed twice ends as
// it began and a test never leaks its environment into the next one.
class ScopedEnv {
 public:
  using Entry = std::pair<const char*, const char*>;
  explicit ScopedEnv(const std::vector<Entry>& entries) {
    for (const auto& [name, value] : entries) {
      const char* previous = std::getenv(name);
      saved_.emplace_back(name, previous ? std::optional<std::string>(previous) : std::nullopt);
      set(name, value);
    }
  }
  ScopedEnv(const char* name, const char* value) : ScopedEnv(std::vector<Entry>{{name, value}}) {}
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      set(it->first.c_str(), it->second ? it->second->c_str() : nullptr);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void set(const char* name, const char* value) {
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace accel_test
