// The compiled part of einshard's sparse side (library einshard_compiled): DSparseTensor's members
// (assembly, products, the solvers with their preconditioners and autograd records), defined once
// here instead of in every translation unit that calls them. See config.hpp.
#ifndef EINSHARD_BUILDING_COMPILED
#error "src/sparse.cpp is compiled with EINSHARD_BUILDING_COMPILED (see CMakeLists.txt)"
#endif
#define EINSHARD_BUILDING_SPARSE
#include "einshard/sparse.hpp"
