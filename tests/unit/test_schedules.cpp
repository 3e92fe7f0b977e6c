// Learning-rate schedules (accel/schedules.hpp): each formula at chosen steps and each param
// group's lr as libtorch's step() leaves it, transformers' values, a run resumed from save_state
// continuing with bitwise identical lrs, and the argument errors.
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <accel/schedules.hpp>
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_schedules {

namespace {

namespace fs = std::filesystem;
namespace schedule = accel::schedule;

constexpr double lr0 = 0.1, lr1 = 0.03;

// An SGD with two param groups, at lr0 and lr1: each group's base lr is its own.
struct TwoGroups {
  torch::Tensor a = torch::zeros({2}, torch::requires_grad());
  torch::Tensor b = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD sgd{{torch::optim::OptimizerParamGroup(
                             {a}, std::make_unique<torch::optim::SGDOptions>(lr0)),
                         torch::optim::OptimizerParamGroup(
                             {b}, std::make_unique<torch::optim::SGDOptions>(lr1))},
                        torch::optim::SGDOptions(lr0)};
};

std::vector<double> group_lrs(torch::optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

// libtorch keeps an LRScheduler's step count protected, as load_state's own accessor knows.
struct StepCount : torch::optim::LRScheduler {
  static unsigned& of(torch::optim::LRScheduler& scheduler) {
    return scheduler.*(&StepCount::step_count_);
  }
};

// A step and the factor its formula gives there.
struct Point {
  std::int64_t step;
  double factor;
};

// Steps a scheduler as a training loop does (step() after each optimizer step) up to the last
// point, checking at each step k that the optimizer holds the lrs of step k: at the points, each
// group's base lr times the expected factor, and the plain function agrees bit for bit.
template <class Scheduler, class Options>
void check_points(const Options& options, double (*factor_of)(std::int64_t, const Options&),
                  const std::vector<Point>& points) {
  TwoGroups groups;
  Scheduler scheduler(groups.sgd, options);
  CHECK(scheduler.base_lrs() == std::vector<double>{lr0, lr1});
  std::size_t next = 0;
  for (std::int64_t k = 0; k <= points.back().step; ++k) {
    CAPTURE(k);
    const std::vector<double> lrs = group_lrs(groups.sgd);
    CHECK(scheduler.step_count() == k);
    CHECK(lrs == scheduler.lrs_at(k));
    const double factor = factor_of(k, options);
    CHECK(lrs[0] == lr0 * factor);
    CHECK(lrs[1] == lr1 * factor);
    CHECK(schedule::scheduled_lr(k, lr1, options) == lrs[1]);
    if (next < points.size() && points[next].step == k) {
      CHECK(factor == doctest::Approx(points[next].factor).epsilon(1e-12));
      CHECK(lrs[0] == doctest::Approx(lr0 * points[next].factor).epsilon(1e-12));
      CHECK(lrs[1] == doctest::Approx(lr1 * points[next].factor).epsilon(1e-12));
      ++next;
    }
    scheduler.step();
  }
  CHECK(next == points.size());
}

fs::path fresh_folder(const std::string& name) {
  const fs::path folder =
      fs::temp_directory_path() / fmt::format("accel_schedules_{}_{}", name, ::getpid());
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

struct RunRecord {
  std::vector<std::vector<double>> lrs;  // each optimizer step's lrs, from where the run began
  std::uint64_t digest = 0;
};

// `steps` optimizer steps of Adam with two param groups under a schedule, through the
// Accelerator; saves before step save_at into save_to, or resumes from resume_from.
template <class Scheduler, class Options>
RunRecord train(const Options& options, std::int64_t steps, std::int64_t save_at = -1,
                const fs::path& save_to = {}, const fs::path& resume_from = {}) {
  auto net = accel_test::seeded_mlp();
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  param_groups.emplace_back(net->fc1->parameters(),
                            std::make_unique<torch::optim::AdamOptions>(0.01));
  param_groups.emplace_back(net->fc2->parameters(),
                            std::make_unique<torch::optim::AdamOptions>(0.003));
  torch::optim::Adam adam(std::move(param_groups), torch::optim::AdamOptions(0.01));
  Scheduler schedule(adam, options);
  const accel_test::Regression data(16);
  accel::Accelerator<accel::Ddp, accel::Fp32> acc({.seed = 5});
  auto [model, optimizer, scheduler] = acc.prepare(net, adam, schedule);
  if (!resume_from.empty()) acc.load_state(resume_from);
  RunRecord record;
  while (acc.completed_steps() < steps) {
    if (acc.completed_steps() == save_at && !save_to.empty()) acc.save_state(save_to);
    record.lrs.push_back(group_lrs(adam));
    acc.backward(torch::mse_loss(model(data.inputs), data.targets));
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  }
  record.digest = accel::state::parameter_digest(*net);
  return record;
}

template <class Scheduler, class Options>
void check_resume(const Options& options, const fs::path& folder) {
  constexpr std::int64_t steps = 14, save_at = 5;
  const RunRecord straight = train<Scheduler>(options, steps);
  REQUIRE(straight.lrs.size() == steps);
  const RunRecord saving = train<Scheduler>(options, steps, save_at, folder);
  CHECK(saving.lrs == straight.lrs);
  CHECK(saving.digest == straight.digest);
  const RunRecord resumed = train<Scheduler>(options, steps, -1, {}, folder);
  REQUIRE(resumed.lrs.size() == steps - save_at);
  // Bitwise: std::vector<double>'s == compares each lr exactly.
  CHECK(std::equal(resumed.lrs.begin(), resumed.lrs.end(), straight.lrs.begin() + save_at));
  CHECK(resumed.digest == straight.digest);
}

}  // namespace

TEST_CASE("schedule: constant with warmup follows its formula per param group") {
  check_points<schedule::ConstantWithWarmup>(
      schedule::ConstantOptions{.warmup_steps = 4}, &schedule::constant_with_warmup_factor,
      {{0, 0.0}, {2, 0.5}, {3, 0.75}, {4, 1.0}, {8, 1.0}, {12, 1.0}, {15, 1.0}});
  // No warmup: the full lr from step 0.
  check_points<schedule::ConstantWithWarmup>(schedule::ConstantOptions{},
                                             &schedule::constant_with_warmup_factor,
                                             {{0, 1.0}, {3, 1.0}});
}

TEST_CASE("schedule: linear with warmup follows its formula per param group") {
  const auto factor = &schedule::linear_with_warmup_factor;
  check_points<schedule::LinearWithWarmup>(
      schedule::LinearOptions{.warmup_steps = 4, .total_steps = 12}, factor,
      {{0, 0.0}, {2, 0.5}, {4, 1.0}, {8, 0.5}, {10, 0.25}, {12, 0.0}, {15, 0.0}});
  // A floor of 0.2 of each group's lr: (1 - 0.2) of the decay on top of it.
  check_points<schedule::LinearWithWarmup>(
      schedule::LinearOptions{.warmup_steps = 4, .total_steps = 12, .min_ratio = 0.2}, factor,
      {{0, 0.0}, {2, 0.5}, {4, 1.0}, {8, 0.6}, {12, 0.2}, {15, 0.2}});
  // All warmup: the floor from total_steps on.
  check_points<schedule::LinearWithWarmup>(
      schedule::LinearOptions{.warmup_steps = 4, .total_steps = 4}, factor,
      {{0, 0.0}, {2, 0.5}, {4, 0.0}, {6, 0.0}});
}

TEST_CASE("schedule: cosine with warmup follows its formula per param group") {
  const auto factor = &schedule::cosine_with_warmup_factor;
  const double quarter = 0.5 * (1 + std::cos(std::numbers::pi / 4));  // progress 1/4
  check_points<schedule::CosineWithWarmup>(
      schedule::CosineOptions{.warmup_steps = 4, .total_steps = 12}, factor,
      {{0, 0.0}, {2, 0.5}, {4, 1.0}, {6, quarter}, {8, 0.5}, {12, 0.0}, {15, 0.0}});
  check_points<schedule::CosineWithWarmup>(
      schedule::CosineOptions{.warmup_steps = 4, .total_steps = 12, .min_ratio = 0.1}, factor,
      {{0, 0.0}, {2, 0.5}, {4, 1.0}, {6, quarter * 0.9 + 0.1}, {8, 0.55}, {12, 0.1}, {15, 0.1}});
  // No warmup: the full lr at step 0, then straight into the cosine.
  check_points<schedule::CosineWithWarmup>(
      schedule::CosineOptions{.total_steps = 4}, factor, {{0, 1.0}, {2, 0.5}, {4, 0.0}});
}

TEST_CASE("schedule: inverse square root follows its formula per param group") {
  check_points<schedule::InverseSqrt>(
      schedule::InverseSqrtOptions{.warmup_steps = 4}, &schedule::inverse_sqrt_factor,
      {{0, 0.0}, {2, 0.5}, {4, 1.0}, {9, 2.0 / 3.0}, {16, 0.5}, {100, 0.2}});
}

TEST_CASE("schedule: min_lr is one floor for every param group") {
  for (const double base : {lr0, lr1}) {
    CAPTURE(base);
    const schedule::CosineOptions cosine{.warmup_steps = 2, .total_steps = 10, .min_lr = 0.01};
    CHECK(schedule::scheduled_lr(1, base, cosine) == doctest::Approx(base / 2).epsilon(1e-12));
    CHECK(schedule::scheduled_lr(6, base, cosine) ==
          doctest::Approx(0.01 + (base - 0.01) / 2).epsilon(1e-12));
    CHECK(schedule::scheduled_lr(10, base, cosine) == doctest::Approx(0.01).epsilon(1e-12));
    CHECK(schedule::scheduled_lr(50, base, cosine) == doctest::Approx(0.01).epsilon(1e-12));
    const schedule::LinearOptions linear{.warmup_steps = 2, .total_steps = 10, .min_lr = 0.01};
    CHECK(schedule::scheduled_lr(6, base, linear) ==
          doctest::Approx(0.01 + (base - 0.01) / 2).epsilon(1e-12));
    CHECK(schedule::scheduled_lr(12, base, linear) == doctest::Approx(0.01).epsilon(1e-12));
  }
  // The scheduler puts exactly scheduled_lr's values in each group.
  TwoGroups groups;
  schedule::CosineWithWarmup scheduler(groups.sgd,
                                       {.warmup_steps = 2, .total_steps = 10, .min_lr = 0.01});
  for (std::int64_t k = 0; k <= 12; ++k) {
    CAPTURE(k);
    const std::vector<double> lrs = group_lrs(groups.sgd);
    CHECK(lrs[0] == schedule::scheduled_lr(k, lr0, scheduler.options()));
    CHECK(lrs[1] == schedule::scheduled_lr(k, lr1, scheduler.options()));
    scheduler.step();
  }
  CHECK(group_lrs(groups.sgd)[0] == doctest::Approx(0.01).epsilon(1e-12));
  CHECK(group_lrs(groups.sgd)[1] == doctest::Approx(0.01).epsilon(1e-12));
}

// The values of transformers' lr lambdas (optimization.py), computed in Python with
// warmup 10 and 100 training steps.
TEST_CASE("schedule: the factors are transformers' values") {
  const schedule::CosineOptions cosine{.warmup_steps = 10, .total_steps = 100};
  const schedule::CosineOptions cosine_floor{.warmup_steps = 10, .total_steps = 100,
                                             .min_ratio = 0.1};
  const schedule::LinearOptions linear{.warmup_steps = 10, .total_steps = 100};
  const schedule::InverseSqrtOptions inverse_sqrt{.warmup_steps = 10};
  struct Row {
    std::int64_t step;
    double cosine, cosine_floor, linear, inverse_sqrt;
  };
  for (const Row& row : {Row{0, 0.0, 0.0, 0.0, 0.0}, Row{3, 0.3, 0.3, 0.3, 0.3},
                         Row{10, 1.0, 1.0, 1.0, 1.0},
                         Row{37, 0.7938926261462366, 0.8145033635316129, 0.7, 0.5198752449100363},
                         Row{99, 0.00030458649045211894, 0.10027412784140691,
                             0.011111111111111112, 0.3178208630818641},
                         Row{100, 0.0, 0.1, 0.0, 0.31622776601683794}}) {
    CAPTURE(row.step);
    CHECK(schedule::cosine_with_warmup_factor(row.step, cosine) ==
          doctest::Approx(row.cosine).epsilon(1e-15));
    CHECK(schedule::cosine_with_warmup_factor(row.step, cosine_floor) ==
          doctest::Approx(row.cosine_floor).epsilon(1e-15));
    CHECK(schedule::linear_with_warmup_factor(row.step, linear) ==
          doctest::Approx(row.linear).epsilon(1e-15));
    CHECK(schedule::inverse_sqrt_factor(row.step, inverse_sqrt) ==
          doctest::Approx(row.inverse_sqrt).epsilon(1e-15));
  }
  // Past total_steps transformers' cosine climbs back; here the floor holds.
  CHECK(schedule::cosine_with_warmup_factor(120, cosine) == 0.0);
  CHECK(schedule::cosine_with_warmup_factor(120, cosine_floor) == 0.1);
}

TEST_CASE("schedule: the lrs come from the step count alone") {
  TwoGroups stepped_groups, restored_groups;
  const schedule::CosineOptions options{.warmup_steps = 3, .total_steps = 20, .min_ratio = 0.05};
  schedule::CosineWithWarmup stepped(stepped_groups.sgd, options);
  schedule::CosineWithWarmup restored(restored_groups.sgd, options);
  for (int k = 0; k < 7; ++k) stepped.step();
  // What load_state does to a scheduler: set its step count, and nothing else it holds.
  StepCount::of(restored) = 7;
  for (int k = 0; k < 16; ++k) {
    stepped.step();
    restored.step();
    CHECK(group_lrs(restored_groups.sgd) == group_lrs(stepped_groups.sgd));
  }
}

TEST_CASE("schedule: a run resumed from save_state continues with bitwise identical lrs") {
  const fs::path folder = fresh_folder("resume");
  check_resume<schedule::ConstantWithWarmup>(schedule::ConstantOptions{.warmup_steps = 8},
                                             folder / "constant");
  check_resume<schedule::LinearWithWarmup>(
      schedule::LinearOptions{.warmup_steps = 3, .total_steps = 10, .min_ratio = 0.1},
      folder / "linear");
  check_resume<schedule::CosineWithWarmup>(
      schedule::CosineOptions{.warmup_steps = 3, .total_steps = 10, .min_lr = 0.001},
      folder / "cosine");
  check_resume<schedule::InverseSqrt>(schedule::InverseSqrtOptions{.warmup_steps = 3},
                                      folder / "inverse_sqrt");
  fs::remove_all(folder);
}

TEST_CASE("schedule: bad arguments are refused, naming the value and the fix") {
  TwoGroups groups;
  auto& sgd = groups.sgd;
  CHECK_THROWS_WITH_AS(
      schedule::CosineWithWarmup(sgd, {.warmup_steps = 20, .total_steps = 10}),
      "accel: CosineWithWarmup: warmup_steps is 20, more than total_steps 10; lower "
      "warmup_steps or raise total_steps",
      accel::Error);
  CHECK_THROWS_WITH_AS(schedule::LinearWithWarmup(sgd, {.warmup_steps = 2}),
                       doctest::Contains("accel: LinearWithWarmup: total_steps is 0; it must be "
                                         "at least 1"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(schedule::ConstantWithWarmup(sgd, {.warmup_steps = -1}),
                       "accel: ConstantWithWarmup: warmup_steps is -1; it must be at least 0",
                       accel::Error);
  CHECK_THROWS_WITH_AS(schedule::CosineWithWarmup(sgd, {.total_steps = 10, .min_ratio = -0.1}),
                       doctest::Contains("min_ratio is -0.1; it must be from 0 to 1"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(schedule::CosineWithWarmup(sgd, {.total_steps = 10, .min_ratio = 1.5}),
                       doctest::Contains("min_ratio is 1.5; it must be from 0 to 1"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(
      schedule::LinearWithWarmup(
          sgd, {.total_steps = 10, .min_ratio = std::numeric_limits<double>::quiet_NaN()}),
      doctest::Contains("min_ratio is nan; it must be from 0 to 1"), accel::Error);
  CHECK_THROWS_WITH_AS(schedule::LinearWithWarmup(sgd, {.total_steps = 10, .min_lr = -0.001}),
                       doctest::Contains("LinearWithWarmup: min_lr is -0.001; it must be at "
                                         "least 0"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(
      schedule::CosineWithWarmup(sgd, {.total_steps = 10, .min_ratio = 0.1, .min_lr = 0.01}),
      doctest::Contains("both min_ratio (0.1) and min_lr (0.01) are set; set one of them"),
      accel::Error);
  CHECK_THROWS_WITH_AS(schedule::CosineWithWarmup(sgd, {.total_steps = 10, .min_lr = 0.05}),
                       doctest::Contains("CosineWithWarmup: min_lr 0.05 is above param group "
                                         "1's lr 0.03; lower min_lr, or set min_ratio"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(schedule::InverseSqrt(sgd, {}),
                       doctest::Contains("accel: InverseSqrt: warmup_steps is 0; it must be at "
                                         "least 1, since after the warmup the lr is lr * "
                                         "sqrt(warmup_steps / step)"),
                       accel::Error);
  // A refused schedule changed no lr.
  CHECK(group_lrs(sgd) == std::vector<double>{lr0, lr1});

  // The plain functions.
  CHECK_THROWS_WITH_AS(schedule::cosine_with_warmup_factor(-1, {.total_steps = 10}),
                       "accel: cosine_with_warmup_factor: step is -1; it must be at least 0 "
                       "(optimizer steps count from 0)",
                       accel::Error);
  CHECK_THROWS_WITH_AS(schedule::linear_with_warmup_factor(3, {.warmup_steps = 5,
                                                               .total_steps = 4}),
                       doctest::Contains("linear_with_warmup_factor: warmup_steps is 5, more "
                                         "than total_steps 4"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(schedule::cosine_with_warmup_factor(3, {.total_steps = 10,
                                                               .min_lr = 0.01}),
                       doctest::Contains("min_lr is set (0.01), and a factor has no base lr to "
                                         "take it from; call accel::schedule::scheduled_lr"),
                       accel::Error);
  CHECK_THROWS_WITH_AS(schedule::inverse_sqrt_factor(3, {}),
                       doctest::Contains("inverse_sqrt_factor: warmup_steps is 0"), accel::Error);
  CHECK_THROWS_WITH_AS(
      schedule::scheduled_lr(3, 0.005, schedule::CosineOptions{.total_steps = 10, .min_lr = 0.01}),
      doctest::Contains("scheduled_lr: min_lr 0.01 is above base_lr 0.005"), accel::Error);
  CHECK_THROWS_WITH_AS(schedule::scheduled_lr(3, -0.1, schedule::ConstantOptions{}),
                       doctest::Contains("scheduled_lr: base_lr is -0.1; it must be a finite lr "
                                         "of at least 0"),
                       accel::Error);

  schedule::ConstantWithWarmup scheduler(sgd, {.warmup_steps = 2});
  CHECK_THROWS_WITH_AS(scheduler.lrs_at(-3),
                       doctest::Contains("ConstantWithWarmup: step is -3; it must be at least 0"),
                       accel::Error);
  // A group added after the schedule was built has no base lr.
  torch::Tensor c = torch::zeros({1}, torch::requires_grad());
  sgd.add_param_group(
      torch::optim::OptimizerParamGroup({c}, std::make_unique<torch::optim::SGDOptions>(0.5)));
  CHECK_THROWS_WITH_AS(scheduler.step(),
                       doctest::Contains("ConstantWithWarmup: the optimizer has 3 param groups, "
                                         "and had 2 when the schedule was built; build the "
                                         "schedule after the last add_param_group"),
                       accel::Error);
}

}  // namespace unit_schedules
