// The object that builds accel_library_pch, the precompiled header of torch,
// <accel/accelerator.hpp>, doctest, PFR and fmt that every test TU with torch reuses: the test
// binaries, the distributed workers and the compile-fail cases (tests/CMakeLists.txt).
