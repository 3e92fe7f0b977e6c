// accel: the library version. CMake reads the three numbers below; keep the format.
#pragma once

#define ACCEL_VERSION_MAJOR 0
#define ACCEL_VERSION_MINOR 1
#define ACCEL_VERSION_PATCH 0

#define ACCEL_VERSION (ACCEL_VERSION_MAJOR * 10000 + ACCEL_VERSION_MINOR * 100 + ACCEL_VERSION_PATCH)
