/// @file
/// Checkpoints (docs/how-to/resume.md): Accelerator::save_state, load_state, save_model and
/// load_model, with the Accelerator itself. Kept out of <accel/accelerator.hpp>: the safetensors
/// and JSON code costs seconds of compile time in every TU that parses it.
#pragma once

#include "accelerator_class.hpp"
#include "state/automatic_checkpoints_io.hpp"
#include "state/checkpoint_io.hpp"
