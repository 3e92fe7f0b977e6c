// The primary template of state::CheckpointIO, which the Accelerator's save_state, load_state,
// save_model and load_model call. state/checkpoint_io.hpp (<accel/checkpoints.hpp>) specializes
// it for every Accelerator; declared apart from both so that the class (above this layer) and the
// checkpoint code (in it) each include it, and neither includes the other.
#pragma once

#include <filesystem>

#include "../detail/dependent_false.hpp"

namespace accel::state {

// save_state / load_state / save_model / load_model are defined in state/checkpoint_io.hpp
// (<accel/checkpoints.hpp>), which specializes this for every Accelerator: their safetensors and
// JSON code stays out of translation units that never checkpoint. A call without that header
// stops here, naming it.
template <class Accel, class = void>
struct CheckpointIO {
  static_assert(accel::detail::dependent_false<Accel>,
                "accel: save_state, load_state, save_model and load_model need "
                "#include <accel/checkpoints.hpp> (or <accel/all.hpp>); <accel/accelerator.hpp> "
                "leaves checkpoints out to keep them out of the compile time of every TU");
  // Declared only, so that the assertion above is the one error such a call gives.
  template <class... Args>
  static std::filesystem::path save_state(Args&&...);
  template <class... Args>
  static std::filesystem::path load_state(Args&&...);
  template <class... Args>
  static void save_model(Args&&...);
  template <class... Args>
  static void load_model(Args&&...);
};

}  // namespace accel::state
