// Category tags: every policy names one as `category`, so the concepts (and the error messages)
// can tell "not a policy" from "a policy in the wrong slot".
#pragma once

namespace accel::policy {

struct parallelism_tag {};
struct sharding_tag {};
struct precision_tag {};
struct accumulation_tag {};
struct compression_tag {};
// TensorParallel<N>: the second dimension of Parallel<P, TensorParallel<N>>, no slot of its own.
struct tensor_parallel_tag {};

}  // namespace accel::policy
