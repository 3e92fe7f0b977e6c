// Everything a training program uses: the Accelerator (core.hpp) with its policies, options,
// DataLoader and collectives; memory tools (memory/: checkpoint, Checkpointed, estimate_memory,
// find_executable_batch_size); checkpoints (state/checkpoint.hpp: save_state, load_state,
// save_model, load_model); accel::launch (launch.hpp); parameter digests (state/digest.hpp);
// run tracking and progress (tracking.hpp); several aliases in one program (variants.hpp); the
// library's version.
#pragma once

#include "core.hpp"
#include "launch.hpp"
#include "memory/checkpoint.hpp"
#include "memory/checkpoint_children.hpp"
#include "memory/checkpointed.hpp"
#include "memory/estimate_memory.hpp"
#include "memory/executable_batch_size.hpp"
#include "state/checkpoint.hpp"
#include "state/digest.hpp"
#include "tracking.hpp"
#include "variants.hpp"
#include "version.hpp"
