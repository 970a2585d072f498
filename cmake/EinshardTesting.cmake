# Test functions of einshard's build (not installed).
#
#   einshard_add_mpi_test(TARGET <exe> NAME <base>
#                         [RANKS <n>...]        default: 1 2 3 4 8
#                         [TIMEOUT <seconds>]   default: 300
#                         [ARGS <arg>...]       passed to the executable on every rank
#                         [LABELS <label>...]   added to the label `mpi`
#                         [ENVIRONMENT <VAR=value>...])
#
# registers one ctest test per world size, named <base>.np<N>, that runs
#
#   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} N ${EINSHARD_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
#       $<TARGET_FILE:exe> ${MPIEXEC_POSTFLAGS} ARGS...
#
# The tests share RESOURCE_LOCK `mpi`, so two MPI jobs never compete for the cores (the ranks are
# oversubscribed and busy-poll), and reserve PROCESSORS N of ctest's -j slots, so no compile-heavy
# test (consumer, doc_blocks) takes a core from busy-polling ranks either (an 8-rank suite ran 20x
# slower beside one); they carry a TIMEOUT, since a rank that fails while the others
# wait in a collective hangs until it is killed. 15 s before the TIMEOUT (a quarter of it for short
# ones) each rank's watchdog (tests/support/hang_watchdog.hpp, through
# EINSHARD_TEST_WATCHDOG_SECONDS; an ENVIRONMENT entry overrides it) prints the test case it is in
# and ends the run, so a hang says which test and which rank.

include_guard(GLOBAL)

if(NOT MPIEXEC_EXECUTABLE)
  message(FATAL_ERROR "EinshardTesting: find_package(MPI) did not find an mpiexec (MPIEXEC_EXECUTABLE)")
endif()

# Launcher flags, decided once per build tree (cached, so they can be overridden with
# -DEINSHARD_MPIEXEC_FLAGS=...). Open MPI refuses to start more ranks than cores and to run as root
# unless told to; both are Open MPI-only options (MPICH oversubscribes and runs as root as is).
if(NOT DEFINED EINSHARD_MPIEXEC_FLAGS)
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version
                  OUTPUT_VARIABLE _einshard_mpiexec_version ERROR_VARIABLE _einshard_mpiexec_version
                  RESULT_VARIABLE _einshard_rc TIMEOUT 60)
  set(_einshard_flags "")
  if(_einshard_mpiexec_version MATCHES "Open MPI|OpenRTE")
    if(_einshard_mpiexec_version MATCHES "\\) ([0-9]+)\\.[0-9]+" AND CMAKE_MATCH_1 GREATER_EQUAL 5)
      list(APPEND _einshard_flags --map-by :OVERSUBSCRIBE)   # Open MPI 5 (PRRTE)
    else()
      list(APPEND _einshard_flags --oversubscribe)           # Open MPI 4
    endif()
    execute_process(COMMAND id -u OUTPUT_VARIABLE _einshard_uid OUTPUT_STRIP_TRAILING_WHITESPACE
                    ERROR_QUIET RESULT_VARIABLE _einshard_rc)
    if(_einshard_uid STREQUAL "0")
      list(APPEND _einshard_flags --allow-run-as-root)
    endif()
  endif()
  set(EINSHARD_MPIEXEC_FLAGS "${_einshard_flags}" CACHE STRING
      "Launcher flags of einshard's MPI tests, after '${MPIEXEC_NUMPROC_FLAG} N'")
  list(JOIN _einshard_flags " " _einshard_flags_text)
  message(STATUS "einshard: MPI tests run: ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} N ${_einshard_flags_text} <test>")
endif()

# Environment of every MPI test (inherited by the local ranks):
#  - one thread per rank (OpenMP and at::set_num_threads through EINSHARD_NUM_THREADS);
#  - Open MPI 4 in containers: no CMA single-copy (needs ptrace rights), oversubscription allowed;
#    Open MPI 5 reads the PRRTE variable instead; running as root allowed (harmless otherwise).
set(EINSHARD_MPI_TEST_ENVIRONMENT
  "OMP_NUM_THREADS=1"
  "EINSHARD_NUM_THREADS=1"
  "OMPI_MCA_btl_vader_single_copy_mechanism=none"
  "OMPI_MCA_rmaps_base_oversubscribe=1"
  "PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe"
  "OMPI_ALLOW_RUN_AS_ROOT=1"
  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")

function(einshard_add_mpi_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "TARGET;NAME;TIMEOUT" "RANKS;ARGS;LABELS;ENVIRONMENT")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "einshard_add_mpi_test: unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_TARGET OR NOT arg_NAME)
    message(FATAL_ERROR "einshard_add_mpi_test: TARGET and NAME are required")
  endif()
  if(NOT arg_RANKS)
    set(arg_RANKS 1 2 3 4 8)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()

  if(arg_TIMEOUT GREATER 60)
    math(EXPR watchdog "${arg_TIMEOUT} - 15")
  else()
    math(EXPR watchdog "${arg_TIMEOUT} * 3 / 4")
  endif()
  set(environment ${EINSHARD_MPI_TEST_ENVIRONMENT})
  if(NOT arg_ENVIRONMENT MATCHES "EINSHARD_TEST_WATCHDOG_SECONDS=")
    list(APPEND environment "EINSHARD_TEST_WATCHDOG_SECONDS=${watchdog}")
  endif()
  list(APPEND environment ${arg_ENVIRONMENT})

  foreach(nranks IN LISTS arg_RANKS)
    set(test_name "${arg_NAME}.np${nranks}")
    add_test(NAME "${test_name}"
             COMMAND "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} ${nranks}
                     ${EINSHARD_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
                     "$<TARGET_FILE:${arg_TARGET}>" ${MPIEXEC_POSTFLAGS} ${arg_ARGS})
    set_tests_properties("${test_name}" PROPERTIES
      TIMEOUT ${arg_TIMEOUT}
      LABELS "mpi;${arg_LABELS}"
      RESOURCE_LOCK mpi
      PROCESSORS ${nranks}
      ENVIRONMENT "${environment}")
  endforeach()
endfunction()
