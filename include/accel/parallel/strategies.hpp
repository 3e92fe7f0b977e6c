// Every parallel::Strategy specialization accel defines, one file per policy.
#pragma once

#include "ddp.hpp"
#include "fsdp.hpp"
#include "tensor_parallel.hpp"
#include "zero2.hpp"
#include "zero3.hpp"
