// Run tracking and progress: init_trackers / log / end_training on the Accelerator
// (tracking/accelerator_tracking.hpp, reached through accelerator_class.hpp), the run folder's files
// (tracking/tracker.hpp) and accel::Progress (tracking/progress.hpp). docs/tracking.md.
#pragma once

#include "tracking/accelerator_tracking.hpp"
#include "tracking/progress.hpp"
#include "tracking/tracker.hpp"
