# Install rules and the config package: find_package(accel) then links accel::accel.
include(CMakePackageConfigHelpers)

install(DIRECTORY include/accel DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS accel EXPORT accel-targets)
install(EXPORT accel-targets NAMESPACE accel:: DESTINATION ${CMAKE_INSTALL_DATADIR}/accel/cmake)

configure_package_config_file(cmake/accel-config.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/accel-config.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_DATADIR}/accel/cmake)
# Header-only, but tied to the C++ standard library: no ARCH_INDEPENDENT.
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/accel-config-version.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/accel-config.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/accel-config-version.cmake"
  cmake/accel-dependencies.cmake
  cmake/accel-variants.cmake
  cmake/accel-compiled.cmake
  DESTINATION ${CMAKE_INSTALL_DATADIR}/accel/cmake)
# accel::compiled's one source, compiled in the consumer's tree (accel-compiled.cmake).
install(FILES src/accel.cpp DESTINATION ${CMAKE_INSTALL_DATADIR}/accel/src)
