// A run on every rank that logs to TensorBoard's event file beside metrics.jsonl, for
// tensorboard.sh, which reads the event file back with tensorboard_reader.py and compares it with
// metrics.jsonl and config.json:
//   tensorboard_run [--nproc N] LOG_DIR     the run in LOG_DIR/tensorboard/r
// A few training steps with the step timeline on (each rank's phases as scalars), then metrics
// of each kind accel takes (a float tensor, doubles, integers beyond a float's 2^24, a bool, NaN
// and infinities), texts, a step left to count on, and the largest step.
#include <accel/accelerator.hpp>
#include <accel/launch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <limits>

#include "../unit/helpers.hpp"

namespace {

int run(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: tensorboard_run [--nproc N] LOG_DIR\n");
    return 2;
  }
  try {
    accel::Accelerator<accel::Ddp> accelerator(
        {.timeline = {.enabled = true, .samples_per_step = 8}});
    accelerator.init_trackers(
        "tensorboard",
        {{"lr", 1e-3}, {"batch_size", 4}, {"strategy", "ddp"}, {"shuffle", true},
         {"note", "a \"quoted\"\nline"}},
        {.log_dir = argv[1],
         .run_name = "r",
         .backends = {accel::tracking::Backend::jsonl, accel::tracking::Backend::tensorboard}});

    // Three steps on every rank: the timeline logs steps 1 and 2 here, step 3 at end_training().
    const auto world = static_cast<std::int64_t>(accelerator.num_processes());
    accel::DataLoader loader(accel_test::Regression(4 * 3 * world), {.batch_size = 4});
    auto net = accel_test::seeded_mlp();
    torch::optim::SGD sgd(net->parameters(), 0.01);
    auto [model, optimizer, batches] = accelerator.prepare(net, sgd, loader);
    for (const auto& batch : batches) {
      const auto loss = torch::mse_loss(model(batch.x), batch.y);
      accelerator.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
    }

    const double inf = std::numeric_limits<double>::infinity();
    accelerator.log({{"loss", torch::tensor(0.1F)},
                     {"lr", 1e-3},
                     {"integer", (std::int64_t{1} << 40) + 1},
                     {"count", torch::tensor(7, torch::kLong)},
                     {"flag", true},
                     {"nan", std::numeric_limits<double>::quiet_NaN()},
                     {"inf", inf},
                     {"minus_inf", -inf},
                     {"third", 1.0 / 3}},
                    10);
    accelerator.log_text({{"sample", "once upon a time\nthere was a caf\xc3\xa9"}, {"empty", ""}},
                         10);
    accelerator.log({{"loss", 0.25}});  // step 11, the one after the last
    accelerator.log({{"last", -2.5F}}, std::numeric_limits<std::int64_t>::max());
    accelerator.end_training();
    return 0;
  } catch (const std::exception& error) {
    fmt::print(stderr, "tensorboard_run: {}\n", error.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) { return accel::launch(argc, argv, run); }
