// ACCEL_DECL, on the declaration and the definition of every function whose body lives in an
// impl/*.ipp file beside its header: accel is header-only unless ACCEL_SEPARATE_COMPILATION is
// defined.
//
// Header-only (the default), each such header includes its .ipp at its end and ACCEL_DECL is
// `inline`: include/ is all a program needs, and every translation unit compiles (and
// optimizes) the process group, its transports, the launcher and the file formats that it uses
// again. With ACCEL_SEPARATE_COMPILATION defined on every TU of a program, the headers declare
// those functions only and one TU compiles them all, once: src/accel.cpp, which includes
// <accel/impl/src.hpp>. One program takes one mode: a TU of each would define the same
// functions twice, inline and not (an ODR violation).
#pragma once

#if defined(ACCEL_SEPARATE_COMPILATION)
#define ACCEL_DECL
#else
#define ACCEL_DECL inline
#endif
