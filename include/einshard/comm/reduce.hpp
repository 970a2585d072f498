#pragma once
/// @file
/// Collectives of a few plain values: the flags, counts, norms and ids that distributed
/// algorithms agree on between their bulk transfers ("did any rank fail", "sum these three
/// dot products", "the largest row count"), and the communicator a library object duplicates
/// for its own traffic. Each is one MPI call; every function is collective over `comm`.

#include <mpi.h>

#include <complex>
#include <cstdint>
#include <memory>
#include <ranges>
#include <span>
#include <type_traits>
#include <string>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/mpi.hpp"

namespace einshard::comm {

/// How values combine across ranks.
enum class Reduction { sum, max, min };

namespace detail {

template <class T>
MPI_Datatype plain_datatype() {
  if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::complex<double>>) return MPI_C_DOUBLE_COMPLEX;
  else if constexpr (std::is_same_v<T, char>) return MPI_CHAR;
  else static_assert(!sizeof(T), "comm: a plain value is int, float, std::int64_t, double, std::complex<double> or char");
}

inline MPI_Op plain_op(Reduction r) {
  switch (r) {
    case Reduction::sum: return MPI_SUM;
    case Reduction::max: return MPI_MAX;
    case Reduction::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

}  // namespace detail

/// `values` combined element-wise with every rank's, in place (complex values: sums only).
template <class T>
void all_reduce_values(std::span<T> values, Reduction r, MPI_Comm comm) {
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), count(static_cast<std::int64_t>(values.size())),
                      detail::plain_datatype<T>(), detail::plain_op(r), comm),
        "MPI_Allreduce");
}

/// One value combined over the ranks.
template <class T>
[[nodiscard]] T all_reduce_value(T value, Reduction r, MPI_Comm comm) {
  all_reduce_values(std::span<T>(&value, 1), r, comm);
  return value;
}

/// `values` summed element-wise over the ranks: the dot products of one step of an iterative
/// method travel together, in one all-reduce.
[[nodiscard]] inline std::vector<double> summed(std::vector<double> values, MPI_Comm comm) {
  all_reduce_values(std::span<double>(values), Reduction::sum, comm);
  return values;
}
[[nodiscard]] inline std::vector<std::complex<double>> summed(std::vector<std::complex<double>> values, MPI_Comm comm) {
  all_reduce_values(std::span<std::complex<double>>(values), Reduction::sum, comm);
  return values;
}

/// Whether `flag` holds on some rank / on every rank: the same answer everywhere.
[[nodiscard]] inline bool any_rank(bool flag, MPI_Comm comm) {
  return all_reduce_value(flag ? 1 : 0, Reduction::max, comm) != 0;
}
[[nodiscard]] inline bool every_rank(bool flag, MPI_Comm comm) {
  return all_reduce_value(flag ? 1 : 0, Reduction::min, comm) != 0;
}

/// The sum of `value` over the ranks before this one (0 on the first).
template <class T>
[[nodiscard]] T exclusive_sum(T value, MPI_Comm comm) {
  T before{};
  check(MPI_Exscan(&value, &before, 1, detail::plain_datatype<T>(), MPI_SUM, comm), "MPI_Exscan");
  return rank_of(comm) == 0 ? T{} : before;  // MPI leaves rank 0's result undefined
}

/// Rank `root`'s `values` on every rank (same length everywhere).
template <class T>
void broadcast_values(std::span<T> values, int root, MPI_Comm comm) {
  check(MPI_Bcast(values.data(), count(static_cast<std::int64_t>(values.size())), detail::plain_datatype<T>(), root,
                  comm),
        "MPI_Bcast");
}

/// Every rank's `values` (a contiguous range of the same length on every rank), rank-major.
/// Small metadata only.
template <std::ranges::contiguous_range Values>
[[nodiscard]] auto all_gather_values(const Values& values, MPI_Comm comm) {
  using T = std::remove_cv_t<std::ranges::range_value_t<Values>>;
  const auto n = count(static_cast<std::int64_t>(std::ranges::size(values)));
  std::vector<T> out(std::ranges::size(values) * static_cast<std::size_t>(size_of(comm)));
  check(MPI_Allgather(std::ranges::data(values), n, detail::plain_datatype<T>(), out.data(), n,
                      detail::plain_datatype<T>(), comm),
        "MPI_Allgather");
  return out;
}

/// Every rank's `values` (the same length on every rank), rank-major, on rank `root`; empty on
/// the others, which hold nothing of size P.
template <std::ranges::contiguous_range Values>
[[nodiscard]] auto gather_values(const Values& values, int root, MPI_Comm comm) {
  using T = std::remove_cv_t<std::ranges::range_value_t<Values>>;
  const auto n = count(static_cast<std::int64_t>(std::ranges::size(values)));
  std::vector<T> out(rank_of(comm) == root ? std::ranges::size(values) * static_cast<std::size_t>(size_of(comm)) : 0);
  check(MPI_Gather(std::ranges::data(values), n, detail::plain_datatype<T>(), out.data(), n,
                   detail::plain_datatype<T>(), root, comm),
        "MPI_Gather");
  return out;
}

/// Piece r of rank `root`'s `pieces` (one per rank there; ignored elsewhere) on rank r: a scatter
/// of the lengths, then of the text, so that no rank but the root holds anything of size P.
[[nodiscard]] inline std::string scatter_strings(const std::vector<std::string>& pieces, int root, MPI_Comm comm) {
  const bool here = rank_of(comm) == root;
  std::vector<int> lengths, offsets;
  std::string all;
  if (here) {
    for (const auto& p : pieces) {
      offsets.push_back(count(static_cast<std::int64_t>(all.size())));
      lengths.push_back(count(static_cast<std::int64_t>(p.size())));
      all += p;
    }
  }
  int length = 0;
  check(MPI_Scatter(lengths.data(), 1, MPI_INT, &length, 1, MPI_INT, root, comm), "MPI_Scatter");
  std::string out(static_cast<std::size_t>(length), '\0');
  check(MPI_Scatterv(all.data(), lengths.data(), offsets.data(), MPI_CHAR, out.data(), length, MPI_CHAR, root, comm),
        "MPI_Scatterv");
  return out;
}

/// A personalized exchange of `n` values per rank: block r of `values` (values[r*n, (r+1)*n))
/// goes to rank r, and block r of the result came from rank r. Small metadata only.
template <class T>
[[nodiscard]] std::vector<T> all_to_all_values(std::span<const T> values, std::size_t n, MPI_Comm comm) {
  std::vector<T> out(values.size());
  const auto c = count(static_cast<std::int64_t>(n));
  check(MPI_Alltoall(values.data(), c, detail::plain_datatype<T>(), out.data(), c, detail::plain_datatype<T>(), comm),
        "MPI_Alltoall");
  return out;
}

/// Seconds on MPI's clock (MPI_Wtime), for the timings solvers and assemblies report.
[[nodiscard]] inline double wall_time() { return MPI_Wtime(); }

/// A communicator duplicated for a library object's own traffic (so its messages never match the
/// user's), freed with the last owner. Freed only while MPI is still initialized: an object that
/// outlives MPI_Finalize (a static, a matrix in main's scope) must not call MPI then.
class OwnedComm {
 public:
  OwnedComm() = default;
  explicit OwnedComm(MPI_Comm comm) : comm_(new MPI_Comm(MPI_COMM_NULL), &release) {
    check(MPI_Comm_dup(comm, comm_.get()), "MPI_Comm_dup");
  }
  [[nodiscard]] MPI_Comm get() const noexcept { return comm_ ? *comm_ : MPI_COMM_NULL; }
  operator MPI_Comm() const noexcept { return get(); }  // NOLINT(google-explicit-constructor)

 private:
  static void release(MPI_Comm* c) {
    if (!mpi_ended() && *c != MPI_COMM_NULL) MPI_Comm_free(c);
    delete c;
  }
  std::shared_ptr<MPI_Comm> comm_;
};

}  // namespace einshard::comm
