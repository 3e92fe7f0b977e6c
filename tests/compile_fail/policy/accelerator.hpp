// The compile-time half of accel::Accelerator without torch: Accelerator<Par, Prec, Acc> is built
// on policy::Checked<Par, Prec, Acc> (accelerator.hpp), with these defaults, so a case here
// compiles in a fraction of a second and prints exactly what the Accelerator prints.
// ../wrong_slots.cpp checks the real Accelerator end to end.
#pragma once

#include <accel/policy.hpp>

template <class Par = accel::Ddp, class Prec = accel::Fp32, class Acc = accel::GradAccum<1>>
using Accelerator = accel::policy::Checked<Par, Prec, Acc>;
