// Compiles the test binaries' precompiled header (torch, doctest, PFR, fmt) once; every test
// binary and compile-fail case reuses it. test_main.cpp cannot: it must define
// DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN before doctest.h.
