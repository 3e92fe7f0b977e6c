// What accelerator.profile() returns: the profile lasts as long as this scope, as Accelerate's
// `with accelerator.profile() as prof:`. At its end (or at close()) the trace is written.
//
//   {
//     auto profile = accelerator.profile({.schedule = accel::ProfileSchedule{.wait = 1, .active = 3}});
//     for (...) { ... optimizer.step(); ... }
//   }  // runs/<project>/<run>/trace_rank<r>.json
//
// A Profile may outlive its Accelerator: the Accelerator's destruction ends the profile and
// writes the trace, and the Profile, which holds the recorder weakly, then has nothing left to
// do (close() and its end do nothing).
#pragma once

#include <filesystem>
#include <memory>
#include <utility>

#include "../detail/separate_compilation.hpp"
#include "recorder.hpp"

namespace accel::profiling {

class [[nodiscard]] Profile {
 public:
  explicit Profile(const std::shared_ptr<Recorder>& recorder)
      : recorder_(recorder), file_(recorder->trace_file()) {}
  Profile(Profile&& other) noexcept
      : recorder_(std::exchange(other.recorder_, {})), file_(std::move(other.file_)) {}
  Profile& operator=(Profile&&) = delete;
  Profile(const Profile&) = delete;
  // Writes the trace. While an exception unwinds, a failure to write is dropped (the
  // exception in flight is the one to report); otherwise it is thrown, as close() does.
  ACCEL_DECL ~Profile() noexcept(false);

  // Ends the profile now and writes the trace; then the scope's end does nothing. Nothing to
  // do once the Accelerator is gone (it ended the profile).
  ACCEL_DECL void close();
  // This rank's trace file.
  const std::filesystem::path& file() const { return file_; }

 private:
  std::weak_ptr<Recorder> recorder_;  // the Accelerator's; expired once it is destroyed
  std::filesystem::path file_;
};

}  // namespace accel::profiling

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/profile_scope.ipp"
#endif
