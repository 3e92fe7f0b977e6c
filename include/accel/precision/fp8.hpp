// Fp8, TransformerEngine's HYBRID recipe with delayed scaling: the Linear layers of a prepared
// model whose two dimensions are multiples of 16 compute in fp8 (fp8_linear.hpp: e4m3 forward,
// e5m2 gradients, a scale per tensor from its amax history); everything else runs under bf16
// autocast, as TransformerEngine's layers run inside bf16 autocast, and model outputs come back
// in fp32. No loss scaling: e5m2 has fp16's range, and each gradient tensor its own scale.
//
// Which Linear layers, at prepare(): a torch::nn::Linear child of a torch::nn::Sequential (the
// Sequential's call entry is rerouted; the registered module, its names and its state stay as
// they are), and an accel::Fp8Linear, accel::ColumnParallelLinear or accel::RowParallelLinear
// anywhere (the split layers by the whole layer's dimensions, before prepare() splits them, so
// that one process and every tensor-parallel degree choose alike: tensor_parallel_linear.hpp). A torch::nn::Linear its parent's forward calls
// itself cannot be rerouted (libtorch modules have no forward hooks): it stays in bf16. Those,
// and the layers whose dimensions do not fit, are listed once on the main process.
//
// After the optimizer step of each window (once, whatever the number of optimizers) every fp8
// tensor's amax of the window becomes the largest across ranks (one all-reduce for all, over
// every rank: the data-parallel ranks' batches, and under tensor parallelism the slices and the
// sequence parts of a split layer's tensors), then its scale is updated: every rank quantizes
// alike, as one process on the global batch does.
//
// The products run on fp8 tensor cores through at::_scaled_mm on CUDA where the GPU and libtorch
// have them (fp8_linear.hpp); elsewhere they are emulated: the values rounded to the fp8 formats
// (through libtorch's float8 dtypes from 2.1, by fp32 operations that give the same bits on
// 1.13) and multiplied in fp32. The mode is said at construction.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../detail/error.hpp"
#include "../detail/sequential_entry.hpp"
#include "../detail/small_tensor.hpp"
#include "../detail/torch_compat.hpp"
#include "../options.hpp"
#include "../parallel/tensor_parallel_linear.hpp"
#include "../policy/precision.hpp"
#include "../runtime/process_group.hpp"
#include "delayed_scaling.hpp"
#include "fp8_linear.hpp"
#include "precision.hpp"

namespace accel::precision {

// What a checkpoint saves of one fp8 layer, and of them all (in preparation order).
struct Fp8LayerState {
  std::string layer;  // its path in its model
  DelayedScalingState input, weight, grad_output;

  template <class Json>
  friend void to_json(Json& json, const Fp8LayerState& state) {
    json = Json{{"layer", state.layer},
                {"input", state.input},
                {"weight", state.weight},
                {"grad_output", state.grad_output}};
  }
  template <class Json>
  friend void from_json(const Json& json, Fp8LayerState& state) {
    state.layer = json.at("layer").template get<std::string>();
    state.input = json.at("input").template get<DelayedScalingState>();
    state.weight = json.at("weight").template get<DelayedScalingState>();
    state.grad_output = json.at("grad_output").template get<DelayedScalingState>();
  }
};
// In a checkpoint's manifest: {"fp8_layers": [per layer, each tensor's scale and amax history]}.
struct Fp8State {
  std::vector<Fp8LayerState> layers;

  template <class Json>
  friend void to_json(Json& json, const Fp8State& state) {
    json = Json::object();
    json["fp8_layers"] = state.layers;
  }
  template <class Json>
  friend void from_json(const Json& json, Fp8State& state) {
    state.layers = json.at("fp8_layers").template get<std::vector<Fp8LayerState>>();
  }
};

// The arithmetic in use on `device`, as construction reports it.
inline std::string fp8_mode(const torch::Device& device) {
  if (device.is_cuda() && accel::detail::has_scaled_mm)
    return "on fp8 tensor cores through at::_scaled_mm (a GPU of compute capability 8.9 or newer; "
           "emulated in fp32, with a warning, on one without)";
  return accel::detail::has_float8
             ? "emulated: values rounded through libtorch's float8 dtypes, multiplied in fp32"
             : fmt::format("emulated: values rounded to the fp8 formats by fp32 operations "
                           "(libtorch {} has no float8 dtype), multiplied in fp32",
                           TORCH_VERSION);
}

template <>
struct Precision<Fp8> {
  using state_type = Fp8State;

  void attach(runtime::ProcessGroup* group, const Options& options, const torch::Device& device) {
    check_fp8_options(options.fp8);
    group_ = group;
    options_ = options.fp8;
    if (is_main()) {
      fmt::print("accel: Fp8 on {}: Linear layers in e4m3/e5m2 with delayed scaling (amax over {} "
                 "steps, margin {}), {}; the rest in bf16\n",
                 device.str(), options_.amax_history_len, options_.margin, fp8_mode(device));
    }
  }

  // Reroutes the fitting Linear layers of `model` (above) and lists the others once.
  void prepare_model(const std::shared_ptr<torch::nn::Module>& model, const std::string& label) {
    const std::size_t first = layers_.size();
    std::vector<std::string> kept;
    convert(model, "", kept);
    ++models_;
    if (!is_main()) return;
    std::vector<std::string> names;
    for (std::size_t i = first; i < layers_.size(); ++i) names.push_back(layers_[i].name);
    fmt::print("accel: Fp8 on {}: {} Linear layer(s) in fp8{}{}\n", label, names.size(),
               names.empty() ? "" : fmt::format(" ({})", fmt::join(names, ", ")),
               kept.empty() ? "" : fmt::format("; in bf16: {}", fmt::join(kept, "; ")));
  }

  // No loss scaling (the delayed scales are per tensor, inside the fp8 layers): the loss and the
  // gradients as they are.
  void on_backward(WindowPosition position) {
    if (position.begins_window(last_micro_step_)) ++window_;
    last_micro_step_ = position.micro_step;
  }
  torch::Tensor scale_loss(const torch::Tensor& loss) const { return loss; }
  double loss_scale() const { return 1.0; }
  template <class Strategy>
  void unscale(Strategy& /*strategy*/, torch::optim::Optimizer& /*optimizer*/) {}

  // The scales move on after a window's first optimizer step; every step runs.
  template <class Strategy>
  bool may_step(Strategy& /*strategy*/, torch::optim::Optimizer& /*optimizer*/) {
    if (updated_window_ != window_) {
      updated_window_ = window_;
      update_scales();
    }
    return true;
  }
  bool step_was_skipped() const { return false; }

  // The layers computing in fp8, by path ("model2." before those of a second prepared model).
  std::vector<std::string> fp8_layers() const {
    std::vector<std::string> names;
    for (const auto& layer : layers_) names.push_back(layer.name);
    return names;
  }
  // One layer's scaling (for tests and logs).
  const Fp8LinearScaling& scaling(std::size_t layer) const { return *layers_.at(layer).scaling; }

  state_type state() const {
    state_type state;
    for (const auto& layer : layers_)
      state.layers.push_back({layer.name, layer.scaling->input.state(),
                              layer.scaling->weight.state(), layer.scaling->grad_output.state()});
    return state;
  }
  void load_state(const state_type& state) {
    check_state(state);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      Fp8LinearScaling& scaling = *layers_[i].scaling;
      scaling.input.load_state(state.layers[i].input);
      scaling.weight.load_state(state.layers[i].weight);
      scaling.grad_output.load_state(state.layers[i].grad_output);
    }
  }
  // Whether load_state(state) would take it (the same layers, histories of this length).
  void check_state(const state_type& state) const {
    std::vector<std::string> saved;
    for (const auto& layer : state.layers) saved.push_back(layer.layer);
    if (saved != fp8_layers())
      detail::fail("fp8 scaling state for the layers [{}], and this Accelerator's prepared models "
                   "have the fp8 layers [{}]; load it after preparing the model it was saved "
                   "with",
                   fmt::join(saved, ", "), fmt::join(fp8_layers(), ", "));
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const Fp8LinearScaling& scaling = *layers_[i].scaling;
      scaling.input.check(state.layers[i].input);
      scaling.weight.check(state.layers[i].weight);
      scaling.grad_output.check(state.layers[i].grad_output);
    }
  }

 private:
  struct Layer {
    std::string name;
    c10::intrusive_ptr<Fp8LinearScaling> scaling;
  };

  bool is_main() const { return group_ == nullptr || group_->rank() == 0; }

  c10::intrusive_ptr<Fp8LinearScaling> add_layer(const std::string& path) {
    auto scaling = c10::make_intrusive<Fp8LinearScaling>(options_);
    layers_.push_back({models_ == 0 ? path : fmt::format("model{}.{}", models_ + 1, path), scaling});
    return scaling;
  }

  // Why a Linear of these dimensions stays in bf16, or empty if it fits.
  static std::string misfit(const torch::nn::LinearImpl& linear, const std::string& path) {
    const std::int64_t out = linear.weight.size(0), in = linear.weight.size(1);
    if (in % 16 == 0 && out % 16 == 0) return {};
    return fmt::format("{} ({} in, {} out features; fp8 needs multiples of 16)", path, in, out);
  }

  void convert(const std::shared_ptr<torch::nn::Module>& module, const std::string& prefix,
               std::vector<std::string>& kept) {
    const auto sequential = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module);
    for (const auto& item : module->named_children()) {
      const std::string path = prefix.empty() ? item.key() : prefix + "." + item.key();
      const std::shared_ptr<torch::nn::Module>& child = item.value();
      if (convert_split(*child, path, kept)) continue;
      const auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(child);
      if (!linear) {
        convert(child, path, kept);
        continue;
      }
      if (const std::string why = misfit(*linear, path); !why.empty()) {
        kept.push_back(why);
      } else if (const auto declared = std::dynamic_pointer_cast<Fp8LinearImpl>(child)) {
        declared->attach_fp8(add_layer(path));
      } else if (sequential) {
        const auto entry = detail::sequential_entry(*sequential, *child);
        *entry = torch::nn::AnyModule(std::make_shared<Fp8LinearCallImpl>(linear, add_layer(path)));
      } else {
        kept.push_back(fmt::format("{} (called by its parent's forward, which accel cannot "
                                   "reroute; declare it accel::Fp8Linear to compute it in fp8)",
                                   path));
      }
    }
  }

  // A tensor-parallel layer (not split yet): in fp8 where the whole layer fits. False for any
  // other module.
  bool convert_split(torch::nn::Module& child, const std::string& path,
                     std::vector<std::string>& kept) {
    const auto attach = [&](auto& layer) {
      const std::int64_t in = layer.options.in_features(), out = layer.options.out_features();
      if (in % 16 == 0 && out % 16 == 0)
        layer.attach_fp8(add_layer(path));
      else
        kept.push_back(fmt::format("{} ({} in, {} out features; fp8 needs multiples of 16)", path,
                                   in, out));
      return true;
    };
    if (auto* column = dynamic_cast<ColumnParallelLinearImpl*>(&child)) return attach(*column);
    if (auto* row = dynamic_cast<RowParallelLinearImpl*>(&child)) return attach(*row);
    return false;
  }

  // Every fp8 tensor's amax of the window, the largest across ranks; then the scales.
  void update_scales() {
    std::vector<DelayedScaling*> tensors;
    for (auto& layer : layers_)
      for (DelayedScaling* t : {&layer.scaling->input, &layer.scaling->weight,
                                &layer.scaling->grad_output})
        tensors.push_back(t);
    if (tensors.empty()) return;
    if (group_ != nullptr) {
      std::vector<float> amaxes;
      for (const DelayedScaling* t : tensors) amaxes.push_back(t->step_amax());
      torch::Tensor amax = accel::detail::values_tensor(amaxes);
      group_->allreduce(amax, runtime::ReduceOp::max);
      const float* largest = amax.data_ptr<float>();
      for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i]->set_step_amax(largest[i]);
    }
    for (DelayedScaling* t : tensors) t->update();
  }

  runtime::ProcessGroup* group_ = nullptr;
  Fp8Options options_;
  std::vector<Layer> layers_;
  std::size_t models_ = 0;  // prepared so far
  std::uint64_t window_ = 0;
  std::uint64_t updated_window_ = 0;
  std::uint64_t last_micro_step_ = 0;
};

}  // namespace accel::precision
