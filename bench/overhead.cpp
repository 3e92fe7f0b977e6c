// What the Accelerator costs on one process: the same model, data and optimizer trained by a
// plain libtorch loop and by an Accelerator loop, in alternating rounds, in one run.
//   accel_overhead [--steps N] [--rounds R] [--threads T]
// Prints one line per model and ends with `overhead_pct=<worst model>`.
#include <accel/accelerator.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Shape {
  std::string_view name;
  std::int64_t features, hidden, layers, batch;
};

// mlp: compute-bound; tiny: per-step overhead dominates, so any library cost shows.
constexpr Shape kShapes[] = {{"mlp", 784, 1024, 4, 64}, {"tiny", 32, 32, 1, 8}};

torch::nn::Sequential build(const Shape& shape) {
  torch::manual_seed(0);
  torch::nn::Sequential net;
  std::int64_t width = shape.features;
  for (std::int64_t i = 0; i < shape.layers; ++i) {
    net->push_back(torch::nn::Linear(width, shape.hidden));
    net->push_back(torch::nn::ReLU());
    width = shape.hidden;
  }
  net->push_back(torch::nn::Linear(width, 10));
  return net;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Steps per second of a plain loop.
double plain(const Shape& shape, const std::vector<torch::Tensor>& inputs,
             const torch::Tensor& labels, int steps) {
  auto net = build(shape);
  torch::optim::SGD sgd(net->parameters(), 0.01);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(inputs[i % inputs.size()]), labels);
    loss.backward();
    sgd.step();
  }
  return steps / seconds_since(start);
}

// Steps per second of the same loop through accel::Accelerator<Ddp, Fp32>.
double accelerated(const Shape& shape, const std::vector<torch::Tensor>& inputs,
                   const torch::Tensor& labels, int steps) {
  accel::Accelerator<accel::Ddp, accel::Fp32> accelerator;
  auto net = build(shape);
  torch::optim::SGD sgd(net->parameters(), 0.01);
  auto [model, optimizer] = accelerator.prepare(net, sgd);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model(inputs[i % inputs.size()]), labels);
    accelerator.backward(loss);
    optimizer.step();
  }
  return steps / seconds_since(start);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 300, rounds = 7, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const int value = std::stoi(argv[i + 1]);
    if (flag == "--steps") steps = value;
    else if (flag == "--rounds") rounds = value;
    else if (flag == "--threads") threads = value;
    else {
      fmt::print(stderr, "usage: accel_overhead [--steps N] [--rounds R] [--threads T]\n");
      return 2;
    }
  }
  torch::set_num_threads(threads);
  double worst = -100.0;
  for (const Shape& shape : kShapes) {
    std::vector<torch::Tensor> inputs;
    for (int i = 0; i < 8; ++i) inputs.push_back(torch::randn({shape.batch, shape.features}));
    const auto labels = torch::randint(10, {shape.batch});
    plain(shape, inputs, labels, steps / 5);  // warm-up: allocator, thread pool
    std::vector<double> plain_rates, accel_rates;
    for (int round = 0; round < rounds; ++round) {  // alternate, so drift hits both alike
      plain_rates.push_back(plain(shape, inputs, labels, steps));
      accel_rates.push_back(accelerated(shape, inputs, labels, steps));
    }
    const double p = median(plain_rates), a = median(accel_rates);
    const double overhead = 100.0 * (p / a - 1.0);
    worst = std::max(worst, overhead);
    fmt::print("model={} plain_steps_per_s={:.1f} accel_steps_per_s={:.1f} ratio={:.3f} "
               "overhead_pct={:.2f}\n",
               shape.name, p, a, a / p, overhead);
  }
  fmt::print("overhead_pct={:.2f}\n", worst);
}
