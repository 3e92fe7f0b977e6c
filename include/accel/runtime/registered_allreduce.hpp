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
#include "transport_declarations.hpp"

// Declared only, as the transports are: impl/ includes Gloo.
namespace gloo {
class Algorithm;
}

namespace accel::runtime {

class CollectiveCheck;  // collective_check.hpp, which impl/ includes

class RegisteredAllreduce {
 public:
  RegisteredAllreduce() = default;
  // `flat`: what DirectGloo::can_register accepts; it must keep its storage while this lives.
  // `path`: the group's shared-memory path, or null.
  ACCEL_DECL RegisteredAllreduce(CollectiveCheck& calls, C10dTransport& c10d,
                                 SharedMemoryPath* path, torch::Tensor flat);
  // Out of line, where gloo::Algorithm is complete.
  ACCEL_DECL RegisteredAllreduce(RegisteredAllreduce&&) noexcept;
  ACCEL_DECL RegisteredAllreduce& operator=(RegisteredAllreduce&&) noexcept;
  ACCEL_DECL ~RegisteredAllreduce();

  ACCEL_DECL void run();

 private:
  CollectiveCheck* calls_ = nullptr;
  C10dTransport* c10d_ = nullptr;
  SharedMemoryPath* path_ = nullptr;
  torch::Tensor flat_;
  std::unique_ptr<gloo::Algorithm> ring_;
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/registered_allreduce.ipp"
#endif
