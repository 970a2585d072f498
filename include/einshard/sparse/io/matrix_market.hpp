#pragma once
/// @file
/// Matrix Market files (NIST's exchange format, what SciPy's mmread/mmwrite, PETSc's and SuiteSparse's
/// tools read and write): coordinate and array formats; real, double, complex, integer and pattern
/// fields; general, symmetric, skew-symmetric and Hermitian symmetry.
///
/// `read_matrix_market(path)` gives a `SparseTensor` with both triangles of a symmetric file
/// expanded; `read_matrix_market(path, mesh)` a `DSparseTensor` where each rank keeps only the
/// entries of the rows it will own (the file is streamed on every rank; no rank holds the matrix);
/// `write_matrix_market` writes a `SparseTensor`. The parser runs on any `std::istream`, so a string
/// in memory (`parse_matrix_market`) is read exactly as a file is. A malformed file throws
/// `MatrixMarketError`, whose message names the source and line.

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/io/matrix_market_reader.hpp"
#include "einshard/sparse/matrix/partition.hpp"
#include "einshard/sparse/matrix/sparse_tensor.hpp"
#if EINSHARD_DEFINE_SPARSE  // only the definitions below need these
#include <fstream>
#include <sstream>
#endif

namespace einshard::sparse {

struct MatrixMarketReadOptions {
  /// Values' dtype: float32, float64, complex64 or complex128. Default: float64, or complex128 for a
  /// complex file (integer and pattern files read as float64; pattern entries are 1).
  std::optional<at::ScalarType> dtype{};
  /// Where a distributed read's matrix lives: the file is parsed and assembled on the host, then the
  /// matrix moves there as `DSparseTensor::to(device)` moves it.
  at::Device device = at::kCPU;
};

struct MatrixMarketWriteOptions {
  MatrixMarketFormat format = MatrixMarketFormat::coordinate;
  /// Default: complex for complex values, real otherwise. integer requires integral values; pattern
  /// writes only the positions (coordinate only).
  std::optional<MatrixMarketField> field{};
  /// Anything but general stores one triangle, after checking the matrix has that symmetry.
  MatrixMarketSymmetry symmetry = MatrixMarketSymmetry::general;
  std::string comment{};  ///< written as '%' lines after the banner
};

/// The header of a Matrix Market stream (banner and size line), without reading the entries.
MatrixMarketHeader read_matrix_market_header(std::istream& in, const std::string& source = "<stream>");

/// A Matrix Market stream as a SparseTensor; `source` names it in errors.
SparseTensor read_matrix_market(std::istream& in, const MatrixMarketReadOptions& o = {},
                                const std::string& source = "<stream>");

/// A Matrix Market file as a SparseTensor (both triangles of a symmetric file).
SparseTensor read_matrix_market(const std::string& path, const MatrixMarketReadOptions& o = {});

/// Matrix Market text in memory (what a fuzzer or a test feeds).
SparseTensor parse_matrix_market(std::string_view text, const MatrixMarketReadOptions& o = {});

/// A distributed read of a square matrix: every rank streams the file and keeps the entries of the
/// rows it will own. `partition.method` simple (the default) needs nothing more; any other method,
/// or simple in whole nodes (`partition.functions` > 1),
/// reads the pattern once on rank 0 to compute the partition, whose ids are broadcast (as
/// `DSparseTensor::partition` does). Collective over `mesh`: a fault on any rank (a missing file,
/// a malformed line) is the same Error on every rank.
DSparseTensor read_matrix_market(const std::string& path, const Mesh& mesh,
                                 const PartitionOptions& partition = {},
                                 const MatrixMarketReadOptions& o = {});

/// Writes `A` to a stream in Matrix Market form; values with 17 significant digits, so a float64
/// matrix reads back bit for bit.
void write_matrix_market(std::ostream& out, const SparseTensor& A, const MatrixMarketWriteOptions& o = {});

/// Writes `A` to a file (see the stream overload).
void write_matrix_market(const std::string& path, const SparseTensor& A,
                         const MatrixMarketWriteOptions& o = {});

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

inline at::ScalarType matrix_market_dtype(const MatrixMarketHeader& h, const MatrixMarketReadOptions& o,
                                          const std::string& source) {
  const bool complex = h.field == MatrixMarketField::complex;
  const auto dtype = o.dtype.value_or(complex ? at::kComplexDouble : at::kDouble);
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kComplexFloat && dtype != at::kComplexDouble)
    throw Error("read_matrix_market: dtype must be float32, float64, complex64 or complex128, got " +
                std::string(c10::toString(dtype)));
  if (complex && !at::isComplexType(dtype))
    throw MatrixMarketError(source, 0, "the file has complex values, but a real dtype (" +
                                           std::string(c10::toString(dtype)) + ") was asked for");
  return dtype;
}

inline CooEntries to_triples(MatrixMarketEntries&& e, at::ScalarType dtype) {
  const auto n = static_cast<std::int64_t>(e.rows.size());
  auto rows = at::empty({n}, at::kLong), cols = at::empty({n}, at::kLong);
  if (n > 0) {
    std::memcpy(rows.data_ptr(), e.rows.data(), sizeof(std::int64_t) * e.rows.size());
    std::memcpy(cols.data_ptr(), e.cols.data(), sizeof(std::int64_t) * e.cols.size());
  }
  auto re = at::empty({n}, at::kDouble);
  if (n > 0) std::memcpy(re.data_ptr(), e.re.data(), sizeof(double) * e.re.size());
  at::Tensor values = re;
  if (at::isComplexType(dtype)) {
    auto im = at::empty({n}, at::kDouble);
    if (n > 0) std::memcpy(im.data_ptr(), e.im.data(), sizeof(double) * e.im.size());
    values = at::complex(re, im);
  }
  return {values.to(dtype), rows, cols};
}

inline std::ifstream open_matrix_market(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw MatrixMarketError(path, 0, "cannot open the file for reading");
  return in;
}

}  // namespace detail

EINSHARD_INLINE MatrixMarketHeader read_matrix_market_header(std::istream& in, const std::string& source) {
  return detail::MatrixMarketReader(in, source).header();
}

EINSHARD_INLINE SparseTensor read_matrix_market(std::istream& in, const MatrixMarketReadOptions& o,
                                                const std::string& source) {
  detail::MatrixMarketReader reader(in, source);
  const auto h = reader.header();
  const auto dtype = detail::matrix_market_dtype(h, o, source);
  auto t = detail::to_triples(reader.read([](std::int64_t) { return true; }), dtype);
  return SparseTensor(t.values, t.rows, t.cols, {h.rows, h.cols});
}

EINSHARD_INLINE SparseTensor read_matrix_market(const std::string& path, const MatrixMarketReadOptions& o) {
  auto in = detail::open_matrix_market(path);
  return read_matrix_market(in, o, path);
}

EINSHARD_INLINE SparseTensor parse_matrix_market(std::string_view text, const MatrixMarketReadOptions& o) {
  std::istringstream in{std::string(text)};
  return read_matrix_market(in, o, "<string>");
}

EINSHARD_INLINE DSparseTensor read_matrix_market(const std::string& path, const Mesh& mesh,
                                                 const PartitionOptions& partition,
                                                 const MatrixMarketReadOptions& o) {
  if (!mesh) throw Error("read_matrix_market: a distributed read needs a mesh");
  const MPI_Comm comm = mesh.comm();
  const int me = comm::rank_of(comm), p = comm::size_of(comm);
  std::string fault;
  MatrixMarketHeader h;
  at::Tensor ids;  // partition ids, for methods other than simple (or whole nodes)
  detail::CooEntries t;
  // Step 1 (not simple): rank 0 partitions the pattern.
  const bool by_ids = partition.method != PartitionMethod::simple || partition.functions != 1;
  if (by_ids) {
    if (me == 0) {
      try {
        auto in = detail::open_matrix_market(path);
        detail::MatrixMarketReader reader(in, path);
        h = reader.header();
        auto all = detail::to_triples(reader.read([](std::int64_t) { return true; }), at::kDouble);
        if (h.rows != h.cols)
          throw Error("read_matrix_market: a distributed matrix must be square, the file is " +
                      std::to_string(h.rows) + " x " + std::to_string(h.cols));
        ids = partition_ids(all.rows, all.cols, h.rows, p, partition).to(at::kLong).contiguous();
      } catch (const std::exception& e) {
        fault = e.what();
      }
    }
    comm::raise_if_any(comm, fault);
    std::int64_t n = me == 0 ? h.rows : 0;
    comm::broadcast_values(std::span<std::int64_t>(&n, 1), 0, comm);
    if (me != 0) ids = at::empty({n}, at::kLong);
    comm::broadcast_values(std::span<std::int64_t>(ids.data_ptr<std::int64_t>(), static_cast<std::size_t>(n)), 0, comm);
  }
  // Step 2: every rank keeps its rows.
  try {
    auto in = detail::open_matrix_market(path);
    detail::MatrixMarketReader reader(in, path);
    h = reader.header();
    if (h.rows != h.cols)
      throw Error("read_matrix_market: a distributed matrix must be square, the file is " + std::to_string(h.rows) +
                  " x " + std::to_string(h.cols));
    if (ids.defined() && ids.numel() != h.rows) throw Error("read_matrix_market: " + path + " changed while being read");
    const auto dtype = detail::matrix_market_dtype(h, o, path);
    const auto [first, last] = simple_rows(h.rows, comm);
    const auto* id = ids.defined() ? ids.data_ptr<std::int64_t>() : nullptr;
    t = detail::to_triples(reader.read([&, first = first, last = last](std::int64_t i) {
                             return id ? id[i] == me : i >= first && i < last;
                           }),
                           dtype);
  } catch (const std::exception& e) {
    fault = e.what();
  }
  comm::raise_if_any(comm, fault);
  FromLocalOptions fl;
  if (ids.defined()) fl.owned_rows = (ids == me).nonzero().flatten();
  const auto read = DSparseTensor::from_local(t.values, t.rows, t.cols, {h.rows, h.cols}, mesh, fl);
  return o.device.is_cpu() ? read : read.to(o.device);
}

namespace detail {

inline const char* field_name(MatrixMarketField f) {
  switch (f) {
    case MatrixMarketField::real: return "real";
    case MatrixMarketField::complex: return "complex";
    case MatrixMarketField::integer: return "integer";
    case MatrixMarketField::pattern: return "pattern";
  }
  return "?";
}

}  // namespace detail

EINSHARD_INLINE void write_matrix_market(std::ostream& out, const SparseTensor& A, const MatrixMarketWriteOptions& o) {
  using S = MatrixMarketSymmetry;
  const bool complex = at::isComplexType(A.dtype());
  const auto field = o.field.value_or(complex ? MatrixMarketField::complex : MatrixMarketField::real);
  const bool coordinate = o.format == MatrixMarketFormat::coordinate;
  if (field == MatrixMarketField::pattern && !coordinate)
    throw Error("write_matrix_market: the pattern field needs the coordinate format");
  if (complex && field != MatrixMarketField::complex && field != MatrixMarketField::pattern)
    throw Error(std::string("write_matrix_market: complex values need the complex field, asked for ") +
                detail::field_name(field));
  if (o.symmetry == S::hermitian && field != MatrixMarketField::complex)
    throw Error("write_matrix_market: hermitian symmetry needs the complex field");
  if (o.symmetry != S::general && !A.is_square())
    throw Error("write_matrix_market: a " + std::string(detail::MatrixMarketReader::symmetry_name(o.symmetry)) +
                " matrix must be square, got " + std::to_string(A.rows()) + " x " + std::to_string(A.cols()));

  // Written from the host: a matrix on a device is copied there once.
  const auto values = A.values().detach().to(at::kComplexDouble).cpu().contiguous();
  const auto rows = A.row_indices().cpu().contiguous(), cols = A.col_indices().cpu().contiguous();
  const auto* v = values.data_ptr<c10::complex<double>>();
  const auto* r = rows.data_ptr<std::int64_t>();
  const auto* c = cols.data_ptr<std::int64_t>();
  const auto nnz = A.nnz();

  // The symmetry asked for must hold: compare A with its (conjugate, negated) transpose.
  if (o.symmetry != S::general) {
    const auto d = A.to_dense().detach().to(at::kComplexDouble);
    auto t = d.transpose(0, 1);
    if (o.symmetry == S::skew_symmetric) t = -t;
    if (o.symmetry == S::hermitian) t = t.conj();
    if (!at::equal(d, t.resolve_conj().resolve_neg()))
      throw Error("write_matrix_market: the matrix is not " +
                  std::string(detail::MatrixMarketReader::symmetry_name(o.symmetry)));
  }
  if (field == MatrixMarketField::integer)
    for (std::int64_t k = 0; k < nnz; ++k)
      if (v[k].real() != std::nearbyint(v[k].real()) || std::abs(v[k].real()) > 9.007199254740992e15)
        throw Error("write_matrix_market: the integer field needs integral values, found " +
                    std::to_string(v[k].real()));

  out << "%%MatrixMarket matrix " << (coordinate ? "coordinate" : "array") << ' ' << detail::field_name(field)
      << ' ' << detail::MatrixMarketReader::symmetry_name(o.symmetry) << '\n';
  std::istringstream comment(o.comment);
  for (std::string line; std::getline(comment, line);) out << '%' << line << '\n';

  char buf[80];
  auto value = [&](c10::complex<double> x) {
    switch (field) {
      case MatrixMarketField::pattern: return std::string();
      case MatrixMarketField::integer: std::snprintf(buf, sizeof buf, " %.0f", x.real()); break;
      case MatrixMarketField::real: std::snprintf(buf, sizeof buf, " %.17g", x.real()); break;
      case MatrixMarketField::complex: std::snprintf(buf, sizeof buf, " %.17g %.17g", x.real(), x.imag()); break;
    }
    return std::string(buf);
  };
  // Stored: the lower triangle (strictly, when skew-symmetric) unless general.
  auto stored = [&](std::int64_t i, std::int64_t j) {
    return o.symmetry == S::general || i > j || (i == j && o.symmetry != S::skew_symmetric);
  };
  if (coordinate) {
    std::int64_t count = 0;
    for (std::int64_t k = 0; k < nnz; ++k) count += stored(r[k], c[k]) ? 1 : 0;
    out << A.rows() << ' ' << A.cols() << ' ' << count << '\n';
    for (std::int64_t k = 0; k < nnz; ++k)
      if (stored(r[k], c[k])) out << r[k] + 1 << ' ' << c[k] + 1 << value(v[k]) << '\n';
    return;
  }
  out << A.rows() << ' ' << A.cols() << '\n';
  const auto dense = A.to_dense().detach().to(at::kComplexDouble).cpu().contiguous();
  const auto* dv = dense.data_ptr<c10::complex<double>>();
  for (std::int64_t j = 0; j < A.cols(); ++j)
    for (std::int64_t i = 0; i < A.rows(); ++i)
      if (stored(i, j)) out << value(dv[i * A.cols() + j]).substr(1) << '\n';
}

EINSHARD_INLINE void write_matrix_market(const std::string& path, const SparseTensor& A,
                                         const MatrixMarketWriteOptions& o) {
  std::ofstream out(path);
  if (!out) throw Error("write_matrix_market: cannot open '" + path + "' for writing");
  write_matrix_market(out, A, o);
  out.flush();
  if (!out) throw Error("write_matrix_market: writing '" + path + "' failed");
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
