/// @file
/// Run tracking and progress: init_trackers / log / end_training on the Accelerator
/// (tracking/accelerator_tracking.hpp, reached through accelerator_class.hpp), the run folder and
/// accel's writers into it (tracking/tracker.hpp, run_folder.hpp, jsonl_writer.hpp,
/// csv_writer.hpp, tensorboard_writer.hpp) and accel::Progress (tracking/progress.hpp). docs/how-to/tracking.md.
#pragma once

#include "tracking/accelerator_tracking.hpp"
#include "tracking/csv_writer.hpp"
#include "tracking/jsonl_writer.hpp"
#include "tracking/progress.hpp"
#include "tracking/run_folder.hpp"
#include "tracking/tensorboard_writer.hpp"
#include "tracking/tracker.hpp"
