// Memory tools (docs/how-to/large-models.md): activation checkpointing (accel::checkpoint,
// accel::Checkpointed, memory::checkpoint_sequential_children and
// checkpoint_sequential_children_except_last for Options::activation_checkpointing),
// accel::estimate_memory, accel::find_executable_batch_size and this process's resident memory
// (memory::resident_bytes, peak_resident_bytes, reset_peak_resident). Kept out of
// <accel/accelerator.hpp>: libtorch's autograd::Function and the estimate's meta-device run cost
// seconds of compile time.
#pragma once

#include "memory/activation_checkpoint.hpp"
#include "memory/activation_checkpoint_children.hpp"
#include "memory/deferred_init.hpp"
#include "memory/checkpointed.hpp"
#include "memory/estimate_memory.hpp"
#include "memory/executable_batch_size.hpp"
#include "memory/resident_memory.hpp"
