// Every policy and the composition rules, without torch: cheap to include in static checks.
#pragma once

#include "policy/accumulation.hpp"
#include "policy/concepts.hpp"
#include "policy/parallelism.hpp"
#include "policy/precision.hpp"
#include "policy/rules.hpp"
#include "policy/tensor_parallel.hpp"
