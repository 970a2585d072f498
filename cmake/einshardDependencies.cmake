# Dependency functions shared by einshard's own CMakeLists.txt and by the installed (and build-tree)
# einshardConfig.cmake, so that a consumer resolves LibTorch exactly as einshard's build does.
#
#   einshard_torch_before_find()   call right before find_package(Torch) / find_dependency(Torch)
#   einshard_torch_after_find()    call right after it
#   einshard_find_metis()          defines einshard::metis (see 3.)
#   einshard_find_fftw()           defines einshard::fftw (see 4.)
#   einshard_find_hypre()          defines einshard::hypre (see 5.)
#   einshard_find_nccl()           defines einshard::nccl (see 6.); call after find_package(Torch)
#
# 1. The CUDA toolkit shim (einshard_torch_before_find)
#
#    A CUDA build of LibTorch -- this includes the default PyPI wheel `torch==2.x` -- makes
#    find_package(Torch) run Caffe2's public/cuda.cmake, which requires a full CUDA *toolkit*
#    (nvcc, headers): without one it stops with "Your installed Caffe2 version uses CUDA but I
#    cannot find the CUDA libraries", and with a toolkit whose version differs from the one the
#    wheel was built for (e.g. CUDA 13.0 in /usr/local/cuda, wheel built for 13.2) it puts that
#    toolkit's libcudart/libnvrtc on the link line and its lib directory in the rpath, so the
#    linker then resolves libtorch_cuda.so's libnccl.so.2 to the wrong NCCL ("undefined reference
#    to ncclCommGrow ...").
#
#    einshard compiles no CUDA code, so it needs none of that: libtorch_cuda.so itself records
#    where its CUDA runtime libraries are (RPATH $ORIGIN/../../nvidia/... in the wheel), and
#    CUDA tensors work at run time without any toolkit. public/cuda.cmake begins with the
#    include guard `if(TARGET torch::cudart) return()`, and torch::cudart is the only CUDA target
#    that Caffe2Targets.cmake references, so defining an empty torch::cudart before
#    find_package(Torch) skips the toolkit search cleanly: same result on CPU-only machines,
#    on GPU machines with a matching toolkit, with a mismatched toolkit and without one; a
#    CPU-only LibTorch never reads it. Set EINSHARD_TORCH_CUDA_TOOLKIT=ON (or call
#    find_package(Torch) yourself before einshard) to get Caffe2's real CUDA targets, e.g. to
#    compile your own CUDA sources against LibTorch.
#
# 2. TORCH_CXX_FLAGS (einshard_torch_after_find)
#
#    TORCH_CXX_FLAGS carries the C++ ABI flag (-D_GLIBCXX_USE_CXX11_ABI=0/1) of the LibTorch
#    build (empty in recent wheels, which always use the new ABI). Recent TorchConfig.cmake
#    files already append it to the `torch` target; this makes sure of it for any version
#    (idempotently), at the consumer's configure time. It is deliberately *not* copied into
#    einshard's exported targets, so the ABI is never hard-coded into an installed einshard.
#
# 3. METIS (einshard_find_metis)
#
#    The sparse part's PartitionMethod::metis calls libmetis (METIS_PartGraphKway). METIS is
#    optional: einshard::einshard always links the INTERFACE target einshard::metis, which this
#    defines at einshard's configure time and again at the consumer's (einshardConfig.cmake), so
#    no absolute path of this machine is exported and a consumer finds its own libmetis. When
#    metis.h and libmetis are found the target carries them and EINSHARD_HAS_METIS=1; otherwise it
#    is empty and PartitionMethod::metis throws einshard::Error. EINSHARD_USE_METIS=OFF (or
#    METIS_INCLUDE_DIR / METIS_LIBRARY set by hand) overrides the search.

# 4. FFTW (einshard_find_fftw)
#
#    einfft's local complex passes run as planned FFTW transforms when autograd does not record
#    them (exec/local_fft.hpp): torch plans nothing ahead on the CPU and measured 2-3x slower.
#    Optional, found the same way as METIS (einshard::fftw, re-found at the consumer's configure
#    time): fftw3.h with libfftw3 and libfftw3f (double and single precision) give
#    EINSHARD_HAS_FFTW=1; without them every local FFT is torch's. EINSHARD_USE_FFTW=OFF turns it
#    off.
#
# 5. hypre (einshard_find_hypre)
#
#    The sparse part's Preconditioner::amg runs hypre's BoomerAMG over the whole distributed
#    matrix (sparse/preconditioner/amg.hpp). Optional, found the same way (HYPRE.h, also under include/hypre/ as
#    Debian's libhypre-dev installs it, and libHYPRE): EINSHARD_HAS_HYPRE=1; without it
#    Preconditioner::amg throws einshard::Error naming hypre. EINSHARD_USE_HYPRE=OFF turns it off.
#    hypre must be built with 32-bit HYPRE_BigInt and double HYPRE_Real (its default, Debian's).

# 6. NCCL (einshard_find_nccl)
#
#    The NCCL communication backend for CUDA tensors (comm/nccl.hpp). Optional: EINSHARD_WITH_NCCL
#    (default ON; the Spack recipe's EINSHARD_USE_NCCL is honoured as well) looks for nccl.h and
#    libnccl, first in the nvidia-nccl wheel next to LibTorch's (site-packages/nvidia/nccl: the
#    NCCL that libtorch_cuda.so itself loads, so one process never holds two), then under
#    NCCL_ROOT, CUDA_HOME, CUDAToolkit_ROOT and /usr/local/cuda (the toolkit's NCCL), then the
#    system's. nccl.h includes cuda_runtime.h, found the same way (the nvidia-cuda-runtime wheel's
#    include/ first). Found: einshard::nccl carries both include directories, libnccl and
#    EINSHARD_HAS_NCCL=1; not found (no toolkit and no wheel, a CPU LibTorch): it is empty, and
#    the NCCL backend raises an error naming NCCL. Header include directories cost nothing to a
#    translation unit that does not include comm/nccl.hpp, and libnccl is already loaded by a CUDA
#    LibTorch, so every einshard target may carry it.

macro(einshard_torch_before_find)
  if(NOT EINSHARD_TORCH_CUDA_TOOLKIT AND NOT TARGET torch AND NOT TARGET torch::cudart)
    # GLOBAL: consumers in other directories (add_subdirectory) resolve torch_cuda's
    # INTERFACE_LINK_LIBRARIES, which name torch::cudart, from their own scope.
    add_library(torch::cudart INTERFACE IMPORTED GLOBAL)
  endif()
endmacro()

function(einshard_torch_after_find)
  if(NOT TARGET torch OR "${TORCH_CXX_FLAGS}" STREQUAL "")
    return()
  endif()
  get_target_property(_einshard_have torch INTERFACE_COMPILE_OPTIONS)
  if(NOT _einshard_have)
    set(_einshard_have "")
  endif()
  separate_arguments(_einshard_flags NATIVE_COMMAND "${TORCH_CXX_FLAGS}")
  foreach(_einshard_flag IN LISTS _einshard_flags)
    if(NOT _einshard_flag IN_LIST _einshard_have AND NOT "${TORCH_CXX_FLAGS}" IN_LIST _einshard_have)
      set_property(TARGET torch APPEND PROPERTY INTERFACE_COMPILE_OPTIONS "${_einshard_flag}")
    endif()
  endforeach()
endfunction()

# An optional library as the INTERFACE target einshard::<name>: empty when switched off
# (EINSHARD_USE_<NAME>=OFF) or not found; otherwise it carries `header`'s directory, the libraries
# and EINSHARD_HAS_<NAME>=1. GLOBAL, like torch::cudart above: consumers in other directories
# resolve einshard's INTERFACE_LINK_LIBRARIES from their own scope. `missing` says what happens
# without it.
function(_einshard_optional_library name header missing)
  string(TOUPPER "${name}" upper)
  if(TARGET einshard::${name})
    return()
  endif()
  add_library(einshard::${name} INTERFACE IMPORTED GLOBAL)
  if(DEFINED EINSHARD_USE_${upper} AND NOT EINSHARD_USE_${upper})
    message(STATUS "einshard: ${upper} disabled (EINSHARD_USE_${upper}=OFF)")
    return()
  endif()
  find_path(${upper}_INCLUDE_DIR ${header} PATH_SUFFIXES ${name})
  set(libraries "")
  foreach(library IN LISTS ARGN)
    string(TOUPPER "${library}" variable)
    find_library(${variable}_LIBRARY ${library})
    if(NOT ${variable}_LIBRARY)
      message(STATUS "einshard: ${upper} (${header}, lib${library}) not found; ${missing}")
      return()
    endif()
    list(APPEND libraries "${${variable}_LIBRARY}")
  endforeach()
  if(NOT ${upper}_INCLUDE_DIR)
    message(STATUS "einshard: ${upper} (${header}) not found; ${missing}")
    return()
  endif()
  set_target_properties(einshard::${name} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${${upper}_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${libraries}"
    INTERFACE_COMPILE_DEFINITIONS EINSHARD_HAS_${upper}=1)
  message(STATUS "einshard: ${upper} found: ${libraries}")
endfunction()

function(einshard_find_metis)
  _einshard_optional_library(metis metis.h "sparse PartitionMethod::metis will throw" metis)
endfunction()

function(einshard_find_fftw)
  _einshard_optional_library(fftw fftw3.h "einfft's local FFTs are torch's" fftw3 fftw3f)
endfunction()

function(einshard_find_hypre)
  _einshard_optional_library(hypre HYPRE.h "sparse Preconditioner::amg will throw" HYPRE)
endfunction()

function(einshard_find_nccl)
  if(TARGET einshard::nccl)
    return()
  endif()
  add_library(einshard::nccl INTERFACE IMPORTED GLOBAL)
  set(wanted ON)
  if(DEFINED EINSHARD_WITH_NCCL)
    set(wanted ${EINSHARD_WITH_NCCL})
  elseif(DEFINED EINSHARD_USE_NCCL)
    set(wanted ${EINSHARD_USE_NCCL})
  endif()
  if(NOT wanted)
    message(STATUS "einshard: NCCL disabled (EINSHARD_WITH_NCCL=OFF)")
    return()
  endif()
  # Where LibTorch's Python wheel keeps its NVIDIA wheels (site-packages/nvidia).
  set(wheels "")
  foreach(torch_dir IN ITEMS "${TORCH_INSTALL_PREFIX}" "${Torch_DIR}/../../..")
    if(torch_dir AND EXISTS "${torch_dir}/../nvidia")
      get_filename_component(wheels "${torch_dir}/../nvidia" ABSOLUTE)
      break()
    endif()
  endforeach()
  # EINSHARD_NCCL_ROOTS replaces the toolkit roots searched after the wheel (a test simulates a
  # machine without a toolkit with it).
  if(NOT DEFINED EINSHARD_NCCL_ROOTS)
    set(EINSHARD_NCCL_ROOTS "$ENV{NCCL_ROOT};$ENV{CUDA_HOME};${CUDAToolkit_ROOT};/usr/local/cuda")
  endif()
  set(prefixes "")
  if(wheels)
    list(APPEND prefixes "${wheels}/nccl")
  endif()
  foreach(root IN LISTS EINSHARD_NCCL_ROOTS)
    if(root)
      list(APPEND prefixes "${root}")
    endif()
  endforeach()
  # Header and library from the same prefix: a wheel's nccl.h with the toolkit's libnccl (or the
  # reverse) would mix two NCCL versions.
  set(include_dir "")
  set(library "")
  foreach(prefix IN LISTS prefixes)
    if(EXISTS "${prefix}/include/nccl.h")
      foreach(candidate IN ITEMS lib/libnccl.so lib/libnccl.so.2 lib64/libnccl.so lib64/libnccl.so.2)
        if(EXISTS "${prefix}/${candidate}")
          set(include_dir "${prefix}/include")
          set(library "${prefix}/${candidate}")
          break()
        endif()
      endforeach()
    endif()
    if(library)
      break()
    endif()
  endforeach()
  if(NOT library)
    find_path(NCCL_INCLUDE_DIR nccl.h)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(include_dir "${NCCL_INCLUDE_DIR}")
      set(library "${NCCL_LIBRARY}")
    endif()
  endif()
  set(cuda_hints "")
  if(wheels)
    list(APPEND cuda_hints "${wheels}/cu13/include" "${wheels}/cuda_runtime/include")
  endif()
  foreach(root IN LISTS EINSHARD_NCCL_ROOTS)
    if(root)
      list(APPEND cuda_hints "${root}/include")
    endif()
  endforeach()
  find_path(EINSHARD_CUDA_RUNTIME_INCLUDE_DIR cuda_runtime.h HINTS ${cuda_hints})
  if(NOT library OR NOT EINSHARD_CUDA_RUNTIME_INCLUDE_DIR)
    message(STATUS "einshard: NCCL (nccl.h, libnccl, cuda_runtime.h) not found; the NCCL backend will throw")
    return()
  endif()
  set_target_properties(einshard::nccl PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${include_dir};${EINSHARD_CUDA_RUNTIME_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${library}"
    INTERFACE_COMPILE_DEFINITIONS EINSHARD_HAS_NCCL=1)
  message(STATUS "einshard: NCCL found: ${library} (CUDA headers ${EINSHARD_CUDA_RUNTIME_INCLUDE_DIR})")
endfunction()
