# kiln's feature options: each on by default, each independent, each reported at configure time.
#
# kiln_feature(NAME DOC COST) declares option KILN_<NAME> (default ON) and records it for the
# summary; kiln_feature_summary() prints the table and warns for every performance feature
# that is off, unless KILN_QUIET_FEATURES is ON.

option(KILN_QUIET_FEATURES "Do not warn about performance features that are off" OFF)
set(KILN_FEATURE_NAMES "")

macro(kiln_feature name doc cost)
  option(KILN_${name} "${doc}" ON)
  list(APPEND KILN_FEATURE_NAMES ${name})
  set(KILN_FEATURE_${name}_DOC "${doc}")
  set(KILN_FEATURE_${name}_COST "${cost}")
endmacro()

function(kiln_feature_summary)
  message(STATUS "kiln features:")
  foreach(name IN LISTS KILN_FEATURE_NAMES)
    if(KILN_${name})
      set(state "on ")
    else()
      set(state "off")
    endif()
    if(DEFINED KILN_FEATURE_${name}_WHY)
      set(why " (${KILN_FEATURE_${name}_WHY})")
    else()
      set(why "")
    endif()
    string(TOLOWER ${name} lower)
    if(KILN_${name})
      message(STATUS "  ${state}  ${lower}: ${KILN_FEATURE_${name}_DOC}${why}")
    else()
      message(STATUS "  ${state}  ${lower}: ${KILN_FEATURE_${name}_DOC}${why}; without it "
                     "${KILN_FEATURE_${name}_COST} (KILN_${name}=OFF)")
    endif()
    if(NOT KILN_${name} AND NOT KILN_QUIET_FEATURES)
      message(WARNING "kiln: ${lower} is off (KILN_${name}=OFF${why}): ${KILN_FEATURE_${name}_COST}. "
                      "Set -DKILN_QUIET_FEATURES=ON to acknowledge.")
    endif()
  endforeach()
endfunction()
