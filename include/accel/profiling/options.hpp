// ProfileOptions, ProfileSchedule and TimelineOptions live in options/profiling.hpp, beside the
// Options that hold them; this path stays for programs that include it.
#pragma once

#include "../options/profiling.hpp"
