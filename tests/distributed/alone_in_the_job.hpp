// A job's process as a job of one for a while: the workers that compare a run across processes
// with one process on the global batch make that one-process Accelerator inside the job
// (worker_precision.cpp, worker_tensor_parallel.cpp).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel_test {

// This process as a job of one, for the reference run, until the scope ends.
class AloneInTheJob {
 public:
  AloneInTheJob() {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      setenv(name, std::string(name) == "WORLD_SIZE" || std::string(name) == "LOCAL_WORLD_SIZE"
                       ? "1"
                       : "0",
             1);
    }
  }
  ~AloneInTheJob() {
    for (const auto& [name, value] : saved_)
      if (value)
        setenv(name, value->c_str(), 1);
      else
        unsetenv(name);
  }
  AloneInTheJob(const AloneInTheJob&) = delete;
  AloneInTheJob& operator=(const AloneInTheJob&) = delete;

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

}  // namespace accel_test
