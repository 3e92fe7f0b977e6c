// BackgroundSave; background_save.hpp includes it in header-only mode.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "../background_save.hpp"

namespace accel::state {

ACCEL_DECL BackgroundSave::~BackgroundSave() {
  const bool unwinding = std::uncaught_exceptions() > 0;
  if (unwinding) abandon_ = true;
  const std::string failure = wait();
  if (failure.empty() || unwinding) return;
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", failure.c_str());
  std::fflush(stderr);
  std::exit(1);
}

ACCEL_DECL std::string BackgroundSave::wait() {
  if (thread_.joinable()) thread_.join();
  return std::exchange(failure_, std::string());
}

ACCEL_DECL void BackgroundSave::start(Write write) {
  abandon_ = false;
  thread_ = std::thread([this, write = std::move(write)] {
    try {
      write(abandon_);
    } catch (const std::exception& e) {
      failure_ = e.what();
    } catch (...) {
      failure_ = "accel: save_state: the background write failed with an exception that is not "
                 "a std::exception";
    }
  });
}

}  // namespace accel::state
