// Checkpoint component: the prepared models' parameters (each rank its slices, as the strategy's
// checkpoint-slice role says: parallel/contract.hpp) and buffers (rank 0), with every
// parameter's and buffer's name, full shape and dtype in the manifest. A load checks names,
// shapes and dtypes against the live models, then reads the slices this rank holds now, at
// whatever world size, mesh and strategy saved them (../slice_catalog.hpp, placed_slices.hpp). The protocol:
// component.hpp.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../../detail/error.hpp"
#include "../../detail/shape_text.hpp"
#include "../manifest.hpp"
#include "../slice_catalog.hpp"
#include "../weights.hpp"
#include "component.hpp"
#include "placed_slices.hpp"

namespace accel::state::components {

struct ModelSlices {
  // Save: this rank's slices of the parameters; on rank 0 the buffers, whole.
  template <class View>
  static void add_tensors(const View& view, int rank, NamedTensors& named) {
    for (std::size_t m = 0; m < view.models.size(); ++m) {
      const auto& model = *view.models[m];
      for (const auto& item : model.named_parameters())
        if (const auto slice = view.strategy.saved_slice(item.value(), rank))
          add_placed(named, model_tensor_name(m, item.key()), slice->begin, slice->data,
                     slice->placement);
      if (rank == 0)
        for (const auto& item : model.named_buffers())
          named.emplace_back(slice_name(model_tensor_name(m, item.key()), 0),
                             detail::cpu_copy(item.value().reshape({-1})));
    }
  }

  template <class View>
  static void describe(const View& view, Manifest& manifest) {
    for (const auto& model : view.models) {
      ModelRecord& record = manifest.models.emplace_back();
      for (const auto& item : model->named_parameters()) {
        TensorRecord& parameter = record.parameters.emplace_back(
            TensorRecord{item.key(), view.strategy.parameter_shape(item.value()),
                         c10::toString(item.value().scalar_type())});
        // Under tensor parallelism (parallel/tensor_parallel.hpp): the dimension it is split on.
        if constexpr (requires { view.strategy.tensor_parallel_split(item.value()); })
          if (const auto* split = view.strategy.tensor_parallel_split(item.value()))
            parameter.tensor_parallel_dim = split->dim;
      }
      for (const auto& item : model->named_buffers())
        record.buffers.push_back({item.key(), item.value().sizes().vec(),
                                  c10::toString(item.value().scalar_type())});
    }
  }

  template <class View>
  static void check(const View&, const Manifest&, const std::string&) {}

  // Load: the same models, names, shapes and dtypes; this rank's slices and the buffers.
  template <class View>
  static void stage(const Staging<View>& s) {
    const View& view = s.view;
    const std::string& where = s.where;
    auto& apply = s.apply;
    auto& strategy = view.strategy;
    const auto& models = s.manifest.models;
    if (models.size() != view.models.size())
      accel::detail::fail("load_state: '{}' holds {} models, {} are prepared; prepare the same "
                          "models, in the same order, before load_state()",
                          where, models.size(), view.models.size());
    for (std::size_t m = 0; m < view.models.size(); ++m) {
      auto& model = *view.models[m];
      std::vector<std::string> expected, saved;
      std::map<std::string, const TensorRecord*> described;
      for (const auto* list : {&models[m].parameters, &models[m].buffers})
        for (const TensorRecord& entry : *list) {
          saved.push_back(entry.name);
          described[entry.name] = &entry;
        }
      for (const auto& item : model.named_parameters()) expected.push_back(item.key());
      for (const auto& item : model.named_buffers()) expected.push_back(item.key());
      const NameCheck check = compare_names(expected, saved);
      if (!check.missing.empty() || !check.unexpected.empty())
        accel::detail::fail("load_state: model #{} in '{}' does not match prepared model #{}: {}",
                            m, where, m, check.describe());
      auto check_shape = [&](const std::string& name, const std::vector<std::int64_t>& shape,
                             c10::ScalarType dtype) {
        const TensorRecord& entry = *described.at(name);
        if (entry.shape != shape || entry.dtype != c10::toString(dtype))
          accel::detail::fail("load_state: '{}' of model #{} was saved as {} [{}], the live one is "
                              "{} [{}] ({})",
                              name, m, entry.dtype, accel::detail::shape_text(entry.shape),
                              c10::toString(dtype), accel::detail::shape_text(shape), where);
      };
      for (const auto& item : model.named_parameters()) {
        const torch::Tensor& p = item.value();
        check_shape(item.key(), strategy.parameter_shape(p), p.scalar_type());
        const auto slice = strategy.loaded_slice(p);
        if (!slice) continue;
        torch::Tensor value =
            read_placed(s.catalog, model_tensor_name(m, item.key()), slice->begin,
                        slice->data.numel(), slice->placement, p.scalar_type());
        apply.push_back([data = slice->data, value] { data.copy_(value); });
      }
      for (const auto& item : model.named_buffers()) {
        const torch::Tensor& b = item.value();
        check_shape(item.key(), b.sizes().vec(), b.scalar_type());
        torch::Tensor value = s.catalog.read(model_tensor_name(m, item.key()), 0, b.numel(),
                                             b.scalar_type())
                                  .view(b.sizes());
        apply.push_back([b, value] { b.copy_(value); });
      }
    }
  }
};

}  // namespace accel::state::components
