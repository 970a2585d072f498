# CMake toolchain for building MPI programs for SimGrid's SMPI (libsimgrid-dev): smpicc/smpicxx as
# the compilers. An SMPI "executable" is a shared object that smpirun loads once per simulated rank.
#
#   cd bench/scale && cmake --preset smpi && cmake --build --preset smpi   (CMakePresets.json)
#
# Programs built this way cannot link libraries built against the system Open MPI (Debian's
# hypre, PETSc, FFTW-MPI, einshard_compiled): build einshard header-only.
set(CMAKE_C_COMPILER smpicc)
set(CMAKE_CXX_COMPILER smpicxx)
# Every simulated rank gets its own copy of the library's function-local statics: g++ makes an
# inline function's static a GNU_UNIQUE symbol, which the loader shares between the per-rank copies.
set(CMAKE_CXX_FLAGS_INIT "-fno-gnu-unique")
set(EINSHARD_SCALE_SMPI ON CACHE BOOL "building for SMPI" FORCE)
