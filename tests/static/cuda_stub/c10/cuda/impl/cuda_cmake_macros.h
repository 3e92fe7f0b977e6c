// Stand-in for the header a CUDA build of libtorch generates (Debian's CPU-only libtorch-dev
// ships c10/cuda's headers without it), for tests/static/nccl_wiring.cpp only: what the
// generated one says for a shared-library build.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
