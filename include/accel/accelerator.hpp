// Everything a training program uses: the Accelerator (core.hpp) with its policies, options,
// DataLoader and collectives; accel::launch (launch.hpp); parameter digests (state/digest.hpp);
// the library's version.
#pragma once

#include "core.hpp"
#include "launch.hpp"
#include "state/digest.hpp"
#include "version.hpp"
