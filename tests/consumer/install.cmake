# cmake -DBUILD_DIR=<einshard build dir> -DPREFIX=<install prefix> -P install.cmake
# Fixture of the consumer tests: a fresh `cmake --install` of the current build into PREFIX, then
# a check of the layout users look for (headers, CMake package, einshard.pc, examples, and
# einshard-explain when it is built, which must run from there).
foreach(var BUILD_DIR PREFIX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install.cmake: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed (${result})")
endif()

foreach(file include/einshard/einshard.hpp include/einshard/sparse.hpp share/cmake/einshard/einshardConfig.cmake
             share/pkgconfig/einshard.pc share/doc/einshard/examples/poisson.cpp)
  if(NOT EXISTS "${PREFIX}/${file}")
    message(FATAL_ERROR "cmake --install left out ${file}")
  endif()
endforeach()
if(EXISTS "${BUILD_DIR}/tools/einshard-explain")
  execute_process(COMMAND "${PREFIX}/bin/einshard-explain" "a b -> a/x b" --mesh x=2 RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "split_forward_allgather_backward")
    message(FATAL_ERROR "the installed einshard-explain does not run (${rc}): ${out}")
  endif()
endif()
