// accel-launch's subcommands, Accelerate's `accelerate env` and `accelerate test`:
//
//   accel-launch env                         what a bug report needs (versions, devices, BLAS, ...)
//   accel-launch test [--nproc N] [options]  a short self-check on N local processes (default 2)
//   accel-launch estimate-memory --params N ...   bytes per rank by the ZeRO formulas (no torch)
//   accel-launch checkpoint inspect|verify|merge|diff ...   a checkpoint folder, read without the
//                                            program that wrote it (tools/checkpoint_command.hpp:
//                                            exit status 0, 1 or 2, one accel: line on failure)
//
// env, test and checkpoint need torch, which accel-launch does not link: they run accel-check (tools/accel-check.cpp),
// found beside the accel-launch executable, else on PATH. A subcommand is recognised only as
// the very first argument; `accel-launch -- env ...` still launches a program named env.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../memory/memory_formulas.hpp"
#include "../launch/command_line.hpp"
#include "../launch/error.hpp"
#include "../launch/supervisor.hpp"

namespace accel {

inline constexpr std::string_view launch_test_usage =
    "usage: accel-launch test [--nproc N] [--grace S] [--rank-prefix]\n"
    "\n"
    "Runs accel's self-check on N local processes (default: ACCEL_NPROC, else 2): every\n"
    "collective the library uses, then a few Ddp and Zero2 steps compared with one process.\n"
    "Prints PASS or FAIL per check; exits 0 only when every check passed on every process.\n";

inline constexpr std::string_view estimate_memory_usage =
    "usage: accel-launch estimate-memory --params N [--strategy S] [--world W]\n"
    "                                    [--nproc-per-node L] [--optimizer O]\n"
    "                                    [--bytes-per-param B] [--tp T [--tp-params M]]\n"
    "\n"
    "Bytes each rank holds for a model of N trainable parameters (suffixes K, M, B: 350M, 7B),\n"
    "between steps, by the ZeRO formulas with accel's flat-parameter padding (docs/how-to/large-models.md):\n"
    "  --strategy   ddp, zero2, zero3, fsdp-no-shard, fsdp-shard-grad-op, fsdp-full-shard,\n"
    "               fsdp-hybrid-shard (default: ddp, zero2 and zero3 side by side)\n"
    "  --world      processes (default 1)\n"
    "  --nproc-per-node  processes per node, which fsdp-hybrid-shard shards across (default W)\n"
    "  --optimizer  adam, adamw, sgd, sgd-momentum, adagrad, rmsprop (default adam)\n"
    "  --bytes-per-param  4 for fp32 master weights (default; accel keeps them fp32), 2, 8\n"
    "  --tp         tensor-parallel degree T (Parallel<P, TensorParallel<T>>; default 1): each\n"
    "               rank holds 1/T of the split layers' parameters, and the strategy shards\n"
    "               over the W / T ranks of the data-parallel dimension\n"
    "  --tp-params  how many of the N parameters are in split layers (ColumnParallelLinear,\n"
    "               RowParallelLinear; default: all N), the rest held whole\n"
    "The parameters count as one flat parameter (Zero3: one unit); activations depend on the\n"
    "batch and are not included: accel::estimate_memory measures them on a real model.\n";

namespace launcher {

// `name` beside the running executable, else found on PATH; empty when neither has it.
inline std::string companion_program(const std::string& name);

inline std::string accel_check_program(std::string_view subcommand);

// "7B", "350M", "1.5K", "1000": a count of parameters.
inline std::int64_t parameter_count(const std::string& text);

inline std::string bytes_text(std::int64_t bytes);

inline int estimate_memory(int argc, const char* const* argv);

}  // namespace launcher

// Runs the subcommand argv[1] names and returns its exit status; nullopt when argv[1] is no
// subcommand (the arguments are then a launch). Throws LaunchError for a bad subcommand line.
inline std::optional<int> run_launch_subcommand(int argc, const char* const* argv);

}  // namespace accel

// Header-only in both modes: the tools compile it themselves (accel::compiled has no tools).
#include "impl/subcommands.ipp"
