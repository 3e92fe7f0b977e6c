// The object that builds the torch compile-fail cases' precompiled header (tests/CMakeLists.txt).
