// The object that builds accel_library_pch, the precompiled header of torch,
// <accel/accelerator.hpp>, PFR and fmt that every test TU with torch reuses: the test binaries,
// the distributed workers and the compile-fail cases (tests/CMakeLists.txt), and in the test
// build the examples and benchmarks (the top-level CMakeLists.txt).
