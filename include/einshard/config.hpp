#pragma once
/// @file
/// Header-only or compiled. einshard is header-only by default; defining `EINSHARD_COMPILED`
/// (the CMake target `einshard::einshard` does, unless configured with `EINSHARD_HEADER_ONLY=ON`)
/// makes its headers declare the non-template engine without defining it, and the program links
/// the library `einshard_compiled`, which defines it once (as spdlog's compiled mode does). One
/// program uses one mode: a compiled and a header-only translation unit must not be linked together.

// The library has one translation unit per part: src/einshard.cpp defines the notation's engine
// (EINSHARD_BUILDING_COMPILED), src/sparse.cpp the sparse part's (EINSHARD_BUILDING_SPARSE as
// well), each declaring only what the other defines.
#if !defined(EINSHARD_COMPILED)
#define EINSHARD_DECLARE_ONLY 0
#define EINSHARD_DEFINE_SPARSE 1
#elif defined(EINSHARD_BUILDING_SPARSE)
#define EINSHARD_DECLARE_ONLY 1
#define EINSHARD_DEFINE_SPARSE 1
#elif defined(EINSHARD_BUILDING_COMPILED)
#define EINSHARD_DECLARE_ONLY 0
#define EINSHARD_DEFINE_SPARSE 0
#else
/// The headers only declare what einshard_compiled defines: the notation's engine
/// (EINSHARD_DECLARE_ONLY) and the sparse part's out-of-class members (EINSHARD_DEFINE_SPARSE).
#define EINSHARD_DECLARE_ONLY 1
#define EINSHARD_DEFINE_SPARSE 0
#endif

#if defined(EINSHARD_COMPILED)
/// How the engine's functions are declared and defined: external (one definition, inside
/// einshard_compiled) when compiled, inline when header-only.
#define EINSHARD_INLINE
#else
#define EINSHARD_INLINE inline
#endif
