# Finds accel's dependencies and links them into a target. Shared by the build tree and by the
# installed accel-config.cmake, so that both consumers see exactly the same interface.
include(CMakeFindDependencyMacro)
include(GNUInstallDirs)

macro(accel_find_dependencies)
  find_dependency(Torch)
  find_dependency(fmt)
  # Boost.PFR ships with Boost 1.75 and later (Debian 12: libboost1.81-dev).
  find_dependency(Boost 1.75 CONFIG)
  # nlohmann/json (header-only; Debian: nlohmann-json3-dev): safetensors headers, the weights'
  # index file, checkpoint manifests, and the escaping of every string in the run files and
  # traces (detail/json.hpp).
  find_dependency(nlohmann_json 3)
  # xxHash, used header-only (XXH_INLINE_ALL, state/checksum.hpp): only its header is needed,
  # and nothing is linked. Debian: libxxhash-dev.
  find_path(ACCEL_XXHASH_INCLUDE_DIR xxhash.h)
  if(NOT ACCEL_XXHASH_INCLUDE_DIR)
    message(FATAL_ERROR "accel: xxhash.h not found; install libxxhash-dev (Debian) or set "
                        "ACCEL_XXHASH_INCLUDE_DIR to the folder that holds it")
  endif()
  # c10d's ProcessGroupGloo.hpp includes Gloo's headers: Debian ships them in libgloo-dev,
  # the libtorch zip and the Python wheel in torch's own include folder.
  find_path(ACCEL_GLOO_INCLUDE_DIR gloo/config.h HINTS "${TORCH_INSTALL_PREFIX}/include")
  # accel also calls Gloo itself (runtime/direct_gloo.hpp). Debian's libtorch links a shared
  # libgloo, which the linker wants named; the zip and the wheel build Gloo into libtorch_cpu
  # and ship no libgloo, so nothing is found or needed there.
  find_library(ACCEL_GLOO_LIBRARY gloo HINTS "${TORCH_INSTALL_PREFIX}/lib")
  # A CUDA libtorch has c10d's NCCL group built in (runtime/nccl.hpp); its header includes
  # nccl.h, which is in the CUDA toolkit or, for the Python wheel, in the nvidia-nccl package
  # (scripts/device-check.sh passes ACCEL_NCCL_INCLUDE_DIR).
  if(TARGET torch_cuda)
    find_path(ACCEL_NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ENV CUDA_HOME
      PATH_SUFFIXES include PATHS /usr/local/cuda)
    if(NOT ACCEL_NCCL_INCLUDE_DIR)
      message(WARNING "accel: a CUDA libtorch, but no nccl.h: multi-process training on CUDA "
                      "will stop at start; set ACCEL_NCCL_INCLUDE_DIR to the folder with nccl.h")
    endif()
  endif()
endmacro()

function(accel_link_dependencies target)
  # fmt first: a libtorch that bundles its own fmt headers must not shadow the one we link.
  if(ACCEL_FMT_HEADER_ONLY)
    set(accel_fmt fmt::fmt-header-only)
  else()
    set(accel_fmt fmt::fmt)
  endif()
  target_link_libraries(${target} INTERFACE ${accel_fmt} torch Boost::headers
                                             nlohmann_json::nlohmann_json)
  # Absolute paths found on this machine stay out of the exported target: accel-config.cmake
  # finds Gloo again on the consumer's machine.
  if(ACCEL_GLOO_INCLUDE_DIR)
    target_include_directories(${target} SYSTEM INTERFACE
      "$<BUILD_INTERFACE:${ACCEL_GLOO_INCLUDE_DIR}>")
    target_compile_definitions(${target} INTERFACE "$<BUILD_INTERFACE:ACCEL_HAS_GLOO=1>")
  endif()
  if(ACCEL_GLOO_LIBRARY)
    target_link_libraries(${target} INTERFACE "$<BUILD_INTERFACE:${ACCEL_GLOO_LIBRARY}>")
  endif()
  # USE_C10D_NCCL is what c10d's own headers test; defined here too, as libtorch's CMake target
  # may not pass it on to its users.
  if(TARGET torch_cuda AND ACCEL_NCCL_INCLUDE_DIR)
    target_include_directories(${target} SYSTEM INTERFACE
      "$<BUILD_INTERFACE:${ACCEL_NCCL_INCLUDE_DIR}>")
    target_compile_definitions(${target} INTERFACE USE_C10D_NCCL)
  endif()
  # xxhash.h: a SYSTEM include unless it is in the compiler's own search path (/usr/include),
  # which must never be passed again (it would break #include_next in the C++ headers).
  if(NOT ACCEL_XXHASH_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    target_include_directories(${target} SYSTEM INTERFACE
      "$<BUILD_INTERFACE:${ACCEL_XXHASH_INCLUDE_DIR}>")
  endif()
endfunction()

accel_find_dependencies()
