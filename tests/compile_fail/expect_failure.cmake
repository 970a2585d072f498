# cmake -DBUILD_DIR=<build> -DTARGET=<object target> -DCASE_FILE=<case.cmake> [-DCONFIG=<cfg>]
#       -P expect_failure.cmake
#
# Builds one compile-fail case (see CMakeLists.txt next to this file). Passes when the build fails
# with output matching the case's regex; fails when the code compiles, or fails differently.

foreach(var BUILD_DIR TARGET CASE_FILE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_failure.cmake: -D${var}=... is required")
  endif()
endforeach()
include("${CASE_FILE}")  # CASE_NAME, CASE_CODE, CASE_EXPECT

# Plain ASCII quotes and English in compiler diagnostics, whatever the caller's locale.
set(ENV{LC_ALL} C)
set(ENV{LANG} C)

set(command "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}")
if(CONFIG)
  list(APPEND command --config "${CONFIG}")
endif()
execute_process(COMMAND ${command}
                RESULT_VARIABLE result
                OUTPUT_VARIABLE output
                ERROR_VARIABLE output)

# message(NOTICE) prints verbatim; message(FATAL_ERROR) would re-wrap the compiler's lines.
if(result EQUAL 0)
  message(NOTICE
    "--- code:\n${CASE_CODE}\n"
    "--- expected a diagnostic matching (CMake regex):\n${CASE_EXPECT}\n"
    "--- build output:\n${output}")
  message(FATAL_ERROR "No compile error for case '${CASE_NAME}': it compiled, but it must not.")
endif()

if(NOT output MATCHES "${CASE_EXPECT}")
  message(NOTICE
    "--- code:\n${CASE_CODE}\n"
    "--- expected a diagnostic matching (CMake regex):\n${CASE_EXPECT}\n"
    "--- build output:\n${output}")
  message(FATAL_ERROR "Case '${CASE_NAME}' failed to compile, but not with the expected diagnostic.")
endif()

string(REGEX MATCH "${CASE_EXPECT}" matched "${output}")
message(STATUS "compile_fail.${CASE_NAME}: does not compile, as expected; matched: ${matched}")
