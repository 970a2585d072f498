#pragma once
/// @file
/// Which kernels a sparse operation runs on a tensor: the hand-written loops of csr.hpp,
/// vector_kernels.hpp and block_kernels.hpp ("native", CPU memory only) or the ATen operations of
/// generic_kernels.hpp ("generic", any device ATen runs on). CPU tensors take the native ones
/// unless the environment variable EINSHARD_SPARSE_KERNELS=generic asks otherwise, which is how
/// the generic path is tested without a GPU.

#include <ATen/ATen.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "einshard/error.hpp"

namespace einshard::sparse {

namespace detail {

/// EINSHARD_SPARSE_KERNELS, read once: true for `generic`, false for `native` or unset.
inline bool generic_forced() {
  static const bool forced = [] {
    const char* v = std::getenv("EINSHARD_SPARSE_KERNELS");
    const std::string_view s = v == nullptr ? "" : v;
    if (s.empty() || s == "native") return false;
    if (s == "generic") return true;
    throw Error("EINSHARD_SPARSE_KERNELS: expected native or generic, got '" + std::string(s) + "'");
  }();
  return forced;
}

/// Forces the generic kernels on CPU tensors (true) or leaves the choice to the environment
/// (false): how the tests compare both paths in one process. Process-wide, not thread-safe
/// against a running operation; a matrix keeps the product kernels it was made with.
inline bool& force_generic_kernels() {
  static bool forced = false;
  return forced;
}

/// Whether `t` takes the generic kernels (an undefined tensor counts as a CPU one).
inline bool uses_generic(const at::Tensor& t) {
  return generic_forced() || force_generic_kernels() || (t.defined() && !t.device().is_cpu());
}

}  // namespace detail

/// "native" (CPU tensors) or "generic" (any other device, or CPU under
/// EINSHARD_SPARSE_KERNELS=generic): the kernels a sparse operation on `t` runs.
[[nodiscard]] inline std::string_view kernels_for(const at::Tensor& t) {
  return detail::uses_generic(t) ? "generic" : "native";
}

}  // namespace einshard::sparse
