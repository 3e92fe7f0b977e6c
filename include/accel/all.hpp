// Everything accel offers: <accel/accelerator.hpp> with checkpoints and memory tools.
#pragma once

#include "accelerator.hpp"
#include "checkpoints.hpp"
#include "memory.hpp"
