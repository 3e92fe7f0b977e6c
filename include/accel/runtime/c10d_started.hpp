// A collective started over c10d and not yet waited for: its works (one, or one per root where
// it is made of several), and what finishes it on the thread that waits once they are done (the
// reduce-scatter's local sum, the mean's division). C10dTransport starts and awaits it
// (c10d_transport.hpp); a pending collective holds it until wait() (pending_collective.hpp).
#pragma once

#include <functional>
#include <vector>

#include "../detail/torch_compat.hpp"

namespace accel::runtime {

struct C10dStarted {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::function<void()> then;  // may be empty
};

}  // namespace accel::runtime
