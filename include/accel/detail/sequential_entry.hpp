// The call entry (AnyModule) a torch::nn::Sequential calls one of its children through. accel
// reroutes a child's calls by replacing that entry (activation checkpointing, Fp8's Linear
// layers, Zero3's units), which leaves the registered child, its names and its state as they
// were. The entry is found by position, since a Sequential registers its children in the order
// of its entries: an entry rerouted once already no longer points at the child itself.
#pragma once

#include <torch/torch.h>

#include <cstddef>

namespace accel::detail {

// The entry that calls `child`, or the Sequential's end() if `child` is not one of its children.
inline torch::nn::SequentialImpl::Iterator sequential_entry(torch::nn::SequentialImpl& parent,
                                                            const torch::nn::Module& child) {
  const auto children = parent.children();
  for (std::size_t i = 0; i < children.size() && i < parent.size(); ++i)
    if (children[i].get() == &child) return parent.begin() + static_cast<std::ptrdiff_t>(i);
  return parent.end();
}

}  // namespace accel::detail
