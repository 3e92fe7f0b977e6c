// Between the phases of a program, on one process: release_memory(objects...) resets what it is
// given and frees what accel keeps for reuse (the async save's snapshot, the CPU flat-buffer
// cache), and training goes on after it; on_main_process / on_local_main_process run a callable
// here (rank 0) and return its result. Their other ranks, and the barrier of OthersWait::yes, are
// the `collectives` scenario (tests/distributed/worker_collectives.cpp).
#include <accel/accelerator.hpp>
#include <accel/checkpoints.hpp>
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// A namespace of its own: the test binaries compile as unity builds (tests/CMakeLists.txt).
namespace unit_phase_calls {

namespace fs = std::filesystem;

template <class Acc>
void one_step(Acc& acc, torch::nn::Linear& net, torch::optim::SGD& sgd) {
  auto [model, optimizer] = acc.prepare(net, sgd);
  acc.backward(model(torch::ones({2, 3})).sum());
  optimizer.step();
  optimizer.zero_grad();
}

TEST_CASE("release_memory: resets the objects passed and frees the async save's snapshot, and "
          "training and saving go on after it") {
  const fs::path folder =
      fs::temp_directory_path() / ("accel_release_memory_" + std::to_string(::getpid()));
  fs::remove_all(folder);
  accel::Accelerator<accel::Ddp> acc({.seed = 3});
  torch::nn::Linear net(3, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  one_step(acc, net, sgd);
  acc.save_state(folder / "ck", accel::SaveMode::async);
  CHECK(acc.memory_use().checkpoint_snapshot > 0);

  torch::Tensor activations = torch::ones({1000});
  auto shared = std::make_shared<int>(3);
  std::vector<float> values(100, 1.0F);
  torch::nn::Linear probe(2, 2);
  acc.release_memory(activations, shared, values, probe);
  CHECK(!activations.defined());
  CHECK(shared == nullptr);
  CHECK(values.empty());
  CHECK(probe.is_empty());
  CHECK(acc.memory_use().checkpoint_snapshot == 0);
  CHECK(fs::exists(folder / "ck"));  // the write under way was waited for and committed
  CHECK(accel::parallel::detail::FlatBufferCache::instance().counts().kept_bytes == 0);

  one_step(acc, net, sgd);  // the prepared model and optimizer are untouched
  acc.save_state(folder / "ck2", accel::SaveMode::async);
  acc.release_memory();
  CHECK(fs::exists(folder / "ck2"));
  acc.load_state(folder / "ck2");
  fs::remove_all(folder);
}

TEST_CASE("on_main_process / on_local_main_process: the callable runs here, its result returned, "
          "with or without the barrier, and a throw goes on") {
  accel::Accelerator<accel::Ddp> acc;
  int calls = 0;
  const std::optional<int> seven = acc.on_main_process([&] { return ++calls + 6; });
  CHECK(seven == 7);
  acc.on_main_process([&] { ++calls; }, accel::OthersWait::yes);
  const std::optional<std::string> local =
      acc.on_local_main_process([] { return std::string("node"); }, accel::OthersWait::yes);
  CHECK(local == "node");
  const auto owned = acc.on_main_process([] { return std::make_unique<int>(5); });
  REQUIRE(owned.has_value());
  CHECK(**owned == 5);
  CHECK(calls == 2);
  CHECK_THROWS_AS(acc.on_main_process([]() -> int { throw std::runtime_error("stop"); },
                                      accel::OthersWait::yes),
                  std::runtime_error);
}

}  // namespace unit_phase_calls
