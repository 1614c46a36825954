# `cmake --install`: the public headers, libkiln.a, the `kiln` command, the CMake package
# (kilnConfig.cmake, kilnConfigVersion.cmake, kilnTargets.cmake with the imported target
# kiln::kiln) and kiln.pc for pkg-config. Included from CMakeLists.txt after every target and
# option is known.
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

# kiln.pc, for builds without CMake: `g++ -std=c++20 app.cpp $(pkg-config --cflags --libs kiln)`.
# Its paths are relative to the file itself (${pcfiledir}), as `cmake --install --prefix P` may put
# it anywhere. A static libkiln.a leaves its dependencies to whoever links it, so they are on the
# public lines (Requires, Libs); a shared libkiln.so brings them itself, so they are private. A
# dependency that pkg-config knows is required by its module name; the others (NVRTC and the CUDA
# libraries, with a run path to the toolkit) are linked by the file this build linked. The BLAS is
# not linked at all: kiln loads it at run time (src/cpu/blas_library.hpp).
set(kiln_pc_requires "")
set(kiln_pc_libs "")
# kiln_pc_dependency(module target): `module` in Requires if pkg-config finds it, else the library
# file of the imported `target`.
function(kiln_pc_dependency module target)
  pkg_check_modules(kiln_pc_${module} QUIET ${module})
  if(kiln_pc_${module}_FOUND)
    list(APPEND kiln_pc_requires ${module})
  else()
    list(APPEND kiln_pc_libs "$<TARGET_LINKER_FILE:${target}>")
  endif()
  set(kiln_pc_requires "${kiln_pc_requires}" PARENT_SCOPE)
  set(kiln_pc_libs "${kiln_pc_libs}" PARENT_SCOPE)
endfunction()
kiln_pc_dependency(fmt fmt::fmt)
if(KILN_PERSISTENCE)
  kiln_pc_dependency(sqlite3 SQLite::SQLite3)
endif()
if(KILN_SIMD)
  kiln_pc_dependency(libhwy hwy::hwy)
endif()
if(KILN_THREADS)
  kiln_pc_dependency(tbb TBB::tbb)
endif()
if(KILN_WITH_CUDA)
  set(kiln_pc_cuda ${KILN_NVRTC_LIBRARY})
  foreach(lib IN ITEMS CUDA::cudart CUDA::cublasLt)
    get_target_property(location ${lib} IMPORTED_LOCATION)
    list(APPEND kiln_pc_cuda ${location})
  endforeach()
  foreach(location IN LISTS kiln_pc_cuda)
    get_filename_component(dir ${location} DIRECTORY)
    list(APPEND kiln_pc_libs "-Wl,-rpath,${dir}" ${location})
  endforeach()
endif()
foreach(lib IN LISTS CMAKE_DL_LIBS)
  list(APPEND kiln_pc_libs -l${lib})
endforeach()
list(REMOVE_DUPLICATES kiln_pc_libs)
list(JOIN kiln_pc_requires ", " KILN_PC_REQUIRES)
list(JOIN kiln_pc_libs " " kiln_pc_libs)
get_target_property(kiln_type kiln TYPE)
if(kiln_type STREQUAL "STATIC_LIBRARY")
  set(KILN_PC_PRIVATE "")
  set(KILN_PC_LIBS_PUBLIC "${kiln_pc_libs}")
  set(KILN_PC_LIBS_PRIVATE "")
else()
  set(KILN_PC_PRIVATE ".private")
  set(KILN_PC_LIBS_PUBLIC "")
  set(KILN_PC_LIBS_PRIVATE "${kiln_pc_libs}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(KILN_PC_PREFIX ".")  # absolute directories do not move with the prefix
  set(KILN_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(KILN_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH KILN_PC_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")  # "../.."
  string(REGEX REPLACE "/$" "" KILN_PC_PREFIX "${KILN_PC_PREFIX}")
  set(KILN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(KILN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
list(JOIN KILN_PACKAGE_FEATURES " " KILN_PC_FEATURES)
configure_file(cmake/kiln.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc.in @ONLY)
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc
     INPUT ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc.in)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
