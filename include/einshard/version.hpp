#pragma once
/// @file
/// Library version, kept in step with the `project(VERSION)` in the top-level CMakeLists.txt.

#define EINSHARD_VERSION_MAJOR 0
#define EINSHARD_VERSION_MINOR 1
#define EINSHARD_VERSION_PATCH 0

namespace einshard {
inline constexpr int version_major = EINSHARD_VERSION_MAJOR;
inline constexpr int version_minor = EINSHARD_VERSION_MINOR;
inline constexpr int version_patch = EINSHARD_VERSION_PATCH;
}  // namespace einshard
