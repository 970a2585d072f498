#pragma once
/// @file
/// Assembling a `DSparseTensor`: from each rank's COO entries of any rows (`from_local`: entries
/// travel to their rows' owners, duplicates are summed) or by partitioning a matrix every rank
/// holds (`partition`). No rank ever holds the global matrix or an O(N) table in `from_local`.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/reduce.hpp"
#include "einshard/comm/sparse_exchange.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/partition.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"

namespace einshard::sparse {
namespace detail {

/// Entries a rank holds for rows it does not own travel to their owners (two sparse exchanges with
/// those owners only, and only when some rank holds such entries).
CooEntries send_to_owners(const RowLayout& layout, CooEntries t);

/// Global shape, dtype and the values' device type must be the same on every rank: a fault
/// string, empty when they agree.
std::string disagreement(MPI_Comm comm, std::array<std::int64_t, 2> shape, at::ScalarType dtype,
                         c10::DeviceType device);

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp),
// so a translation unit that only calls them neither parses nor instantiates their kernels.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE CooEntries send_to_owners(const RowLayout& layout, CooEntries t) {
  const auto mine = layout.is_owned(t.rows);
  if (!comm::any_rank(!mine.all().item<bool>(), layout.comm())) return t;
  const auto away = (~mine).nonzero().flatten();
  const auto rows = to_vector(t.rows.index_select(0, away));
  const auto cols = to_vector(t.cols.index_select(0, away));
  const auto vals = t.values.detach().index_select(0, away).contiguous();
  const auto owner = layout.owners(rows);
  const auto esize = static_cast<std::size_t>(vals.element_size());
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return owner[a] < owner[b]; });
  std::vector<comm::Parcel<std::int64_t>> idx;
  std::vector<comm::Parcel<char>> bytes;
  const auto* raw = static_cast<const char*>(vals.data_ptr());
  for (auto i : order) {
    if (idx.empty() || idx.back().peer != owner[i]) {
      idx.push_back({owner[i], {}});
      bytes.push_back({owner[i], {}});
    }
    idx.back().values.push_back(rows[i]);
    idx.back().values.push_back(cols[i]);
    bytes.back().values.insert(bytes.back().values.end(), raw + i * esize, raw + (i + 1) * esize);
  }
  const auto got_idx = comm::sparse_exchange(idx, layout.comm());
  const auto got_bytes = comm::sparse_exchange(bytes, layout.comm());
  std::vector<std::int64_t> r, c;
  std::vector<char> v;
  for (const auto& gi : got_idx)
    for (std::size_t k = 0; k < gi.values.size(); k += 2) {
      r.push_back(gi.values[k]);
      c.push_back(gi.values[k + 1]);
    }
  for (const auto& gb : got_bytes) v.insert(v.end(), gb.values.begin(), gb.values.end());
  const auto kept = mine.nonzero().flatten();
  const auto n = static_cast<std::int64_t>(r.size());
  auto received = at::empty({n}, t.values.options().requires_grad(false));
  if (n > 0) std::memcpy(received.data_ptr(), v.data(), v.size());
  return {at::cat({t.values.index_select(0, kept), received}),
          at::cat({t.rows.index_select(0, kept), at::tensor(r, at::kLong).view({n})}),
          at::cat({t.cols.index_select(0, kept), at::tensor(c, at::kLong).view({n})})};
}

EINSHARD_INLINE std::string disagreement(MPI_Comm comm, std::array<std::int64_t, 2> shape, at::ScalarType dtype,
                                         c10::DeviceType device) {
  const auto d = static_cast<std::int64_t>(dtype), e = static_cast<std::int64_t>(device);
  std::array<std::int64_t, 8> v{shape[0], -shape[0], shape[1], -shape[1], d, -d, e, -e};
  comm::all_reduce_values(std::span<std::int64_t>(v), comm::Reduction::max, comm);
  if (v[0] != -v[1] || v[2] != -v[3]) return "DSparseTensor::from_local: ranks disagree on the global shape";
  if (v[4] != -v[5]) return "DSparseTensor::from_local: ranks pass values of different dtypes";
  if (v[6] != -v[7]) return "DSparseTensor::from_local: ranks pass values on different kinds of device";
  return {};
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace detail

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE

EINSHARD_INLINE DSparseTensor DSparseTensor::from_local(const at::Tensor& values, const at::Tensor& rows, const at::Tensor& cols,
                                std::array<std::int64_t, 2> shape, const Mesh& mesh,
                                const FromLocalOptions& options) {
  if (!mesh) throw Error("DSparseTensor::from_local: needs a mesh");
  const MPI_Comm comm = mesh.comm();
  std::string fault;
  // First: the checks below read the indices, which a tensor of the meta device (no data) would
  // fail on this rank alone, leaving the others in the collective.
  if (values.is_meta() || rows.is_meta() || cols.is_meta())
    fault = "DSparseTensor::from_local: values, rows and cols must hold data, got devices " +
            std::string(c10::str(values.device(), ", ", rows.device(), ", ", cols.device()));
  else if (values.dim() != 1 || rows.dim() != 1 || cols.dim() != 1 || values.numel() != rows.numel() ||
      values.numel() != cols.numel())
    fault = "DSparseTensor::from_local: values, rows and cols must be 1-D of one length, got " +
            std::string(c10::str(values.sizes(), ", ", rows.sizes(), ", ", cols.sizes()));
  else if (!at::isFloatingType(values.scalar_type()) && !at::isComplexType(values.scalar_type()))
    fault = std::string("DSparseTensor::from_local: values must be floating point or complex, got ") +
            c10::toString(values.scalar_type());
  else if (shape[0] < 0 || shape[1] < 0)
    fault = "DSparseTensor::from_local: expected a shape of sizes >= 0, got (" + std::to_string(shape[0]) +
            ", " + std::to_string(shape[1]) + ")";
  else if (rows.numel() > 0) {
    const auto range = [&](const at::Tensor& t, const char* what, std::int64_t n) {
      const auto lo = t.min().item<std::int64_t>(), hi = t.max().item<std::int64_t>();
      if (lo < 0 || hi >= n)
        fault = std::string("DSparseTensor::from_local: ") + what + " index " +
                std::to_string(lo < 0 ? lo : hi) + " is out of range [0, " + std::to_string(n) + ")";
    };
    range(rows, "row", shape[0]);
    if (fault.empty()) range(cols, "column", shape[1]);
  }
  // Collective on every rank, faulty or not, so the checks stay matched.
  const auto differ = detail::disagreement(comm, shape, values.scalar_type(), values.device().type());
  comm::raise_if_any(comm, fault.empty() ? differ : fault);

  auto layout = options.owned_rows ? std::make_shared<const RowLayout>(*options.owned_rows, shape[0], comm)
                                   : RowLayout::simple(shape[0], comm);
  auto domain = options.owned_cols ? std::make_shared<const RowLayout>(*options.owned_cols, shape[1], comm)
                : shape[0] == shape[1] ? layout
                                       : RowLayout::simple(shape[1], comm);
  // Assembly runs on the host (routing, sorting, the halo plan); the matrix then lives on the
  // values' device, with the generic kernels' copies of its indices there.
  auto t = detail::send_to_owners(*layout, {values.cpu(), rows.cpu().to(at::kLong), cols.cpu().to(at::kLong)});
  auto out = DSparseTensor(mesh, std::move(layout), std::move(domain), std::move(t));
  if (!values.device().is_cpu()) out.place_on(values.device());
  return out;
}

EINSHARD_INLINE DSparseTensor DSparseTensor::partition(const SparseTensor& A, const Mesh& mesh, const PartitionOptions& options) {
  if (!mesh) throw Error("DSparseTensor::partition: needs a mesh");
  const MPI_Comm comm = mesh.comm();
  const auto n = A.rows();
  if (A.rows() != A.cols()) {
    if (options.method != PartitionMethod::simple || options.functions != 1)
      throw Error("DSparseTensor::partition: a rectangular matrix (" + std::to_string(A.rows()) + " x " +
                  std::to_string(A.cols()) + ") is partitioned in contiguous blocks of rows; expected method simple "
                  "and functions = 1");
    const auto [first, last] = simple_rows(n, comm);
    const auto keep = ((A.row_indices() >= first) & (A.row_indices() < last)).nonzero().flatten();
    return from_local(A.values().index_select(0, keep), A.row_indices().index_select(0, keep),
                      A.col_indices().index_select(0, keep), {n, A.cols()}, mesh);
  }
  std::string fault;
  at::Tensor ids;
  const int me = comm::rank_of(comm);
  if (me == 0) {
    try {
      ids = partition_ids(A.row_indices(), A.col_indices(), n, comm::size_of(comm), options).to(at::kLong).contiguous();
    } catch (const std::exception& e) {
      fault = e.what();
    }
  }
  comm::raise_if_any(comm, fault);
  if (me != 0) ids = at::empty({n}, at::kLong);
  comm::broadcast_values(std::span<std::int64_t>(ids.data_ptr<std::int64_t>(), static_cast<std::size_t>(n)), 0, comm);
  const auto owned = (ids == me).nonzero().flatten();
  const auto keep = (ids.index_select(0, A.row_indices()) == me).nonzero().flatten();
  return from_local(A.values().index_select(0, keep), A.row_indices().index_select(0, keep),
                    A.col_indices().index_select(0, keep), {n, A.cols()}, mesh, {.owned_rows = owned});
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
