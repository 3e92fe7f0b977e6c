// The pieces of the strategies' memory_layout answers (parallel/memory_layout.hpp): parameters
// grouped into flats by dtype, as the flat parameter set groups them.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../memory_layout.hpp"
#include "units.hpp"

namespace accel::parallel::detail {

// Trainable parameters of `named` not met before (`seen`), one FlatGroup per dtype, in `unit`;
// frozen ones add to the layout's frozen bytes.
inline void add_groups(const NamedParameters& named, int unit, std::unordered_set<const void*>& seen,
                       MemoryLayout& layout) {
  std::vector<std::pair<c10::ScalarType, std::size_t>> kinds;
  for (const auto& [name, p] : named) {
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    if (!p.requires_grad()) {
      layout.frozen_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
      continue;
    }
    auto kind = std::find_if(kinds.begin(), kinds.end(),
                             [&](const auto& k) { return k.first == p.scalar_type(); });
    if (kind == kinds.end()) {
      kinds.emplace_back(p.scalar_type(), layout.flats.size());
      layout.flats.push_back({0, static_cast<std::int64_t>(p.element_size()), unit});
      kind = kinds.end() - 1;
    }
    layout.flats[kind->second].numel += p.numel();
  }
}

// The whole model as one group per dtype, on `request`'s world: what a strategy that holds every
// parameter whole answers, and what a sharded one answers on one process.
inline MemoryLayout whole_layout(torch::nn::Module& model, const LayoutRequest& request) {
  MemoryLayout layout;
  layout.shard_world = request.world_size;
  layout.shard_rank = request.rank;
  NamedParameters all;
  for (const auto& item : model.named_parameters()) all.emplace_back(item.key(), item.value());
  std::unordered_set<const void*> seen;
  add_groups(all, 0, seen, layout);
  return layout;
}

}  // namespace accel::parallel::detail
