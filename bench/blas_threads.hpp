// OpenBLAS (Debian's libtorch computes matrix products with it) keeps a thread pool of its own,
// as large as the machine, which torch::set_num_threads does not limit, and its threads spin
// while they wait: "one thread per rank", or loader workers beside the loop, need
// openblas_set_num_threads too. Found at run time, so another BLAS just skips this.
#pragma once

#include <dlfcn.h>

#include <cstring>

inline void limit_blas_threads(int threads) {
  void* symbol = dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  if (symbol == nullptr) return;
  void (*set_threads)(int) = nullptr;
  std::memcpy(&set_threads, &symbol, sizeof symbol);
  set_threads(threads);
}
