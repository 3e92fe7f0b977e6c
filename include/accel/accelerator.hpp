/// @file
/// What a training loop uses: the Accelerator (accelerator_class.hpp) with every policy's
/// behaviour (parallel/strategies.hpp, precision/policies.hpp), its options, DataLoader and
/// collectives; accel::Sharded units (parallel/sharded.hpp); accel::launch (launch.hpp); parameter
/// digests (state/digest.hpp); run tracking and progress (tracking.hpp); several aliases in one
/// program (variants.hpp); the library's version.
///
/// Two groups are headers of their own, since each costs every translation unit that parses it
/// seconds of compile time and a few hundred MB of compiler memory (docs/dev/build-time.md),
/// and most TUs of a program use neither:
///   <accel/checkpoints.hpp>  save_state, load_state, save_model, load_model (safetensors, JSON)
///   <accel/memory.hpp>       checkpoint, Checkpointed, checkpoint_sequential_children,
///                            estimate_memory, find_executable_batch_size
/// <accel/all.hpp> includes everything. Calling save_state() without <accel/checkpoints.hpp>
/// stops at compile time with an `accel:` message that names the header.
///
/// A translation unit that compiles one alias and counts its compile time can include less:
/// <accel/accelerator_class.hpp> (the class with Ddp and Fp32, the defaults) and the header of
/// each other policy it names, e.g. <accel/parallel/zero3.hpp> and <accel/precision/bf16.hpp>
/// (docs/getting-started.md, "Compile time"). A policy whose header is missing stops at compile
/// time with an `accel:` message that names it.
#pragma once

#include "accelerator_class.hpp"
#include "launch.hpp"
#include "parallel/strategies.hpp"
#include "parallel/sharded.hpp"
#include "precision/policies.hpp"
#include "schedules.hpp"
#include "state/digest.hpp"
#include "tracking.hpp"
#include "variants.hpp"
#include "version.hpp"

/// @namespace accel
/// The Accelerator, its policies and options, DataLoader, Sharded, launch and what they use.
/// @namespace accel::data
/// Datasets and batches: collating samples, the order of an epoch.
/// @namespace accel::logging
/// Leveled lines on the main process, and into the run's log.txt.
/// @namespace accel::parallel
/// The parallelism strategies; Sharded units.
/// @namespace accel::profiling
/// Spans, Chrome traces and the per-step timeline.
/// @namespace accel::schedule
/// Learning-rate schedules and their formulas.
/// @namespace accel::tracking
/// Runs: their folder, config, metrics and trackers; progress.
