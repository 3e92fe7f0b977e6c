// expect: accel: a tracker needs .std::string name\(\) const.
// expect: accel: a tracker needs .void start\(const accel::tracking::RunStart& run\).
// expect: accel: a tracker needs .void log\(const accel::tracking::Scalars& values, std::int64_t
// expect: accel: a tracker needs .void log_text\(const accel::tracking::Texts& values, std::int64_t
// expect: accel: a tracker needs .void finish\(\).
// A tracker of the user's whose log() lacks the seconds, and which has nothing else: each member
// it lacks is named, and nothing else is reported. The twin writes them all.
#include <accel/accelerator.hpp>

#include <cstdint>
#include <string>

struct MyTracker {
#ifdef ACCEL_TWIN
  std::string name() const { return "mine"; }
  void start(const accel::tracking::RunStart& /*run*/) {}
  void log(const accel::tracking::Scalars& /*values*/, std::int64_t /*step*/, double /*seconds*/) {}
  void log_text(const accel::tracking::Texts& /*values*/, std::int64_t /*step*/,
                double /*seconds*/) {}
  void finish() {}
#else
  void log(const accel::tracking::Scalars& /*values*/, std::int64_t /*step*/) {}
#endif
};

int main() {
  accel::Accelerator<accel::Ddp> accelerator;
  accelerator.init_trackers("p", {}, {.trackers = {accel::tracking::make_tracker(MyTracker{})}});
}
