// The object that builds accel_library_pch, the precompiled header of torch and
// <accel/accelerator.hpp> that the compile-fail cases and the distributed workers reuse
// (tests/CMakeLists.txt).
