#pragma once
/// @file
/// Blocking all-reduces of small host arrays, in place: a sum of float, double or int64 words and a
/// maximum of int64 words (flags). The replay's folded agreement (exec/fold.hpp) sums its header
/// with the payload through these.

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <span>
#include <type_traits>

#include "einshard/comm/check.hpp"
#include "einshard/comm/mpi.hpp"

namespace einshard::comm {

/// Replaces `values` with their sums over `comm` (every rank gets them). T: float, double or
/// std::int64_t.
template <class T>
void all_reduce_sum_in_place(std::span<T> values, MPI_Comm comm) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>,
                "all_reduce_sum_in_place: float, double or std::int64_t");
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), count(static_cast<std::int64_t>(values.size())),
                      datatype(c10::CppTypeToScalarType<T>::value), MPI_SUM, comm),
        "MPI_Allreduce");
}

/// Replaces `values` with their maxima over `comm` (every rank gets them).
inline void all_reduce_max_in_place(std::span<std::int64_t> values, MPI_Comm comm) {
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), count(static_cast<std::int64_t>(values.size())), MPI_INT64_T,
                      MPI_MAX, comm),
        "MPI_Allreduce");
}

}  // namespace einshard::comm
