# cmake -DPREFIX=<install prefix> -DCXX=<compiler> -DSOURCE=<main.cpp> -DBINARY=<dir> -DVERSION=<x.y.z>
#       -P pkg_config.cmake
# consumer.pkg_config: builds main.cpp the way a Makefile user would, with nothing but the flags
# `pkg-config --cflags --libs einshard` gives for the installed einshard.pc, and runs it.
foreach(var PREFIX CXX SOURCE BINARY VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "pkg_config.cmake: -D${var}=... is required")
  endif()
endforeach()
find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/share/pkgconfig")
execute_process(COMMAND "${PKG_CONFIG}" --modversion einshard OUTPUT_VARIABLE version
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion einshard: expected ${VERSION}, got '${version}' (status ${rc})")
endif()
foreach(what cflags libs)
  execute_process(COMMAND "${PKG_CONFIG}" --${what} einshard OUTPUT_VARIABLE ${what}
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --${what} einshard failed (${rc})")
  endif()
  separate_arguments(${what} UNIX_COMMAND "${${what}}")
endforeach()
# The include directory must be the install prefix's, not the source tree's.
if(NOT cflags MATCHES "-I${PREFIX}/share/pkgconfig/../../include")
  message(FATAL_ERROR "pkg-config --cflags einshard does not point into ${PREFIX}: ${cflags}")
endif()
file(MAKE_DIRECTORY "${BINARY}")
execute_process(COMMAND "${CXX}" ${cflags} "${SOURCE}" -o "${BINARY}/einshard_consumer" ${libs}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compiling ${SOURCE} with pkg-config's flags failed (${rc}): ${CXX} ${cflags} ... ${libs}")
endif()
execute_process(COMMAND "${BINARY}/einshard_consumer" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the pkg-config consumer exited with ${rc}")
endif()
