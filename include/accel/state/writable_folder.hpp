// A checkpoint folder that cannot be written is found when the Accelerator is made, not at the
// first save after hours of training.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "../detail/error.hpp"
#include "../detail/separate_compilation.hpp"

namespace accel::state {

// `folder` is Options::checkpoints.directory; `configured`: the program chose it (not the
// default). An existing folder must be writable. A folder still to be made must have a writable
// nearest existing parent only when the program chose it: a program that never saves may run
// where the default ./checkpoints could not be made, and its first save fails, naming it, then.
ACCEL_DECL void check_checkpoint_folder_writable(const std::filesystem::path& folder,
                                                 bool configured);

}  // namespace accel::state

#if !defined(ACCEL_SEPARATE_COMPILATION)
#include "impl/writable_folder.ipp"
#endif
