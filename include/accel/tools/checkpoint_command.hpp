// `accel-launch checkpoint inspect | verify | merge | diff` as a command line, over the calls of
// checkpoint_tool.hpp (docs/how-to/resume.md, "Without the training program"). Whatever a
// checkpoint holds, it ends with an exit status and, on failure, one `accel:` line: every
// exception (a corrupt file's, libtorch's, the file system's, memory running out) is caught here,
// at the command's edge, so that no C++ stack trace or abort reaches the user.
#pragma once

#include "checkpoint_tool.hpp"

namespace accel::state {

// argv[0] is "checkpoint". Returns the exit status: 0 done (verify: whole; diff: every tensor
// equal), 1 verify found a problem or diff a difference, 2 a usage error or a checkpoint that
// cannot be read (or an OUT that cannot be made).
inline int checkpoint_command(int argc, const char* const* argv);

}  // namespace accel::state

// Header-only in both modes: the tools compile it themselves (accel::compiled has no tools).
#include "impl/checkpoint_command.ipp"
