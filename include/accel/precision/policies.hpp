// Every precision policy's behaviour: the one header the Accelerator includes for them.
#pragma once

#include "autocast.hpp"
#include "bf16.hpp"
#include "fp16.hpp"
#include "fp32.hpp"
#include "fp8.hpp"
#include "precision.hpp"
