# packaging.version: the release number is the same in every place a user or a packager reads it
# (cmake -P, with -DSOURCE_DIR, -DBINARY_DIR and -DPROJECT_VERSION): include/einshard/version.hpp,
# CMake's project(VERSION), the CMake package's version file, einshard.pc, the Spack recipe and
# the newest release of CHANGELOG.md.
set(want "${PROJECT_VERSION}")
set(faults "")

file(READ "${SOURCE_DIR}/include/einshard/version.hpp" header)
foreach(part MAJOR MINOR PATCH)
  if(NOT header MATCHES "#define EINSHARD_VERSION_${part} ([0-9]+)")
    string(APPEND faults "\n  version.hpp: no EINSHARD_VERSION_${part}")
  endif()
  set(${part} "${CMAKE_MATCH_1}")
endforeach()
if(NOT "${MAJOR}.${MINOR}.${PATCH}" STREQUAL want)
  string(APPEND faults "\n  version.hpp says ${MAJOR}.${MINOR}.${PATCH}")
endif()

file(READ "${BINARY_DIR}/einshardConfigVersion.cmake" config_version)
if(NOT config_version MATCHES "set\\(PACKAGE_VERSION \"([^\"]+)\"\\)" OR NOT CMAKE_MATCH_1 STREQUAL want)
  string(APPEND faults "\n  einshardConfigVersion.cmake says '${CMAKE_MATCH_1}'")
endif()

file(READ "${BINARY_DIR}/install/einshard.pc" pc)
if(NOT pc MATCHES "\nVersion: ([^\n]+)" OR NOT CMAKE_MATCH_1 STREQUAL want)
  string(APPEND faults "\n  einshard.pc says '${CMAKE_MATCH_1}'")
endif()

file(READ "${SOURCE_DIR}/packaging/spack/einshard/package.py" recipe)
string(REPLACE "." "\\." want_re "${want}")
if(NOT recipe MATCHES "version\\(\"${want_re}\"")
  string(APPEND faults "\n  the Spack recipe has no version(\"${want}\", ...)")
endif()

file(READ "${SOURCE_DIR}/CHANGELOG.md" changelog)
if(NOT changelog MATCHES "\n## \\[([0-9]+\\.[0-9]+\\.[0-9]+)\\]" OR NOT CMAKE_MATCH_1 STREQUAL want)
  string(APPEND faults "\n  CHANGELOG.md's newest release is '${CMAKE_MATCH_1}'")
endif()

if(faults)
  message(FATAL_ERROR "einshard ${want} (project(VERSION)) disagrees with:${faults}")
endif()
message(STATUS "einshard ${want}: version.hpp, the CMake package, einshard.pc, Spack and CHANGELOG.md agree")
