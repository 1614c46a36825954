# `cmake --install`: the public headers, libkiln.a, the `kiln` command, and the CMake package
# (kilnConfig.cmake, kilnConfigVersion.cmake, kilnTargets.cmake with the imported target
# kiln::kiln). Included from CMakeLists.txt after every target and option is known.
#
# libkiln.a links its dependencies PRIVATE, but a static library's private dependencies still
# have to be linked by whoever links it: the export lists them as $<LINK_ONLY:fmt::fmt>, ...,
# and kilnConfig.cmake finds each one again (find_dependency), with the options this build used.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

install(DIRECTORY include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln EXPORT kilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The installed `kiln` keeps the run path to libraries outside the system's (the CUDA Toolkit's).
set_target_properties(kiln_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})

# What kilnConfig.cmake.in substitutes: the features this build has (lower-case names, as
# kiln::features() and find_package COMPONENTS spell them), and the dependencies to find again.
set(KILN_PACKAGE_FEATURES "")
set(KILN_PACKAGE_FEATURE_TABLE "")
foreach(name IN LISTS KILN_FEATURE_NAMES)
  string(TOLOWER ${name} lower)
  if(KILN_${name})
    list(APPEND KILN_PACKAGE_FEATURES ${lower})
    set(has ON)
  else()
    set(has OFF)
  endif()
  string(APPEND KILN_PACKAGE_FEATURE_TABLE "set(kiln_HAS_${name} ${has})\n")
endforeach()
if(KILN_WITH_CUDA)
  list(APPEND KILN_PACKAGE_FEATURES cuda)
  string(APPEND KILN_PACKAGE_FEATURE_TABLE "set(kiln_HAS_CUDA ON)\n")
else()
  string(APPEND KILN_PACKAGE_FEATURE_TABLE "set(kiln_HAS_CUDA OFF)\n")
endif()
string(TOLOWER "${KILN_FEATURE_NAMES}" KILN_PACKAGE_FEATURE_NAMES)
list(APPEND KILN_PACKAGE_FEATURE_NAMES cuda)
set(KILN_PACKAGE_CUDA_MAJOR "")
if(KILN_WITH_CUDA)
  set(KILN_PACKAGE_CUDA_MAJOR ${CUDAToolkit_VERSION_MAJOR})
elseif(KILN_CUDA STREQUAL "OFF")
  set(KILN_PACKAGE_CUDA_WHY "-DKILN_CUDA=OFF")
else()
  set(KILN_PACKAGE_CUDA_WHY "${KILN_CUDA_WHY}")
endif()

configure_package_config_file(cmake/kilnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake
  INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR})
