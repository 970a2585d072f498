# cmake -DBUILD_DIR=<einshard build dir> -DPREFIX=<install prefix> -P install.cmake
# Fixture of the consumer tests: a fresh `cmake --install` of the current build into PREFIX.
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
