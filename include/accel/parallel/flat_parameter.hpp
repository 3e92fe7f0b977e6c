// A flat parameter: parameters of one dtype and device laid end to end in one buffer, padded to
// a multiple of the world size so that it splits into equal, contiguous shards, one per rank.
// The parameters themselves become views into the buffer (param.set_data(...), as PyTorch FSDP
// does): the module, autograd and the user's code keep the same tensors, and one collective
// over the buffer moves them all.
//
// The gradients have the same layout. While a window collects gradients, each .grad is a view
// into a full flat gradient buffer, so backward accumulates straight into it; the sharded
// strategies reduce-scatter that buffer into this rank's shard gradient and then release it
// (release_gradients): between steps a rank holds only its shard of the gradients. The shard
// gradient itself is allocated (zeros) when first needed, by the first reduce-scatter into it
// or whatever reads it (shard_gradient()), as PyTorch FSDP allocates its sharded gradient at
// the first backward: until then a prepared model costs its shards only (docs/how-to/large-models.md, "Empty
// builds"), and the pieces' .grad are undefined.
//
// This rank's shard is cut along parameter boundaries into pieces: leaf tensors that alias the
// shard (no copy), each with a .grad that aliases the shard gradient. An optimizer built over the
// pieces updates this rank's shard in place, and keeps state for the shard only.
//
// Residency says what a rank keeps of the parameters between uses. Replicated (Zero2): the full
// buffer always, the shard being a view of it. Sharded (Zero3): the shard in its own tensor, and
// the full buffer only from materialize() (then all-gathered by the strategy) to free_full(),
// which releases its storage (0 bytes) while the parameters stay views of it, shapes intact, as
// autograd's saved tensors need (checked on libtorch 1.13; PyTorch FSDP frees so too). On CPU
// its full buffer's memory and its full gradient's come from detail::FlatBufferCache, which
// keeps a freed block for the next unit of the same size instead of mapping it fresh. At
// rest (to_rest()), the parameters are zero-element tensors, so code that reads them outside a
// forward gets a shape error, not freed memory.
//
// Parameters of an empty build (accel::deferred_init: on the meta device) make a sharded flat
// parameter that starts at rest on `device`: its shard zeros, no full buffer ever allocated, and
// the parameters (the same tensors) views of no memory there; fill_piece() then writes each
// parameter's value, as the build's replay produces it, into this rank's part of the shard.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../detail/deferred_build.hpp"
#include "../detail/error.hpp"
#include "detail/flat_buffer_cache.hpp"

namespace accel::parallel {

enum class Residency { replicated, sharded };

// Where each of `numels` lands in a flat buffer split into `world` shards.
struct FlatLayout {
  std::vector<std::int64_t> offsets;  // of each parameter, in elements
  std::int64_t numel = 0;             // the parameters' elements
  std::int64_t padded_numel = 0;      // numel rounded up to a multiple of world
  std::int64_t shard_numel = 0;       // padded_numel / world

  FlatLayout(const std::vector<std::int64_t>& numels, int world) {
    if (world < 1) accel::detail::fail("FlatLayout: world size {}; it must be at least 1", world);
    for (const auto n : numels) {
      offsets.push_back(numel);
      numel += n;
    }
    padded_numel = (numel + world - 1) / world * world;
    shard_numel = padded_numel / world;
  }
};

class FlatParameter {
 public:
  // Part of a parameter inside this rank's shard.
  struct Piece {
    std::size_t parameter;  // index into parameters()
    std::int64_t begin;     // first element of the parameter it covers (flattened order)
    torch::Tensor data;     // 1-D leaf tensor aliasing the flat buffer; .grad aliases the shard gradient
  };

  // params: the same dtype and device, each requiring a gradient (frozen parameters are never
  // flattened). names: for errors. Their values are copied in; they then alias the buffer.
  FlatParameter(std::vector<torch::Tensor> params, std::vector<std::string> names, int world,
                int rank, Residency residency = Residency::replicated,
                torch::Device device_if_meta = torch::kCPU)
      : parameters_(std::move(params)), names_(std::move(names)), world_(world), rank_(rank),
        residency_(residency), layout_(numels(parameters_), world) {
    for (const auto& p : parameters_) shapes_.push_back(p.sizes().vec());
    if (parameters_.empty()) accel::detail::fail("FlatParameter: no parameters to flatten");
    if (rank < 0 || rank >= world)
      accel::detail::fail("FlatParameter: rank {} is outside 0..{}", rank, world - 1);
    const torch::Tensor& first = parameters_.front();
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (parameters_[i].scalar_type() != first.scalar_type() ||
          parameters_[i].device() != first.device())
        accel::detail::fail("FlatParameter: parameter '{}' is {} on {}, the first is {} on {}; "
                            "one flat parameter holds one dtype on one device",
                            names_[i], c10::toString(parameters_[i].scalar_type()),
                            parameters_[i].device().str(), c10::toString(first.scalar_type()),
                            first.device().str());
    torch::NoGradGuard no_grad;
    if (first.is_meta()) {
      start_at_rest(device_if_meta);
      return;
    }
    // Padding is zero and stays zero: no parameter covers it, so no optimizer touches it.
    flat_ = torch::zeros({layout_.padded_numel}, first.options().requires_grad(false));
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      torch::Tensor slot = view_of(flat_, i);
      slot.copy_(parameters_[i].detach());
      parameters_[i].set_data(slot);
    }
    gradient_options_ = flat_.options();
    shard_ = flat_.narrow(0, rank_ * layout_.shard_numel, layout_.shard_numel);
    if (residency_ == Residency::sharded) shard_ = shard_.clone();
    cut_pieces();
  }
  FlatParameter(const FlatParameter&) = delete;
  FlatParameter& operator=(const FlatParameter&) = delete;

  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  const std::vector<std::string>& names() const { return names_; }
  // Parameter i's shape as flattened (at rest the parameter itself has no elements).
  const std::vector<std::int64_t>& shape(std::size_t i) const { return shapes_[i]; }
  const FlatLayout& layout() const { return layout_; }
  int world_size() const { return world_; }
  int rank() const { return rank_; }

  Residency residency() const { return residency_; }

  // The whole padded buffer: what every rank holds of the parameters (while materialized).
  torch::Tensor& flat() { return flat_; }
  // This rank's contiguous shard (replicated: a view of the buffer; sharded: its own tensor).
  const torch::Tensor& shard() const { return shard_; }

  // Sharded residency only (Options::offload.parameters): this rank's shard and its gradient
  // move to the CPU (pinned memory when the buffer is on CUDA), and the pieces with them; the
  // full buffer stays on the device. The strategy copies the shard to the device to all-gather
  // it (shard_on_device()) and adds reduce-scattered gradients into the CPU shard gradient.
  void keep_shard_on_host() {
    if (residency_ != Residency::sharded)
      accel::detail::fail("FlatParameter: only a sharded flat parameter keeps its shard on the host");
    torch::NoGradGuard no_grad;
    const auto host = flat_.options().device(torch::kCPU).pinned_memory(flat_.is_cuda());
    torch::Tensor shard = torch::empty({layout_.shard_numel}, host);
    shard.copy_(shard_);
    shard_ = shard;
    gradient_options_ = host;
    shard_gradient_ = torch::Tensor();  // allocated on the host when first needed
    cut_pieces();
  }
  // The shard where the full buffer is, for all-gathering into it: the shard itself, or a copy
  // when it is kept on the host.
  torch::Tensor shard_on_device() const {
    return shard_.device() == flat_.device() ? shard_ : shard_.to(flat_.device());
  }

  // Sharded residency only. Whether the full buffer has storage.
  bool materialized() const { return flat_.storage().nbytes() != 0; }
  // Gives the full buffer storage again (contents undefined until the strategy all-gathers into
  // it) and the parameters their shapes, as views of it.
  void materialize() {
    detail::resize_storage_bytes(flat_, layout_.padded_numel * flat_.element_size());
    if (!at_rest_) return;
    for (std::size_t i = 0; i < parameters_.size(); ++i) parameters_[i].set_data(view_of(flat_, i));
    at_rest_ = false;
  }
  // Releases the full buffer's storage; the parameters keep their shapes (views of no memory)
  // for the autograd graph that saved them, until materialize() refills it.
  void free_full() { detail::resize_storage_bytes(flat_, 0); }
  // Between steps: no storage, and the parameters zero-element tensors.
  void to_rest() {
    free_full();
    if (at_rest_) return;
    for (auto& p : parameters_) p.set_data(torch::empty({0}, flat_.options()));
    at_rest_ = true;
  }
  const std::vector<Piece>& pieces() const { return pieces_; }
  // An empty build's value of parameter i (whole, any device): this rank's part of it into the
  // shard.
  void fill_piece(std::size_t i, const torch::Tensor& value) {
    const Piece* piece = piece_of(i);
    if (piece == nullptr) return;
    torch::NoGradGuard no_grad;
    const torch::Tensor source = value.reshape({-1}).narrow(0, piece->begin, piece->data.numel());
    torch::Tensor target = piece->data;
    target.copy_(source);
  }
  // Parameter i's piece, or null when none of it lies in this rank's shard.
  const Piece* piece_of(std::size_t i) const {
    for (const auto& piece : pieces_)
      if (piece.parameter == i) return &piece;
    return nullptr;
  }

  // The averaged gradient of this rank's shard (what the pieces' .grad alias), allocated as zeros
  // (and given to the pieces as their .grad) if it was not yet.
  torch::Tensor& shard_gradient() {
    if (!shard_gradient_.defined()) allocate_shard_gradient();
    return shard_gradient_;
  }
  // Whether it is allocated; the tensor, undefined while not (for counting memory).
  bool has_shard_gradient() const { return shard_gradient_.defined(); }
  const torch::Tensor& allocated_shard_gradient() const { return shard_gradient_; }

  // Gives every parameter a .grad that is a view into the full flat gradient buffer, allocating
  // the buffer (zeros) if it was released. A .grad the user replaced is copied in first, so it
  // still counts, and becomes a view again.
  void attach_gradients() {
    for (std::size_t i = 0; i < parameters_.size(); ++i) attach_gradient(i);
  }
  // The same for parameter i alone: after autograd gave it a .grad of its own (Zero2 allocates a
  // bucket's buffer when its first gradient arrives), that gradient is copied into its slot. A
  // flat parameter of one parameter without padding adopts that .grad as its buffer instead: no
  // second copy of the gradient, and no copying.
  void attach_gradient(std::size_t i) {
    torch::NoGradGuard no_grad;
    torch::Tensor& p = parameters_[i];
    const torch::Tensor& grad = p.grad();
    if (!gradient_.defined() && parameters_.size() == 1 && layout_.padded_numel == layout_.numel &&
        grad.defined() && grad.is_contiguous() && grad.scalar_type() == flat_.scalar_type() &&
        grad.device() == flat_.device()) {
      gradient_ = grad.view({layout_.padded_numel});
      return;
    }
    if (!gradient_.defined()) gradient_ = full_gradient_buffer();
    if (is_gradient_view(i)) return;
    torch::Tensor slot = view_of(gradient_, i);
    if (grad.defined()) slot.copy_(grad);
    p.mutable_grad() = slot;
  }
  // An uninitialized buffer of the full padded size in `dtype`, from where a step's buffers of
  // this flat parameter come (full_gradient_buffer() says why): the unit-buffer cache for a
  // sharded one on CPU, else the allocator. Also the narrowed copies of
  // Options::sharded_communication.
  torch::Tensor full_size_buffer(torch::Dtype dtype) const {
    const auto options = flat_.options().dtype(dtype);
    if (residency_ == Residency::sharded && flat_.device().is_cpu())
      return detail::cached_cpu_buffer(layout_.padded_numel, options);
    return torch::empty({layout_.padded_numel}, options);
  }
  // The full flat gradient buffer; undefined while released.
  const torch::Tensor& gradient() const { return gradient_; }
  // Drops the full gradient: every .grad becomes undefined and the buffer is freed (unless the
  // user still holds a reference to a .grad).
  void release_gradients() {
    for (auto& p : parameters_) p.mutable_grad() = torch::Tensor();
    gradient_ = torch::Tensor();
  }

  // Parameter i's slot in a buffer of this layout, shaped like the parameter (as it was
  // flattened: at rest it has no elements).
  torch::Tensor view_of(const torch::Tensor& buffer, std::size_t i) const {
    return buffer.narrow(0, layout_.offsets[i], c10::multiply_integers(shapes_[i])).view(shapes_[i]);
  }

 private:
  static std::vector<std::int64_t> numels(const std::vector<torch::Tensor>& params) {
    std::vector<std::int64_t> result;
    for (const auto& p : params) result.push_back(p.numel());
    return result;
  }

  // The full gradient, zeros. Sharded on CPU: from the flat buffer cache, like the full buffer,
  // since it comes and goes at every unit. Replicated (Zero2's buckets, freed once a step) from
  // the heap, which lends that memory to the next forward's activations (a cache would keep it
  // for gradients only, and raise Zero2's peak). On CUDA the caching allocator keeps
  // it either way.
  torch::Tensor full_gradient_buffer() const {
    return full_size_buffer(flat_.scalar_type()).zero_();
  }

  // Zeros, aliased by the pieces' .grad (the same piece tensors: an optimizer built over them
  // sees the gradients appear).
  void allocate_shard_gradient() {
    torch::NoGradGuard no_grad;
    shard_gradient_ = torch::zeros({layout_.shard_numel}, gradient_options_);
    const std::int64_t shard_begin = rank_ * layout_.shard_numel;
    for (auto& piece : pieces_)
      piece.data.mutable_grad() = shard_gradient_.narrow(
          0, layout_.offsets[piece.parameter] + piece.begin - shard_begin, piece.data.numel());
  }

  // This rank's shard cut along parameter boundaries: each piece a leaf aliasing the shard
  // (detach(): a leaf the optimizer accepts, still sharing its storage), its .grad aliasing the
  // shard gradient once that is allocated.
  void cut_pieces() {
    pieces_.clear();
    const std::int64_t shard_begin = rank_ * layout_.shard_numel;
    const std::int64_t shard_end = shard_begin + layout_.shard_numel;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      const std::int64_t begin = std::max(shard_begin, layout_.offsets[i]);
      const std::int64_t end = std::min(shard_end, layout_.offsets[i] + c10::multiply_integers(shapes_[i]));
      if (begin >= end) continue;
      torch::Tensor data = shard_.narrow(0, begin - shard_begin, end - begin).detach();
      if (shard_gradient_.defined())
        data.mutable_grad() = shard_gradient_.narrow(0, begin - shard_begin, end - begin);
      pieces_.push_back({i, begin - layout_.offsets[i], std::move(data)});
    }
  }

  // The empty build's start: the shard (zeros until fill_piece), the full buffer shaped but with
  // no storage, the parameters views of it on `device` (adopted in place: the module and the
  // optimizer keep the same tensors).
  void start_at_rest(torch::Device device) {
    if (residency_ != Residency::sharded)
      accel::detail::fail("FlatParameter: parameters of an empty build (accel::deferred_init) "
                          "make only sharded flat parameters (Zero3, Fsdp<FullShard>)");
    const auto options = parameters_.front().options().device(device).requires_grad(false);
    flat_ = torch::empty({0}, options);
    flat_.unsafeGetTensorImpl()->set_sizes_contiguous({layout_.padded_numel});
    // Views of the storage-less buffer, shapes intact (as after free_full()): the strategy
    // hooks each parameter's gradient accumulator next, whose metadata (the shape gradients
    // must have) is taken now; it then puts them to rest.
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      torch::Tensor hollow = torch::empty({0}, options);  // a view's bounds check needs storage
      hollow.unsafeGetTensorImpl()->set_sizes_contiguous(shapes_[i]);
      accel::detail::adopt_value(parameters_[i], hollow);
    }
    gradient_options_ = options;
    shard_ = torch::zeros({layout_.shard_numel}, options);
    cut_pieces();
  }

  bool is_gradient_view(std::size_t i) const {
    const torch::Tensor& grad = parameters_[i].grad();
    return gradient_.defined() && grad.defined() &&
           grad.data_ptr() == static_cast<const char*>(gradient_.data_ptr()) +
                                  layout_.offsets[i] * gradient_.element_size();
  }

  std::vector<torch::Tensor> parameters_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<std::string> names_;
  int world_;
  int rank_;
  Residency residency_;
  FlatLayout layout_;
  torch::Tensor flat_;
  torch::Tensor shard_;
  bool at_rest_ = false;
  torch::Tensor gradient_;  // full, padded; defined while a window collects gradients
  torch::Tensor shard_gradient_;  // undefined until first needed
  torch::TensorOptions gradient_options_;  // the shard gradient's (on the host: offload)
  std::vector<Piece> pieces_;
};

}  // namespace accel::parallel
