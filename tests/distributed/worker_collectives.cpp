// The process group across processes: the collectives (through shared memory, or over Gloo with
// ACCEL_SHARED_MEMORY=0), the gap-fillers against the native ops, and the failures a collective
// must name promptly: mismatched, unchecked, skipped or abandoned calls, a save on the main
// process only, and the faults a test transport injects (runtime/fault_transport.hpp).
#include "scenario.hpp"

#include <accel/checkpoints.hpp>
#include <accel/runtime/fallback_transport.hpp>
#include <accel/runtime/fault_transport.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

using accel::testing::internals;

// Everything below in a namespace of its own: the workers' scenarios compile as a unity build
// (CMakeLists.txt), each program's main() calling its worker's run().
namespace dist_worker_collectives {

namespace {

using Ddp = accel::Accelerator<accel::Ddp, accel::Fp32>;
using Zero3 = accel::Accelerator<accel::Zero3, accel::Fp32>;

using accel_test::test_options;

struct Pair {
  torch::Tensor a;
  std::vector<torch::Tensor> b;
};

void collectives() {
  Ddp acc(test_options());
  const int r = acc.process_index(), w = acc.num_processes();
  const double rf = r;

  // CPU tensors go through shared memory when every rank is on this host, unless
  // ACCEL_SHARED_MEMORY=0 (the dist.gloo_* tests) turns it off.
  const auto variable = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value == nullptr ? "" : value);
  };
  EXPECT(internals(acc).process_group()->uses_shared_memory() ==
         (variable("ACCEL_SHARED_MEMORY") != "0" &&
          variable("LOCAL_WORLD_SIZE") == variable("WORLD_SIZE")));

  acc.wait_for_everyone();

  // broadcast of an aggregate: rank 0's values everywhere.
  const Pair mine{torch::full({2}, rf), {torch::full({3}, rf + 10)}};
  const Pair from_root = acc.broadcast(mine);
  EXPECT(torch::equal(from_root.a, torch::zeros({2})));
  EXPECT(torch::equal(from_root.b[0], torch::full({3}, 10.0)));
  EXPECT(torch::equal(acc.broadcast(torch::tensor({rf}), w - 1), torch::tensor({double(w - 1)})));

  // reduce: sum, mean, max, min of 0..w-1.
  const auto value = torch::tensor({rf, 1.0});
  EXPECT(torch::allclose(acc.reduce(value), torch::tensor({w * (w - 1) / 2.0, double(w)})));
  EXPECT(torch::allclose(acc.reduce(value, accel::ReduceOp::mean),
                         torch::tensor({(w - 1) / 2.0, 1.0})));
  EXPECT(torch::equal(acc.reduce(value, accel::ReduceOp::max), torch::tensor({w - 1.0, 1.0})));
  EXPECT(torch::equal(acc.reduce(value, accel::ReduceOp::min), torch::tensor({0.0, 1.0})));

  // gather: uneven first dimensions (rank r holds r+1 rows of value r), scalars one row each.
  const auto gathered = acc.gather(torch::full({r + 1, 2}, rf));
  EXPECT(gathered.size(0) == w * (w + 1) / 2);
  std::int64_t row = 0;
  for (int k = 0; k < w; ++k)
    for (int i = 0; i <= k; ++i, ++row) EXPECT(gathered[row][0].item<double>() == k);
  EXPECT(torch::equal(acc.gather(torch::tensor(rf)), torch::arange(w).to(torch::kDouble)));

  // gather_object: strings of different lengths, trivially copyable values, vectors.
  const auto names = acc.gather_object(std::string(static_cast<std::size_t>(r + 1), 'x'));
  EXPECT(static_cast<int>(names.size()) == w);
  for (int k = 0; k < w; ++k) EXPECT(names[static_cast<std::size_t>(k)].size() == std::size_t(k + 1));
  const auto ranks = acc.gather_object(r);
  for (int k = 0; k < w; ++k) EXPECT(ranks[static_cast<std::size_t>(k)] == k);
  const auto vectors = acc.gather_object(std::vector<float>(static_cast<std::size_t>(r), 1.5f));
  EXPECT(vectors[static_cast<std::size_t>(w - 1)].size() == std::size_t(w - 1));

  // pad_across_processes: to the longest, padding at the end or the front.
  const auto padded = acc.pad_across_processes(torch::ones({r + 1}), 0, -1.0);
  EXPECT(padded.size(0) == w);
  EXPECT(padded[w - 1].item<float>() == (r == w - 1 ? 1.0f : -1.0f));
  const auto front = acc.pad_across_processes(torch::ones({2, r + 1}), 1, 0.0, true);
  EXPECT(front.size(1) == w && front[0][w - 1].item<float>() == 1.0f);

  // split_between_processes: contiguous shares differing by at most one, covering everything.
  std::vector<int> items(10);
  for (int i = 0; i < 10; ++i) items[static_cast<std::size_t>(i)] = i;
  const auto share = acc.split_between_processes(items);
  const auto shares = acc.gather_object(std::vector<int>(share));
  std::vector<int> joined;
  for (const auto& s : shares) joined.insert(joined.end(), s.begin(), s.end());
  EXPECT(joined == items);
  const auto tensor_share = acc.split_between_processes(torch::arange(7));
  EXPECT(acc.gather(tensor_share).size(0) == 7);

  // Triggers: raised on the last rank, seen by all at the next check, then lowered.
  EXPECT(!acc.check_trigger());
  if (r == w - 1) acc.set_trigger();
  EXPECT(acc.check_trigger());
  EXPECT(!acc.check_trigger());

  // main_process_first: the main process writes before anyone else reads (in the launch's own
  // fresh rendezvous folder, so no earlier run's file can fake it); local_main_process_first:
  // the same per node, on one node LOCAL_RANK 0 before the others.
  const char* run_dir = std::getenv("ACCEL_STORE_DIR");
  EXPECT(run_dir != nullptr);
  // `scope` is held, unnamed, while the body runs: the one process writes inside it.
  const auto goes_first = [&](auto /*scope*/, bool first, const char* marker_name) {
    const auto marker = std::filesystem::path(run_dir) / marker_name;
    if (first) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::ofstream(marker) << "written";
    } else {
      EXPECT(std::filesystem::exists(marker));
    }
  };
  goes_first(acc.main_process_first(), acc.is_main_process(), "main_first");
  goes_first(acc.local_main_process_first(), acc.is_local_main_process(), "local_main_first");

  // on_main_process with OthersWait::yes: the others return once the main process has run the
  // callable (they find what it wrote), with no value; without waiting, on_local_main_process
  // runs it on LOCAL_RANK 0 only.
  const auto on_main = std::filesystem::path(run_dir) / "on_main";
  const std::optional<int> ran = acc.on_main_process(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::ofstream(on_main) << "written";
        return 1;
      },
      accel::OthersWait::yes);
  EXPECT(ran.has_value() == acc.is_main_process());
  EXPECT(std::filesystem::exists(on_main));
  const auto local = acc.on_local_main_process([&] { return acc.local_process_index(); });
  EXPECT(local.has_value() == acc.is_local_main_process());
  EXPECT(!local.has_value() || *local == 0);
  acc.wait_for_everyone();
}

// The collective gap-fillers give the native ops' numbers; bf16 through the fp32 wire too.
void gap_filling() {
  Ddp acc(test_options());
  auto& group = *internals(acc).process_group();
  accel::testing::Fallbacks fallbacks(group);
  const int r = acc.process_index(), w = acc.num_processes();
  const auto input = torch::arange(4 * w, torch::kFloat) * (r + 1);
  const auto chunk = torch::arange(4 * r, 4 * r + 4, torch::kFloat) * (w * (w + 1) / 2.0);
  const auto fallback = fallbacks.reduce_scatter(input, accel::ReduceOp::sum);
  const auto native = group.reduce_scatter(input);
  EXPECT(torch::equal(fallback, chunk));
  EXPECT(torch::equal(native, fallback));
  EXPECT(torch::allclose(group.reduce_scatter(input, accel::ReduceOp::mean), chunk / w));
  const auto mine = torch::full({2, 3}, double(r));
  EXPECT(torch::equal(fallbacks.allgather(mine), group.allgather(mine)));
  // allgather_into a flat buffer whose slot r is the input (as Zero2 gathers its shards), fp32
  // and bf16, native and fallback.
  for (const auto dtype : {torch::kFloat, torch::kBFloat16})
    for (const bool use_native : {true, false}) {
      torch::Tensor flat = torch::full({3 * w}, -1.0, dtype);
      flat.narrow(0, 3 * r, 3).copy_(torch::arange(3 * r, 3 * r + 3, torch::kFloat));
      if (use_native)
        group.allgather_into(flat, flat.narrow(0, 3 * r, 3));
      else
        fallbacks.allgather_into(flat, flat.narrow(0, 3 * r, 3));
      EXPECT(torch::equal(flat.to(torch::kFloat), torch::arange(3 * w, torch::kFloat)));
    }
  // Larger than the fallbacks' piece (4 Mi elements per rank): moved in several pieces, the
  // last one short, with the same result as the native ops.
  {
    const std::int64_t per_rank = (std::int64_t{4} << 20) * 2 + 3;
    const auto big = torch::arange(per_rank * w, torch::kFloat).remainder(1000) * (r + 1);
    const auto summed = fallbacks.reduce_scatter(big, accel::ReduceOp::sum);
    const auto expected = torch::arange(per_rank * r, per_rank * (r + 1), torch::kFloat)
                              .remainder(1000) * (w * (w + 1) / 2.0);
    EXPECT(torch::equal(summed, expected));
    torch::Tensor flat = torch::full({per_rank * w}, -1.0);
    flat.narrow(0, per_rank * r, per_rank).copy_(expected);
    fallbacks.allgather_into(flat, flat.narrow(0, per_rank * r, per_rank));
    EXPECT(torch::equal(flat, torch::arange(per_rank * w, torch::kFloat).remainder(1000) *
                                  (w * (w + 1) / 2.0)));
  }
  // bf16: native on a wire that has it, through fp32 where it does not; same numbers.
  auto bf = torch::full({5}, 0.5 * (r + 1), torch::kBFloat16);
  group.allreduce(bf);
  EXPECT(bf.scalar_type() == torch::kBFloat16);
  EXPECT(torch::equal(bf.to(torch::kFloat), torch::full({5}, 0.25f * w * (w + 1))));
  const auto bf_parts = group.reduce_scatter(torch::ones({2 * w}, torch::kBFloat16));
  EXPECT(torch::equal(bf_parts.to(torch::kFloat), torch::full({2}, float(w))));
  fmt::print("rank {}: native reduce_scatter {}, allgather {}, bf16 allreduce {}\n", r,
             accel::detail::gloo_has_reduce_scatter_base, accel::detail::gloo_has_allgather_base,
             accel::detail::gloo_has_bf16);
}

// The all-gather into a flat buffer and the reduce-scatter of a unit's size leave no temporary
// of that size behind them, over Gloo (dist.gloo_no_temporaries: ACCEL_SHARED_MEMORY=0, as
// between nodes) and through shared memory: under an mmap threshold below that size (Zero3's
// default is 8 MiB) each such temporary would be mapped and faulted in again at every call,
// thousands of page faults (docs/concepts/performance.md, "Two nodes over Gloo TCP"). The
// results are checked too, the all-gather's input apart from the output and in its slot.
void no_temporaries() {
  Ddp acc(test_options());
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 8 << 20);  // after the Accelerator's own heap tuning (Ddp's: 32 MiB)
#endif
  auto& group = *internals(acc).process_group();
  const int r = acc.process_index(), w = acc.num_processes();
  const std::int64_t per_rank = (std::int64_t{3} << 20) / w;  // 12 MiB of fp32 in all
  const std::int64_t n = per_rank * w;
  const auto expected_gather = torch::arange(n, torch::kFloat);
  const auto shard = expected_gather.narrow(0, per_rank * r, per_rank).clone();
  const auto gradient = torch::arange(n, torch::kFloat).remainder(97) * (r + 1);
  const auto expected_chunk = torch::arange(per_rank * r, per_rank * (r + 1), torch::kFloat)
                                  .remainder(97) * (w * (w + 1) / 2.0);
  torch::Tensor flat = torch::empty({n});
  const auto faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_minflt);
  };
  const auto calls = [&] {
    flat.fill_(-1);
    group.allgather_into(flat, shard);
    EXPECT(torch::equal(flat, expected_gather));
    flat.narrow(0, per_rank * r, per_rank).copy_(shard);
    auto gathering = group.allgather_into_async(flat, flat.narrow(0, per_rank * r, per_rank));
    gathering.wait();
    EXPECT(torch::equal(flat, expected_gather));
    EXPECT(torch::equal(group.reduce_scatter(gradient), expected_chunk));
    auto summing = group.reduce_scatter_async(gradient, accel::ReduceOp::mean);
    summing.wait();
    EXPECT(torch::allclose(summing.result, expected_chunk / w));
  };
  // The first calls make the buffers that stay (a collective's work may hold its buffer for a
  // moment after wait() returns: one more of the size may be made then).
  calls();
  calls();
  const double before = faults();
  constexpr int repeats = 16;
  for (int i = 0; i < repeats; ++i) calls();
  // Four collectives a call; each temporary of the input's size would fault in its n * 4 / 4096
  // pages. The chunk-sized results (below the threshold) come from the heap.
  const double per_collective = (faults() - before) / (4 * repeats);
  const double pages = static_cast<double>(n) * 4 / 4096;
  fmt::print("rank {}: {:.0f} page faults per collective of {:.0f} pages\n", r, per_collective,
             pages);
  EXPECT(per_collective < pages / 8);
}

// Rank 0 and the others call different collectives: both fail naming both calls.
void mismatch() {
  Ddp acc(test_options());
  const int r = acc.process_index();
  try {
    acc.reduce(torch::ones({r == 0 ? 3 : 4}));
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    EXPECT(what.find("mismatched collective") != std::string::npos);
    EXPECT(what.find("rank 0: allreduce") != std::string::npos);
    EXPECT(what.find("shape=3") != std::string::npos && what.find("shape=4") != std::string::npos);
    fmt::print("rank {} caught: {}\n", r, what);
    return;
  }
  throw std::runtime_error("the mismatched collective was not detected");
}

// --- Prompt, named failures ----------------------------------------------------------------------

// With collective checking off, the cheap checks still run where they cost no extra round trip:
// a broadcast carries the root's dtype and shape, a gather's row count carries the rest.
void unchecked_mismatch() {
  Ddp acc({.timeout = std::chrono::seconds(60)});  // check_collectives off
  const int r = acc.process_index();
  const auto expect_error = [&](auto&& call, std::string_view needle) {
    try {
      call();
    } catch (const accel::Error& error) {
      const std::string what = error.what();
      fmt::print("rank {} caught: {}\n", r, what);
      EXPECT(what.find(needle) != std::string::npos);
      return;
    }
    throw std::runtime_error(fmt::format("no error containing '{}'", needle));
  };
  // The same bytes, another shape: only the non-root ranks can see it.
  if (r == 0)
    (void)acc.broadcast(torch::zeros({2, 3}));
  else
    expect_error([&] { (void)acc.broadcast(torch::zeros({3, 2})); },
                 "the root sent a Float tensor of shape [2, 3]");
  // The same bytes, another dtype.
  if (r == 0)
    (void)acc.broadcast(torch::zeros({2}, torch::kLong));
  else
    expect_error([&] { (void)acc.broadcast(torch::zeros({4}, torch::kFloat)); },
                 "the root sent a Long tensor of shape [2]");
  // gather: another dtype or trailing shape on one rank fails on every rank, naming each.
  expect_error([&] { (void)acc.gather(torch::zeros({2, r == 0 ? 3 : 4})); },
               "rank 1: Float tensor of shape [rows, 4]");
  expect_error([&] { (void)acc.gather(torch::zeros({2}, r == 0 ? torch::kFloat : torch::kDouble)); },
               "rank 0: Float tensor of shape [rows, ]");
  // A mean of integers would round: refused on every rank before anything is sent.
  expect_error([&] { (void)acc.reduce(torch::ones({2}, torch::kLong), accel::ReduceOp::mean); },
               "a mean over the ranks of a Long tensor");
  acc.wait_for_everyone();
}

// Different byte counts reach Gloo, which stops the process from its own thread: the process
// must still say why, in an accel: line.
// On Gloo (the shared-memory path compares every call: shm_mismatched_reduce).
void gloo_abort() {
  Ddp acc({.timeout = std::chrono::seconds(20), .shared_memory = false});
  auto t = torch::ones({4}, acc.process_index() == 0 ? torch::kFloat : torch::kDouble);
  (void)acc.reduce(t);
  throw std::runtime_error("a reduce of 16 bytes against 32 bytes returned");
}

// The same mismatch through shared memory: every rank fails with an error naming both calls,
// nothing aborts.
void shm_mismatched_reduce() {
  Ddp acc({.timeout = std::chrono::seconds(20)});
  auto t = torch::ones({4}, acc.process_index() == 0 ? torch::kFloat : torch::kDouble);
  try {
    (void)acc.reduce(t);
  } catch (const accel::Error& error) {
    const std::string what = error.what();
    fmt::print("rank {} caught: {}\n", acc.process_index(), what);
    EXPECT(what.find("mismatched collective") != std::string::npos);
    EXPECT(what.find("(4 elements of float32)") != std::string::npos);
    EXPECT(what.find("(4 elements of float64)") != std::string::npos);
    return;
  }
  throw std::runtime_error("a reduce of 16 bytes against 32 bytes returned");
}

// The last rank leaves its Accelerator normally (it caught an error of its own and returns
// non-zero) while the others wait in a barrier: it must not hold them for long, and their error
// names the barrier and the rank that left.
void caught_error() {
  bool failed = false;
  {
    Ddp acc({.timeout = std::chrono::seconds(60)});
    if (acc.process_index() == acc.num_processes() - 1) {
      try {
        throw std::runtime_error("a user error, caught");
      } catch (const std::runtime_error&) {
        failed = true;
      }
    } else {
      acc.wait_for_everyone();
    }
  }
  if (failed) std::exit(3);
}

// The last rank skips a collective and finishes normally; ACCEL_TIMEOUT (set by the test to 2 s)
// bounds the others' wait, and their error names the collective and the rank that left.
void skipped_collective() {
  Ddp acc({.timeout = std::chrono::minutes(30)});
  if (acc.process_index() != acc.num_processes() - 1) acc.wait_for_everyone();
}

// The docs' own mistake: a save inside `if (is_main_process())`. Rank 0 enters save_state's
// collectives while rank 1 goes on to the next step's gradient all-reduce: both must fail within
// seconds (not the 30-minute timeout), naming save_state and what rank 1 called instead.
void save_in_main_process_only() {
  Ddp acc({.timeout = std::chrono::minutes(30)});
  torch::manual_seed(3);
  torch::nn::Linear net(16, 4);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  const auto folder = std::filesystem::temp_directory_path() /
                      fmt::format("accel-save-main-only-{}", ::getppid());
  for (int step = 0; step < 4; ++step) {
    const auto loss = model->forward(torch::ones({2, 16})).sum();
    acc.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (step == 1 && acc.is_main_process()) acc.save_state(folder);
  }
  throw std::runtime_error("a save on rank 0 alone returned on every rank");
}

// wait_for_everyone() on rank 0 alone while rank 1 gathers, through shared memory (the test leaves
// it on): both ranks must fail within seconds, each naming its own call and the other rank's,
// rather than wait for the 30-minute timeout in two transports that never meet.
void lone_wait_for_everyone() {
  Ddp acc({.timeout = std::chrono::minutes(30)});
  const int rank = acc.process_index();
  const std::string what = accel_test::error_of([&] {
    if (rank == 0)
      acc.wait_for_everyone();
    else
      (void)acc.gather_for_metrics(torch::ones({2}));
  });
  fmt::print("rank {} caught: {}\n", rank, what);
  EXPECT(what.find("mismatched collective") != std::string::npos);
  EXPECT(what.find(rank == 0 ? " in wait_for_everyone failed on rank 0"
                             : " in gather_for_metrics failed on rank 1") != std::string::npos);
  EXPECT(what.find("rank 0: barrier #") != std::string::npos);
  EXPECT(what.find("rank 1: allgather #") != std::string::npos);
}

// A collective library call on the main process only under Zero3 over Gloo (the test sets
// ACCEL_SHARED_MEMORY=0): rank 0's call all-gathers while rank 1's next forward all-gathers its
// parameters, so Gloo meets messages of different sizes and stops the process from one of its own
// threads. Both ranks must still name what each called and exit with the stuck-collective line.
void zero3_main_process_only(std::string_view call) {
  Zero3 acc({.timeout = std::chrono::minutes(30)});
  torch::manual_seed(3);
  torch::nn::Sequential net(torch::nn::Linear(16, 8), torch::nn::Linear(8, 4));
  torch::optim::SGD sgd(net->parameters(), 0.1);
  auto [model, optimizer] = acc.prepare(net, sgd);
  const auto folder = std::filesystem::temp_directory_path() /
                      fmt::format("accel-zero3-main-only-{}", ::getppid());
  if (call == "load_state") acc.save_state(folder);
  for (int step = 0; step < 4; ++step) {
    const auto loss = model->forward(torch::ones({2, 16})).sum();
    acc.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (step != 1 || !acc.is_main_process()) continue;
    if (call == "save_state") acc.save_state(folder);
    if (call == "save_model") acc.save_model(model, folder / "model");
    if (call == "load_state") (void)acc.load_state(folder);
    if (call == "gather_for_metrics") (void)acc.gather_for_metrics(torch::ones({3}));
  }
  throw std::runtime_error(fmt::format("{} on rank 0 alone returned on every rank", call));
}
void zero3_save_state_main_only() { zero3_main_process_only("save_state"); }
void zero3_save_model_main_only() { zero3_main_process_only("save_model"); }
void zero3_load_state_main_only() { zero3_main_process_only("load_state"); }
void zero3_gather_main_only() { zero3_main_process_only("gather_for_metrics"); }

// --- Faults a test transport injects (runtime/fault_transport.hpp) --------------------------------

using accel::testing::Fault;

// The fault strikes the third collective from now, on the last rank.
accel::testing::FaultPlan plan_for(Fault fault, const accel::runtime::ProcessGroup& group) {
  return {.fault = fault, .collective = group.collectives_issued() + 2, .rank = group.size() - 1};
}

// Three all-reduces of ones(4) through `faults`: the third meets the fault.
torch::Tensor three_allreduces(accel::testing::Faults& faults) {
  torch::Tensor t;
  for (int i = 0; i < 3; ++i) {
    t = torch::ones({4});
    faults.allreduce(t);
  }
  return t;
}

// The transport throws on the last rank. Every rank fails with an accel: error that names the
// collective, its number and the rank: the throwing rank's quotes the transport's text, and its
// group leaves at once; the peers' names that rank as gone, at once (through shared memory as
// over Gloo, where the rank's connections close), not at the timeout.
void fault_throws() {
  Ddp acc({.timeout = std::chrono::seconds(2), .check_collectives = true});
  auto& group = *internals(acc).process_group();
  const int r = acc.process_index();
  const auto plan = plan_for(Fault::throws, group);
  accel::testing::Faults faults(group, plan);
  const std::string what = accel_test::error_of([&] { (void)three_allreduces(faults); });
  fmt::print("rank {} caught: {}\n", r, what);
  EXPECT(what.starts_with("accel: "));
  EXPECT(what.find(fmt::format("allreduce #{} (Float, shape 4) failed on rank {}: ",
                               plan.collective, r)) != std::string::npos);
  if (r == plan.rank)
    EXPECT(what.find("accel::testing::FaultTransport injected") != std::string::npos);
  else
    EXPECT(what.find(fmt::format("rank {} has left the group", plan.rank)) != std::string::npos);
  EXPECT(what.find("did not arrive within the timeout") == std::string::npos &&
         what.find("Timed out") == std::string::npos);
}

// The last rank calls the collective with one element fewer: the same-collective check fails on
// every rank alike, naming each rank's call, before any transport runs, so the group goes on.
void fault_differs() {
  Ddp acc(test_options());  // checking on
  auto& group = *internals(acc).process_group();
  const int r = acc.process_index(), w = acc.num_processes();
  const auto plan = plan_for(Fault::differs, group);
  accel::testing::Faults faults(group, plan);
  const std::string what = accel_test::error_of([&] { (void)three_allreduces(faults); });
  fmt::print("rank {} caught: {}\n", r, what);
  EXPECT(what.starts_with(fmt::format("accel: mismatched collective on rank {}", r)));
  EXPECT(what.find(fmt::format("rank 0: allreduce #{} dtype=Float shape=4", plan.collective)) !=
         std::string::npos);
  EXPECT(what.find(fmt::format("rank {}: allreduce #{} dtype=Float shape=3", plan.rank,
                               plan.collective)) != std::string::npos);
  auto t = torch::ones({4});
  faults.allreduce(t);
  EXPECT(torch::equal(t, torch::full({4}, double(w))));
}

// The result is corrupted on the last rank: nothing in the group detects it (the layer checks
// what each rank calls, not what the transport returns), so the ranks go on with different sums.
void fault_corrupts() {
  Ddp acc(test_options());
  auto& group = *internals(acc).process_group();
  const int r = acc.process_index(), w = acc.num_processes();
  const auto plan = plan_for(Fault::corrupts, group);
  accel::testing::Faults faults(group, plan);
  const torch::Tensor sum = three_allreduces(faults);  // no error on any rank
  EXPECT(torch::equal(sum, torch::full({4}, double(w + (r == plan.rank ? 1 : 0)))));
  const torch::Tensor sums = faults.allgather(sum.sum());
  EXPECT(sums[plan.rank].item<double>() == 4.0 * (w + 1) && sums[0].item<double>() == 4.0 * w);
  acc.wait_for_everyone();
}

// The call never returns on the last rank: the others fail at Options::timeout (2 s) naming the
// collective, and exit; the launcher then ends the one that hangs (a launch of its own).
void fault_never_completes() {
  Ddp acc({.timeout = std::chrono::seconds(2), .check_collectives = true});
  auto& group = *internals(acc).process_group();
  accel::testing::Faults faults(group, plan_for(Fault::never_completes, group));
  (void)three_allreduces(faults);
  throw std::runtime_error("a collective that never completed on one rank returned on every rank");
}

}  // namespace

int run(int argc, char** argv) {
  const accel_test::Scenarios scenarios = {
      {"collectives", collectives},
      {"gap_filling", gap_filling},
      {"no_temporaries", no_temporaries},
      {"mismatch", mismatch},
      {"unchecked_mismatch", unchecked_mismatch},
      {"gloo_abort", gloo_abort},
      {"shm_mismatched_reduce", shm_mismatched_reduce},
      {"caught_error", caught_error},
      {"save_in_main_process_only", save_in_main_process_only},
      {"skipped_collective", skipped_collective},
      {"lone_wait_for_everyone", lone_wait_for_everyone},
      {"zero3_save_state_main_only", zero3_save_state_main_only},
      {"zero3_save_model_main_only", zero3_save_model_main_only},
      {"zero3_load_state_main_only", zero3_load_state_main_only},
      {"zero3_gather_main_only", zero3_gather_main_only},
      {"fault_throws", fault_throws},
      {"fault_differs", fault_differs},
      {"fault_corrupts", fault_corrupts},
      {"fault_never_completes", fault_never_completes},
  };
  return accel_test::run_scenario(argc, argv, scenarios);
}

}  // namespace dist_worker_collectives
