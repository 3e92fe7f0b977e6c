/// @file
/// Launching workers from C++: accel::launch() around a program's main, accel::launch_workers()
/// for a command (what the accel-launch executable runs), and LaunchOptions. POSIX/Linux only;
/// no torch, no {fmt}.
///
///   int main(int argc, char** argv) {
///     return accel::launch(argc, argv, [](int argc, char** argv) { return train(argc, argv); });
///   }
///
/// `./train --nproc 4 --epochs 3` then runs four copies of ./train, each with `--epochs 3` and
/// torchrun's variables set; under torchrun, srun or mpirun the same binary just trains.
#pragma once

#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "launch/command_line.hpp"
#include "launch/environment.hpp"
#include "launch/error.hpp"
#include "launch/options.hpp"
#include "launch/private_directory.hpp"
#include "launch/supervisor.hpp"

namespace accel {

/// Runs `fn(argc, argv)` as this process's main, as a worker:
///   - already a worker (RANK or WORLD_SIZE set by our launcher or torchrun, SLURM_PROCID by srun,
///     OMPI_COMM_WORLD_RANK by mpirun): calls fn in this process;
///   - otherwise N = `--nproc N` / `--nproc=N` from the arguments, else ACCEL_NPROC, else
///     defaults.nproc (1): with N == 1 sets the worker variables and calls fn in this process
///     (debuggers and profilers see the real thing); with N > 1 starts N copies of this
///     executable (/proc/self/exe) and supervises them like accel-launch, returning the
///     launcher's exit status.
/// fn never sees `--nproc`. A bad --nproc or ACCEL_NPROC prints an `accel: ` message and returns 2.
/// Call it first thing in main: with N > 1 this process becomes the launcher, which waits for
/// (and stops) every child it has.
template <class Fn>
requires std::is_invocable_r_v<int, Fn&, int, char**>
int launch(int argc, char** argv, Fn&& fn, LaunchOptions defaults = {}) {
  launcher::ProgramArguments program;
  try {
    program = launcher::take_nproc_argument(argc, argv);
    if (!launcher::running_as_worker()) {
      defaults.nproc =
          program.nproc ? *program.nproc : launcher::nproc_from_environment(defaults.nproc);
      launcher::validate(defaults);
    }
  } catch (const LaunchError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
  std::vector<char*> args = launcher::as_pointers(program.arguments);
  const int count = static_cast<int>(program.arguments.size());

  if (launcher::running_as_worker()) return fn(count, args.data());
  if (defaults.nproc > 1) {
    try {
      return launch_workers(defaults, "/proc/self/exe", program.arguments);
    } catch (const LaunchError& error) {
      std::fprintf(stderr, "%s\n", error.what());
      return 2;
    }
  }
  std::optional<launcher::PrivateDirectory> store;
  std::optional<launcher::ScopedWorkerEnvironment> environment;
  try {
    if (defaults.nnodes == 1) store.emplace(launcher::PrivateDirectory::create());
    environment.emplace(launcher::worker_variables(
        defaults, launcher::resolve_rendezvous(defaults, store ? store->path() : std::string()),
        0));
  } catch (const LaunchError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
  return fn(count, args.data());
}

}  // namespace accel
