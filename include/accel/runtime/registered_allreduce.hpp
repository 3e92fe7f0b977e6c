// A sum all-reduce of one tensor whose buffers are registered with Gloo once and which then
// runs on the calling thread (direct_gloo.hpp): the fast path for small, reused tensors such as
// Ddp's small gradient buckets. Where the group carries CPU tensors through shared memory, that
// is faster still, and run() goes there instead. Registering is collective
// (ProcessGroup::register_allreduce); run() blocks until every rank's sum is in, numbered and
// checked as the group's other collectives.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <utility>

#include "../detail/separate_compilation.hpp"

// Declared only, as the transports are: impl/ includes Gloo.
namespace gloo {
class Algorithm;
}

namespace accel::runtime {

class ProcessGroup;  // process_group.hpp, which includes this header

class RegisteredAllreduce {
 public:
  RegisteredAllreduce() = default;
  // `flat`: what DirectGloo::can_register accepts; it must keep its storage while this lives,
  // and `group` must outlive it.
  ACCEL_DECL RegisteredAllreduce(ProcessGroup& group, torch::Tensor flat);
  // Out of line, where gloo::Algorithm is complete.
  ACCEL_DECL RegisteredAllreduce(RegisteredAllreduce&&) noexcept;
  ACCEL_DECL RegisteredAllreduce& operator=(RegisteredAllreduce&&) noexcept;
  ACCEL_DECL ~RegisteredAllreduce();

  // Through the group's layer, as its other collectives (ProcessGroup::checked()).
  ACCEL_DECL void run();

 private:
  ProcessGroup* group_ = nullptr;
  torch::Tensor flat_;
  std::unique_ptr<gloo::Algorithm> ring_;  // null where shared memory carries the group
};

}  // namespace accel::runtime

// Its definitions come after the group's (process_group.hpp), whose layer run() goes through.
