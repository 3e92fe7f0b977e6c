// The step every collective of a group takes before its transport: it is numbered (every rank
// counts the same way; the errors, the stuck-collective watch and the teardown use the number)
// and, with checking on (Options::check_collectives, ACCEL_CHECK_COLLECTIVES=1), compared across
// the ranks. Every rank publishes what it is about to call (operation, sequence number, dtype,
// shape) in the store, the ranks compare hashes of it in one small all-gather that always
// matches, and on a mismatch every rank reads what each rank called and fails naming them,
// instead of hanging or corrupting memory. The comparison costs that one all-gather of 8 bytes.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"
#include "../detail/small_tensor.hpp"
#include "collective_call.hpp"
#include "store_text.hpp"
#include "transport_declarations.hpp"

namespace accel::runtime {

class CollectiveCheck {
 public:
  explicit CollectiveCheck(bool enabled) : enabled_(enabled) {}

  std::uint64_t issued() const { return sequence_; }

  // The library call whose collectives follow ("save_state"), or empty (ProcessGroup::Caller).
  std::string_view caller() const { return caller_; }
  void set_caller(std::string_view name) { caller_ = name; }

  // Numbers this collective and, with checking on, compares it across the ranks of `c10d`,
  // failing on every rank alike when they differ. The fingerprints travel through c10d's list
  // all-gather whatever carries the collective itself; that all-gather is neither numbered nor
  // checked (a failure in it is named "allgather" with the next collective's number).
  ACCEL_DECL CollectiveCall operator()(std::string operation, const torch::Tensor& tensor,
                                       C10dTransport& c10d);

 private:
  bool enabled_;
  std::uint64_t sequence_ = 0;
  std::string_view caller_;  // Caller's name while one lives
};

}  // namespace accel::runtime

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/collective_check.ipp"
#endif
