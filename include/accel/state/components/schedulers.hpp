// Checkpoint component: each prepared LR scheduler's step count, in the manifest; a load sets it
// back, so that the schedule continues where it was. The protocol: component.hpp.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <string>

#include "../../detail/error.hpp"
#include "../manifest.hpp"
#include "component.hpp"

namespace accel::state::components {

namespace detail {
// torch::optim::LRScheduler keeps its step count protected; a checkpoint must read and set it.
struct SchedulerAccess : torch::optim::LRScheduler {
  static unsigned& step_count(torch::optim::LRScheduler& scheduler) {
    return scheduler.*(&SchedulerAccess::step_count_);
  }
};
}  // namespace detail

struct Schedulers {
  template <class View>
  static void add_tensors(const View&, int, NamedTensors&) {}

  template <class View>
  static void describe(const View& view, Manifest& manifest) {
    for (auto* scheduler : view.schedulers)
      manifest.scheduler_steps.push_back(detail::SchedulerAccess::step_count(*scheduler));
  }

  template <class View>
  static void check(const View&, const Manifest&, const std::string&) {}

  template <class View>
  static void stage(const Staging<View>& s) {
    const auto& schedulers = s.manifest.scheduler_steps;
    const auto& live = s.view.schedulers;
    if (schedulers.size() != live.size())
      accel::detail::fail("load_state: '{}' holds {} LR schedulers, {} are prepared", s.where,
                          schedulers.size(), live.size());
    for (std::size_t i = 0; i < live.size(); ++i) {
      const unsigned count = schedulers[i];
      s.apply.push_back([scheduler = live[i], count] {
        detail::SchedulerAccess::step_count(*scheduler) = count;
      });
    }
  }
};

}  // namespace accel::state::components
