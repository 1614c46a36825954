# The layer rule of docs/architecture.md, enforced by the build.
#
# Each folder of src/ is one OBJECT library, kiln_<folder>. Its sources see, through their
# include path, only their own folder and the folders of the layers below it: each layer's
# folder is reachable as "<folder>/..." from a directory of its own under the build tree
# (layers/<folder>/<folder> -> src/<folder>), and a layer's include path lists the directories of
# the layers it may use. An include that runs back up ("cpu/kernels.hpp" from src/ir/) is then
# "No such file or directory" at build time, not a picture in a document.
#
# The public headers (include/kiln/) are visible to every layer: they hold the types every layer
# shares (errors, dtypes, shapes, devices, configuration).
#
# kiln_layer(NAME <folder> USES <lower folders...> [LIBRARIES <external targets...>])
#   USES lists every folder the layer may include, transitively (kept explicit, so that the
#   table below reads as the rule).

set(KILN_LAYER_DIR ${CMAKE_BINARY_DIR}/layers)

function(kiln_layer)
  cmake_parse_arguments(L "" "NAME" "USES;LIBRARIES" ${ARGN})
  set(dir ${KILN_LAYER_DIR}/${L_NAME})
  file(MAKE_DIRECTORY ${dir})
  if(NOT EXISTS ${dir}/${L_NAME})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/src/${L_NAME} ${dir}/${L_NAME} SYMBOLIC)
  endif()
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/${L_NAME}/*.cpp)
  set(target kiln_${L_NAME})
  add_library(${target} OBJECT ${sources})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_compile_options(${target} PRIVATE ${kiln_warnings})
  target_compile_definitions(${target} PRIVATE ${kiln_feature_definitions})
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include ${dir})
  foreach(use IN LISTS L_USES)
    target_include_directories(${target} PRIVATE ${KILN_LAYER_DIR}/${use})
    if(TARGET kiln_${use})
      target_link_libraries(${target} PRIVATE kiln_${use})
    endif()
  endforeach()
  target_link_libraries(${target} PRIVATE fmt::fmt ${L_LIBRARIES})
  target_sources(kiln PRIVATE $<TARGET_OBJECTS:${target}>)
  set_property(GLOBAL APPEND PROPERTY KILN_LAYER_TARGETS ${target})
endfunction()

# A folder that the build leaves out (a feature built out) still gets its directory, so that a
# layer above may name it in USES; nothing there is compiled.
function(kiln_absent_layer name)
  file(MAKE_DIRECTORY ${KILN_LAYER_DIR}/${name})
  if(NOT EXISTS ${KILN_LAYER_DIR}/${name}/${name})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR}/src/${name} ${KILN_LAYER_DIR}/${name}/${name}
         SYMBOLIC)
  endif()
endfunction()
