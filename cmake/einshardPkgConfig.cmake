# einshard_write_pkg_config(<output file>): einshard.pc for the install tree, written from what
# this configure found (LibTorch, MPI, and METIS/FFTW when used). The prefix is found relative to
# the .pc file (${pcfiledir}), so an install moved with `cmake --install --prefix` stays valid.
function(einshard_write_pkg_config output)
  set(cflags "")
  foreach(flag IN LISTS TORCH_CXX_FLAGS)
    separate_arguments(parts UNIX_COMMAND "${flag}")
    list(APPEND cflags ${parts})
  endforeach()
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS MPI_CXX_INCLUDE_DIRS)
    list(APPEND cflags "-isystem ${dir}")
  endforeach()
  foreach(def IN LISTS MPI_CXX_COMPILE_DEFINITIONS)
    list(APPEND cflags "-D${def}")
  endforeach()
  list(APPEND cflags ${MPI_CXX_COMPILE_OPTIONS})
  foreach(def IN LISTS EINSHARD_SKIP_MPICXX_DEFINITIONS)
    list(APPEND cflags "-D${def}")
  endforeach()

  # libtorch.so brings libtorch_cpu (and libtorch_cuda in CUDA builds); c10 is named directly by
  # einshard's headers' inline code.
  get_filename_component(torch_libdir "${TORCH_LIBRARY}" DIRECTORY)
  set(libs "-L\${torch_libdir}" "-Wl,-rpath,\${torch_libdir}" -ltorch -ltorch_cpu -lc10)
  list(APPEND libs ${MPI_CXX_LIBRARIES} ${MPI_CXX_LINK_FLAGS})

  foreach(optional IN ITEMS metis fftw)
    string(TOUPPER "${optional}" upper)
    get_target_property(defs einshard::${optional} INTERFACE_COMPILE_DEFINITIONS)
    if(defs)
      get_target_property(incs einshard::${optional} INTERFACE_INCLUDE_DIRECTORIES)
      get_target_property(ls einshard::${optional} INTERFACE_LINK_LIBRARIES)
      list(APPEND cflags "-DEINSHARD_HAS_${upper}=1")
      foreach(dir IN LISTS incs)
        # The compiler's own directory: naming it with -isystem would reorder the search and break
        # the standard library's #include_next.
        if(NOT dir MATCHES "^/usr(/local)?/include/?$")
          list(APPEND cflags "-isystem ${dir}")
        endif()
      endforeach()
      list(APPEND libs ${ls})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES cflags)
  list(JOIN cflags " " EINSHARD_PC_CFLAGS)
  list(JOIN libs " " EINSHARD_PC_LIBS)
  set(EINSHARD_PC_TORCH_LIBDIR "${torch_libdir}")
  # share/pkgconfig -> the prefix
  file(RELATIVE_PATH EINSHARD_PC_PREFIX_FROM_PCDIR "/p/${EINSHARD_INSTALL_PKGCONFIGDIR}" "/p")
  string(REGEX REPLACE "/$" "" EINSHARD_PC_PREFIX_FROM_PCDIR "${EINSHARD_PC_PREFIX_FROM_PCDIR}")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/einshard.pc.in" "${output}" @ONLY)
endfunction()
