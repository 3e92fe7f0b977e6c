// What a bug report needs to know about this machine and this build, as `accel-launch env`
// prints it (Accelerate's `accelerate env`): accel, libtorch, compilers, CUDA, NCCL and Gloo,
// devices, cores and threads, the BLAS library actually loaded, and every variable that steers a
// distributed run. One `name: value` line each, so a report can be pasted and grepped.
#pragma once

#include <gnu/libc-version.h>
#include <sched.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../version.hpp"

extern char** environ;

namespace accel::diagnostics {

using Report = std::vector<std::pair<std::string, std::string>>;

namespace detail {

// The value of the first line of `path` that starts with `key`, after the separator.
inline std::string field_of(const char* path, std::string_view key, char separator);

// The BLAS and LAPACK libraries mapped into this process (after torch's first matmul has loaded
// them), with symbolic links resolved: Debian's libblas.so.3 is an alternative that may be the
// reference BLAS (far slower: docs/getting-started.md, "Requirements") or OpenBLAS.
inline std::string loaded_blas();

// Variables that steer where a process sits in a job or how it communicates.
inline bool distributed_variable(std::string_view name);

}  // namespace detail

inline Report environment_report();

inline std::string to_text(const Report& report);

}  // namespace accel::diagnostics

// Header-only in both modes: the tools compile it themselves (accel::compiled has no tools).
#include "impl/environment_report.ipp"
