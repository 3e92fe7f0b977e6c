// Reading the job's layout from accel-launch/torchrun, Slurm and OpenMPI variables, and the
// errors for missing or inconsistent values.
#include <accel/accelerator.hpp>
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "helpers.hpp"

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_environment {

namespace {

constexpr const char* kAllVariables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "ACCEL_STORE_DIR", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NODEID", "SLURM_JOB_NODELIST", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE"};

// Exactly these launcher variables for one scope; every other one unset.
std::vector<accel_test::ScopedEnv::Entry> only(std::vector<accel_test::ScopedEnv::Entry> values) {
  std::vector<accel_test::ScopedEnv::Entry> entries;
  for (const char* name : kAllVariables) entries.emplace_back(name, nullptr);
  entries.insert(entries.end(), values.begin(), values.end());
  return entries;
}
struct Env : accel_test::ScopedEnv {
  explicit Env(std::vector<Entry> values) : ScopedEnv(only(std::move(values))) {}
};

}  // namespace

using accel::runtime::Launcher;
using accel::runtime::read_environment;

TEST_CASE("no launcher variables: one process") {
  Env env({});
  const auto e = read_environment();
  CHECK(e.launcher == Launcher::none);
  CHECK(e.process.world_size == 1);
  CHECK(e.process.rank == 0);
}

TEST_CASE("torchrun-style variables") {
  Env env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
           {"GROUP_RANK", "1"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29600"}});
  const auto e = read_environment();
  CHECK(e.launcher == Launcher::torchrun);
  CHECK(e.process.rank == 3);
  CHECK(e.process.world_size == 4);
  CHECK(e.process.local_rank == 1);
  CHECK(e.process.local_world_size == 2);
  CHECK(e.node_rank == 1);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 29600);
}

TEST_CASE("Slurm variables, master from the node list") {
  Env env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
           {"SLURM_NODEID", "1"}, {"SLURM_JOB_NODELIST", "gpu[003-005,010],cpu01"},
           {"SLURM_TASKS_PER_NODE", "2(x2)"}});
  const auto e = read_environment();
  CHECK(e.launcher == Launcher::slurm);
  CHECK(e.process.rank == 3);
  CHECK(e.process.world_size == 4);
  CHECK(e.process.local_rank == 1);
  CHECK(e.process.local_world_size == 2);
  CHECK(e.node_rank == 1);
  CHECK(e.master_addr == "gpu003");
  CHECK(accel::runtime::first_slurm_host("login7") == "login7");
  CHECK(accel::runtime::first_slurm_host("n[1-2]") == "n1");
}

TEST_CASE("OpenMPI variables, a single-node job stays on loopback") {
  Env env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  const auto e = read_environment();
  CHECK(e.launcher == Launcher::openmpi);
  CHECK(e.process.rank == 1);
  CHECK(e.process.world_size == 2);
  CHECK(e.master_addr == "127.0.0.1");
}

TEST_CASE("missing or inconsistent values name the variable and its value") {
  auto fails_with = [](std::vector<std::pair<const char*, const char*>> values,
                       const char* expected) {
    Env env(std::move(values));
    CHECK_THROWS_WITH_AS(read_environment(), doctest::Contains(expected), accel::Error);
  };
  fails_with({{"RANK", "0"}, {"WORLD_SIZE", "two"}}, "WORLD_SIZE='two' is not an integer");
  fails_with({{"WORLD_SIZE", "2"}}, "RANK is not set");
  fails_with({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
             "RANK=2 is outside 0..WORLD_SIZE-1 with WORLD_SIZE=2");
  fails_with({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0");
  fails_with({{"RANK", "1"}, {"WORLD_SIZE", "2"}}, "WORLD_SIZE=2 but no MASTER_ADDR");
  fails_with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
             "MASTER_PORT=70000 is not a TCP port");
  fails_with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"LOCAL_RANK", "2"},
              {"LOCAL_WORLD_SIZE", "2"}},
             "LOCAL_RANK=2 is outside");
  fails_with({{"SLURM_PROCID", "0"}}, "SLURM_NTASKS is not set");
}

TEST_CASE("a store folder replaces the master address") {
  Env env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"ACCEL_STORE_DIR", "/tmp/x"}});
  CHECK(read_environment().store_dir == "/tmp/x");
}

}  // namespace unit_environment
