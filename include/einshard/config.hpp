#pragma once
/// @file
/// Header-only or compiled. einshard is header-only by default; defining `EINSHARD_COMPILED`
/// (the CMake target `einshard::einshard` does, unless configured with `EINSHARD_HEADER_ONLY=ON`)
/// makes its headers declare the non-template engine without defining it, and the program links
/// the library `einshard_compiled`, which defines it once (as spdlog's compiled mode does). One
/// program uses one mode: a compiled and a header-only translation unit must not be linked together.

#if defined(EINSHARD_COMPILED) && !defined(EINSHARD_BUILDING_COMPILED)
/// The headers only declare what einshard_compiled defines.
#define EINSHARD_DECLARE_ONLY 1
#else
#define EINSHARD_DECLARE_ONLY 0
#endif

#if defined(EINSHARD_COMPILED)
/// How the engine's functions are declared and defined: external (one definition, inside
/// einshard_compiled) when compiled, inline when header-only.
#define EINSHARD_INLINE
#else
#define EINSHARD_INLINE inline
#endif

/// Whether the sparse part's out-of-class members (DSparseTensor's) are defined in this
/// translation unit.
#define EINSHARD_DEFINE_SPARSE 1
