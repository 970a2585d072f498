// The compiled part of einshard (library einshard_compiled): the non-template engine behind the
// tensor notation (the distributed planner and executor, run-time notations and their cache, the
// stencil and FFT operations, the communication ops' autograd node), defined once here instead of
// in every translation unit that calls einshard. See config.hpp.
#ifndef EINSHARD_BUILDING_COMPILED
#error "src/einshard.cpp is compiled with EINSHARD_BUILDING_COMPILED (see CMakeLists.txt)"
#endif
#include "einshard/einshard.hpp"
