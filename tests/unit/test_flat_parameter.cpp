// Flat parameters without any process group: padding to the world size, parameters as views
// of the buffer, this rank's pieces of the shard, gradients as views.
#include <accel/parallel/flat_parameter.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <tuple>
#include <vector>

// Everything below in a namespace of its own: the test binaries compile as unity builds
// (tests/CMakeLists.txt), where two files' helpers of the same name would collide.
namespace unit_flat_parameter {

namespace {

using accel::parallel::FlatLayout;
using accel::parallel::FlatParameter;

// Trainable parameters of these shapes holding 1, 2, 3, ... in flattened order.
std::vector<torch::Tensor> numbered(const std::vector<std::vector<std::int64_t>>& shapes) {
  std::vector<torch::Tensor> params;
  double next = 1;
  for (const auto& shape : shapes) {
    torch::Tensor p = torch::empty(shape);
    const auto n = p.numel();
    p.view(-1).copy_(torch::arange(next, next + static_cast<double>(n)));
    next += static_cast<double>(n);
    params.push_back(p.requires_grad_(true));
  }
  return params;
}

std::vector<std::string> names(std::size_t n) {
  std::vector<std::string> result;
  for (std::size_t i = 0; i < n; ++i) result.push_back(fmt::format("p{}", i));
  return result;
}

bool same_storage(const torch::Tensor& a, const torch::Tensor& b) {
  return a.storage().data() == b.storage().data();
}

}  // namespace

TEST_CASE("the layout pads to a multiple of the world size") {
  // The distributed tests' regression model: 40 + 8 + 8 + 1 = 57 elements.
  const FlatLayout two({40, 8, 8, 1}, 2);
  CHECK(two.numel == 57);
  CHECK(two.padded_numel == 58);
  CHECK(two.shard_numel == 29);
  CHECK(two.offsets == std::vector<std::int64_t>{0, 40, 48, 56});
  const FlatLayout three({40, 8, 8, 1}, 3);
  CHECK(three.padded_numel == 57);  // divides: no padding
  const FlatLayout frozen_bias({40, 8, 1}, 3);
  CHECK(frozen_bias.padded_numel == 51);
  CHECK(frozen_bias.shard_numel == 17);
  const FlatLayout one({5}, 1);
  CHECK(one.padded_numel == 5);
  // Fewer elements than ranks: some shards hold only padding.
  const FlatLayout tiny({2}, 4);
  CHECK(tiny.padded_numel == 4);
  CHECK(tiny.shard_numel == 1);
}

TEST_CASE("parameters become views of one buffer, values kept, padding zero") {
  auto params = numbered({{4, 5}, {4}, {1, 4}, {1}});  // 29 elements
  const auto originals = [&] {
    std::vector<torch::Tensor> copies;
    for (const auto& p : params) copies.push_back(p.detach().clone());
    return copies;
  }();
  const void* impl = params[0].unsafeGetTensorImpl();
  FlatParameter flat(params, names(params.size()), 3, 1);
  CHECK(flat.flat().numel() == 30);
  CHECK(flat.flat()[29].item<float>() == 0.0f);  // padding
  for (std::size_t i = 0; i < params.size(); ++i) {
    CHECK(same_storage(params[i], flat.flat()));
    CHECK(torch::equal(params[i], originals[i]));
    CHECK(params[i].requires_grad());
    CHECK(params[i].is_leaf());
  }
  CHECK(params[0].unsafeGetTensorImpl() == impl);  // the same tensor, new data
  CHECK(flat.flat().narrow(0, 0, 29).equal(torch::arange(1, 30, torch::kFloat)));
  // Writing the buffer writes the parameters: what the all-gather after a step relies on.
  flat.flat().fill_(7);
  for (const auto& p : params) CHECK(p.eq(7).all().item<bool>());
}

TEST_CASE("this rank's shard is cut into pieces along parameter boundaries") {
  // 29 elements on 3 ranks: padded to 30, shards [0,10) [10,20) [20,30).
  const std::vector<std::vector<std::int64_t>> shapes{{4, 5}, {4}, {1, 4}, {1}};
  for (int rank = 0; rank < 3; ++rank) {
    auto params = numbered(shapes);
    FlatParameter flat(params, names(params.size()), 3, rank);
    CHECK(flat.shard().numel() == 10);
    CHECK(same_storage(flat.shard(), flat.flat()));
    // The shard gradient is allocated when first asked for; the pieces' .grad then alias it,
    // each at its own place in the shard.
    CHECK(!flat.has_shard_gradient());
    for (const auto& piece : flat.pieces()) CHECK(!piece.data.grad().defined());
    const torch::Tensor shard_gradient = flat.shard_gradient();
    CHECK(flat.has_shard_gradient());
    CHECK(shard_gradient.numel() == 10);
    CHECK(shard_gradient.abs().sum().item<float>() == 0);
    std::int64_t covered = 0;
    for (const auto& piece : flat.pieces()) {
      CHECK(piece.data.is_leaf());
      CHECK(same_storage(piece.data, flat.flat()));
      CHECK(piece.data.grad().defined());
      CHECK(same_storage(piece.data.grad(), shard_gradient));
      CHECK(piece.data.grad().data_ptr<float>() - shard_gradient.data_ptr<float>() ==
            piece.data.data_ptr<float>() - flat.shard().data_ptr<float>());
      // The piece holds the parameter's elements from `begin` on.
      const auto expected = params[piece.parameter].detach().reshape(-1).narrow(
          0, piece.begin, piece.data.numel());
      CHECK(torch::equal(piece.data, expected));
      covered += piece.data.numel();
    }
    if (rank == 0) {  // the first 10 elements of the 4x5 weight
      REQUIRE(flat.pieces().size() == 1);
      CHECK(flat.pieces()[0].parameter == 0);
      CHECK(flat.pieces()[0].begin == 0);
      CHECK(covered == 10);
    } else if (rank == 1) {  // the rest of it
      REQUIRE(flat.pieces().size() == 1);
      CHECK(flat.pieces()[0].begin == 10);
      CHECK(covered == 10);
    } else {  // the 4-vector, the 1x4 matrix, the scalar and one element of padding
      REQUIRE(flat.pieces().size() == 3);
      CHECK(flat.pieces()[0].parameter == 1);
      CHECK(flat.piece_of(0) == nullptr);
      CHECK(flat.piece_of(3) == &flat.pieces()[2]);
      CHECK(covered == 9);
    }
    // Updating a piece updates the parameter it covers.
    torch::NoGradGuard no_grad;
    const auto& piece = flat.pieces().front();
    piece.data.add_(100);
    CHECK(params[piece.parameter].detach().reshape(-1)[piece.begin].item<float>() > 100);
  }
}

TEST_CASE("gradients are views of a full buffer until released") {
  auto params = numbered({{3, 2}, {2}});
  FlatParameter flat(params, names(params.size()), 2, 0);
  CHECK_FALSE(flat.gradient().defined());
  flat.attach_gradients();
  REQUIRE(flat.gradient().defined());
  CHECK(flat.gradient().numel() == 8);
  for (const auto& p : params) CHECK(same_storage(p.grad(), flat.gradient()));
  // Backward accumulates in place into the views.
  (params[0].sum() * 2 + params[1].sum()).backward();
  CHECK(flat.gradient().narrow(0, 0, 6).eq(2).all().item<bool>());
  CHECK(flat.gradient().narrow(0, 6, 2).eq(1).all().item<bool>());
  CHECK(flat.gradient().narrow(0, 6, 2).data_ptr() == params[1].grad().data_ptr());
  // A .grad the user replaced is copied in and becomes a view again.
  params[1].mutable_grad() = torch::full({2}, 5.0);
  flat.attach_gradients();
  CHECK(same_storage(params[1].grad(), flat.gradient()));
  CHECK(flat.gradient().narrow(0, 6, 2).eq(5).all().item<bool>());
  const auto kept = accel::parallel::detail::FlatBufferCache::instance().counts().kept_bytes;
  flat.release_gradients();
  CHECK_FALSE(flat.gradient().defined());
  for (const auto& p : params) CHECK_FALSE(p.grad().defined());
  // A replicated flat parameter's gradient (Zero2's bucket) is the heap's, not the cache's.
  CHECK(accel::parallel::detail::FlatBufferCache::instance().counts().kept_bytes == kept);
  // Attached again: zeros.
  flat.attach_gradients();
  CHECK(flat.gradient().eq(0).all().item<bool>());
}

TEST_CASE("the flat buffer cache lends a freed block again and never holds more than was lent") {
  using accel::parallel::detail::cached_cpu_buffer;
  auto& cache = accel::parallel::detail::FlatBufferCache::instance();
  cache.release();
  const auto before = cache.counts();
  auto counts = [&] {
    const auto now = cache.counts();
    return std::tuple(now.kept_bytes, now.fresh_blocks - before.fresh_blocks,
                      now.reused_blocks - before.reused_blocks);
  };
  const void* first = nullptr;
  {
    torch::Tensor a = cached_cpu_buffer(1000, torch::kFloat);
    CHECK(a.sizes() == torch::IntArrayRef{1000});
    CHECK(a.is_contiguous());
    a.fill_(3);
    first = a.data_ptr();
    torch::Tensor view = a.narrow(0, 10, 5);  // a view keeps the block lent
    a = torch::Tensor();
    CHECK(counts() == std::tuple(std::size_t{0}, 1, 0));
  }
  CHECK(counts() == std::tuple(std::size_t{4000}, 1, 0));
  torch::Tensor b = cached_cpu_buffer(1000, torch::kFloat);  // the same size: the same block
  CHECK(b.data_ptr() == first);
  CHECK(counts() == std::tuple(std::size_t{0}, 1, 1));
  torch::Tensor c = cached_cpu_buffer(250, torch::kDouble);  // 2000 bytes: fresh
  b = torch::Tensor();
  c = torch::Tensor();
  CHECK(counts() == std::tuple(std::size_t{6000}, 2, 1));
  // No block of 6000 bytes: a fresh one, the kept ones staying, since kept, lent and asked
  // (12000 bytes) fit under the most lent at once (6000) plus one largest block (6000).
  torch::Tensor d = cached_cpu_buffer(1500, torch::kFloat);
  CHECK(counts() == std::tuple(std::size_t{6000}, 3, 1));
  d = torch::Tensor();
  // 400 bytes more would not fit: the oldest kept block (4000 bytes) goes.
  torch::Tensor e = cached_cpu_buffer(100, torch::kFloat);
  CHECK(counts() == std::tuple(std::size_t{8000}, 4, 1));
  e = torch::Tensor();
  CHECK(counts() == std::tuple(std::size_t{8400}, 4, 1));
  cache.release();
  CHECK(counts() == std::tuple(std::size_t{0}, 4, 1));
  // Sizes taking turns, as Zero3 lends them under Options::sharded_communication (a unit's
  // buffer, its narrowed landing, its gradient, the gradient's narrowed copy): the first turn's
  // blocks serve the next turns, none freed for another size.
  for (int turn = 0; turn < 3; ++turn) {
    torch::Tensor full = cached_cpu_buffer(1000, torch::kFloat);
    { torch::Tensor landing = cached_cpu_buffer(1000, torch::kBFloat16); }
    torch::Tensor gradient = cached_cpu_buffer(1000, torch::kFloat);
    torch::Tensor sent = cached_cpu_buffer(1000, torch::kBFloat16);  // the landing's block
    gradient = torch::Tensor();
  }
  CHECK(counts() == std::tuple(std::size_t{10000}, 7, 10));
  cache.release();
}

TEST_CASE("a sharded flat parameter's full buffer and gradient come back from the cache") {
  auto& cache = accel::parallel::detail::FlatBufferCache::instance();
  auto params = numbered({{3, 5}, {7}});
  FlatParameter flat(params, names(params.size()), 2, 1, accel::parallel::Residency::sharded);
  cache.release();
  flat.to_rest();
  CHECK(cache.counts().kept_bytes == 0);  // the first buffer was the CPU allocator's
  flat.materialize();
  const void* full = flat.flat().data_ptr();
  const std::int64_t reused = cache.counts().reused_blocks;
  flat.attach_gradients();
  CHECK(flat.gradient().eq(0).all().item<bool>());
  flat.free_full();
  CHECK(cache.counts().kept_bytes == 22 * sizeof(float));
  flat.release_gradients();
  CHECK(cache.counts().kept_bytes == 44 * sizeof(float));
  flat.materialize();  // the gradient's block, the most recently freed
  CHECK(cache.counts().reused_blocks == reused + 1);
  flat.attach_gradients();  // the first full buffer's, zeroed
  CHECK(flat.gradient().data_ptr() == full);
  CHECK(flat.gradient().eq(0).all().item<bool>());
  CHECK(cache.counts().kept_bytes == 0);
  CHECK(params[0].sizes() == torch::IntArrayRef{3, 5});
  CHECK(params[0].data_ptr() == flat.flat().data_ptr());
}

TEST_CASE("one flat parameter holds one dtype") {
  std::vector<torch::Tensor> params{torch::zeros({2}).requires_grad_(true),
                                    torch::zeros({2}, torch::kDouble).requires_grad_(true)};
  CHECK_THROWS_WITH(FlatParameter(params, {"a", "b"}, 2, 0),
                    doctest::Contains("accel: FlatParameter: parameter 'b' is Double"));
}

}  // namespace unit_flat_parameter
