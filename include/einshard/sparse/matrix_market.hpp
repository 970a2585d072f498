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
#include <fstream>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/dsparse_tensor.hpp"
#include "einshard/sparse/layout.hpp"
#include "einshard/sparse/partition.hpp"
#include "einshard/sparse/sparse_tensor.hpp"

namespace einshard::sparse {

/// A malformed Matrix Market file. `line()` is 1-based (0 when the fault is not on one line).
class MatrixMarketError : public Error {
 public:
  MatrixMarketError(const std::string& source, std::size_t line, const std::string& message)
      : Error("read_matrix_market: " + source + (line ? ":" + std::to_string(line) : std::string()) + ": " +
              message),
        line_(line) {}
  [[nodiscard]] std::size_t line() const noexcept { return line_; }

 private:
  std::size_t line_;
};

enum class MatrixMarketFormat { coordinate, array };
enum class MatrixMarketField { real, complex, integer, pattern };
enum class MatrixMarketSymmetry { general, symmetric, skew_symmetric, hermitian };

/// The banner and size line of a file.
struct MatrixMarketHeader {
  MatrixMarketFormat format = MatrixMarketFormat::coordinate;
  MatrixMarketField field = MatrixMarketField::real;
  MatrixMarketSymmetry symmetry = MatrixMarketSymmetry::general;
  std::int64_t rows = 0, cols = 0;
  std::int64_t entries = 0;  ///< stored entries: nnz of a coordinate file, rows*cols (or a triangle) of an array
};

struct MatrixMarketReadOptions {
  /// Values' dtype: float32, float64, complex64 or complex128. Default: float64, or complex128 for a
  /// complex file (integer and pattern files read as float64; pattern entries are 1).
  std::optional<at::ScalarType> dtype{};
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

namespace detail {

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline std::vector<std::string_view> tokens(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const auto b = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > b) out.push_back(line.substr(b, i - b));
  }
  return out;
}

/// Entries of one file, already expanded to both triangles, 0-based, filtered by row.
struct MatrixMarketEntries {
  std::vector<std::int64_t> rows, cols;
  std::vector<double> re, im;
};

/// Streams one file: the header on construction, the entries on `read`. Every fault throws
/// MatrixMarketError naming the line.
class MatrixMarketReader {
 public:
  MatrixMarketReader(std::istream& in, std::string source) : in_(in), source_(std::move(source)) {
    std::string line;
    if (!next(line)) fail("empty input: expected the banner '%%MatrixMarket matrix <format> <field> <symmetry>'");
    const auto t = tokens(line);
    if (t.size() != 5 || lower(t[0]) != "%%matrixmarket")
      fail("expected the banner '%%MatrixMarket matrix <format> <field> <symmetry>', found '" + line + "'");
    if (lower(t[1]) != "matrix") fail("only 'matrix' objects are supported, found '" + std::string(t[1]) + "'");
    const auto format = lower(t[2]), field = lower(t[3]), symmetry = lower(t[4]);
    if (format == "coordinate") h_.format = MatrixMarketFormat::coordinate;
    else if (format == "array") h_.format = MatrixMarketFormat::array;
    else fail("format must be coordinate or array, found '" + std::string(t[2]) + "'");
    if (field == "real" || field == "double") h_.field = MatrixMarketField::real;
    else if (field == "complex") h_.field = MatrixMarketField::complex;
    else if (field == "integer") h_.field = MatrixMarketField::integer;
    else if (field == "pattern") h_.field = MatrixMarketField::pattern;
    else fail("field must be real, double, complex, integer or pattern, found '" + std::string(t[3]) + "'");
    if (symmetry == "general") h_.symmetry = MatrixMarketSymmetry::general;
    else if (symmetry == "symmetric") h_.symmetry = MatrixMarketSymmetry::symmetric;
    else if (symmetry == "skew-symmetric") h_.symmetry = MatrixMarketSymmetry::skew_symmetric;
    else if (symmetry == "hermitian") h_.symmetry = MatrixMarketSymmetry::hermitian;
    else fail("symmetry must be general, symmetric, skew-symmetric or hermitian, found '" + std::string(t[4]) + "'");
    if (h_.field == MatrixMarketField::pattern && h_.format == MatrixMarketFormat::array)
      fail("an array file cannot have the pattern field");
    if (h_.symmetry == MatrixMarketSymmetry::hermitian && h_.field != MatrixMarketField::complex)
      fail("hermitian symmetry needs the complex field, found '" + std::string(t[3]) + "'");

    // Comments, then the size line.
    do {
      if (!next(line)) fail("end of input: expected the size line");
    } while (skippable(line));
    const auto s = tokens(line);
    const std::size_t want = h_.format == MatrixMarketFormat::coordinate ? 3 : 2;
    if (s.size() != want)
      fail(std::string("expected the size line '") + (want == 3 ? "rows cols nnz" : "rows cols") + "', found '" +
           line + "'");
    h_.rows = integer(s[0], "rows");
    h_.cols = integer(s[1], "cols");
    if (h_.symmetry != MatrixMarketSymmetry::general && h_.rows != h_.cols)
      fail("a " + symmetry + " matrix must be square, found " + std::to_string(h_.rows) + " x " +
           std::to_string(h_.cols));
    // Sizes whose element count does not fit in int64 are refused before anything multiplies them.
    constexpr std::int64_t limit = std::int64_t{1} << 31;
    if (h_.rows >= limit || h_.cols >= limit)
      fail("a matrix of " + std::to_string(h_.rows) + " x " + std::to_string(h_.cols) +
           " is larger than supported (each dimension below 2^31)");
    if (h_.format == MatrixMarketFormat::coordinate) {
      h_.entries = integer(s[2], "nnz");
    } else {
      const auto n = h_.rows;
      h_.entries = h_.symmetry == MatrixMarketSymmetry::general          ? h_.rows * h_.cols
                   : h_.symmetry == MatrixMarketSymmetry::skew_symmetric ? n * std::max<std::int64_t>(n - 1, 0) / 2
                                                                         : n * (n + 1) / 2;
    }
  }

  [[nodiscard]] const MatrixMarketHeader& header() const { return h_; }

  /// Reads every entry; keeps those (after symmetric expansion) whose 0-based row passes `keep`.
  /// Zeros of an array file are not stored.
  MatrixMarketEntries read(const std::function<bool(std::int64_t)>& keep) {
    MatrixMarketEntries out;
    const bool complex = h_.field == MatrixMarketField::complex;
    const bool coordinate = h_.format == MatrixMarketFormat::coordinate;
    const std::size_t values = h_.field == MatrixMarketField::pattern ? 0 : complex ? 2 : 1;
    const std::size_t width = (coordinate ? 2 : 0) + values;
    auto push = [&](std::int64_t i, std::int64_t j, double re, double im) {
      if (!keep(i)) return;
      out.rows.push_back(i);
      out.cols.push_back(j);
      out.re.push_back(re);
      out.im.push_back(im);
    };
    // Array files run down the columns, over the stored triangle only.
    std::int64_t ai = 0, aj = 0;
    const auto sym = h_.symmetry;
    const std::int64_t first_row_offset = sym == MatrixMarketSymmetry::general ? -1 : sym == MatrixMarketSymmetry::skew_symmetric ? 1 : 0;
    auto array_start = [&](std::int64_t j) { return first_row_offset < 0 ? 0 : j + first_row_offset; };
    if (!coordinate) {
      while (aj < h_.cols && array_start(aj) >= h_.rows) ++aj;
      if (aj < h_.cols) ai = array_start(aj);
    }
    std::string line;
    for (std::int64_t k = 0; k < h_.entries; ++k) {
      do {
        if (!next(line))
          fail("end of input after " + std::to_string(k) + " of " + std::to_string(h_.entries) +
               " entries (truncated file?)");
      } while (skippable(line));
      const auto t = tokens(line);
      if (t.size() != width)
        fail("expected " + std::to_string(width) + " number(s) per entry, found " + std::to_string(t.size()) +
             ": '" + line + "'");
      std::int64_t i = 0, j = 0;
      if (coordinate) {
        i = integer(t[0], "row index") - 1;
        j = integer(t[1], "column index") - 1;
        if (i < 0 || i >= h_.rows || j < 0 || j >= h_.cols)
          fail("entry (" + std::string(t[0]) + ", " + std::string(t[1]) + ") is out of range: the matrix is " +
               std::to_string(h_.rows) + " x " + std::to_string(h_.cols) + " (indices are 1-based)");
        if (sym != MatrixMarketSymmetry::general && j > i)
          fail("entry (" + std::string(t[0]) + ", " + std::string(t[1]) + ") is above the diagonal; a " +
               std::string(symmetry_name(sym)) + " file stores the lower triangle only");
        if (sym == MatrixMarketSymmetry::skew_symmetric && i == j)
          fail("entry (" + std::string(t[0]) + ", " + std::string(t[1]) +
               ") is on the diagonal, which a skew-symmetric file does not store");
      } else {
        i = ai;
        j = aj;
        if (++ai == h_.rows) {
          ++aj;
          while (aj < h_.cols && array_start(aj) >= h_.rows) ++aj;
          ai = aj < h_.cols ? array_start(aj) : 0;
        }
      }
      const std::size_t v = coordinate ? 2 : 0;
      double re = 1, im = 0;
      if (values > 0) {
        re = h_.field == MatrixMarketField::integer ? static_cast<double>(integer(t[v], "value", true))
                                                    : real(t[v]);
        if (complex) im = real(t[v + 1]);
      }
      if (sym == MatrixMarketSymmetry::hermitian && i == j && im != 0)
        fail("a hermitian matrix has a real diagonal, found imaginary part " + std::string(t[v + 1]));
      if (!coordinate && re == 0 && im == 0) continue;
      push(i, j, re, im);
      if (i != j) {
        switch (sym) {
          case MatrixMarketSymmetry::general: break;
          case MatrixMarketSymmetry::symmetric: push(j, i, re, im); break;
          case MatrixMarketSymmetry::skew_symmetric: push(j, i, -re, -im); break;
          case MatrixMarketSymmetry::hermitian: push(j, i, re, -im); break;
        }
      }
    }
    while (next(line))
      if (!skippable(line))
        fail("data after the " + std::to_string(h_.entries) + " entries the header announces: '" + line + "'");
    return out;
  }

  static const char* symmetry_name(MatrixMarketSymmetry s) {
    switch (s) {
      case MatrixMarketSymmetry::general: return "general";
      case MatrixMarketSymmetry::symmetric: return "symmetric";
      case MatrixMarketSymmetry::skew_symmetric: return "skew-symmetric";
      case MatrixMarketSymmetry::hermitian: return "hermitian";
    }
    return "?";
  }

 private:
  bool next(std::string& line) {
    if (!std::getline(in_, line)) return false;
    ++line_;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // files written on Windows
    return true;
  }
  static bool skippable(const std::string& line) {
    const auto t = tokens(line);
    return t.empty() || t[0][0] == '%';
  }
  [[noreturn]] void fail(const std::string& message) const { throw MatrixMarketError(source_, line_, message); }

  std::int64_t integer(std::string_view s, const char* what, bool negative = false) const {
    std::int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size() || (!negative && v < 0))
      fail(std::string("expected ") + (negative ? "an integer " : "a non-negative integer ") + what + ", found '" +
           std::string(s) + "'");
    return v;
  }
  double real(std::string_view s) const {
    // strtod rather than from_chars<double>: the latter is missing from some standard libraries
    // still in use (GCC < 11).
    const std::string text(s);
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || text.empty())
      fail("expected a number, found '" + text + "'");
    return v;
  }

  std::istream& in_;
  std::string source_;
  std::size_t line_ = 0;
  MatrixMarketHeader h_;
};

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

inline Triples to_triples(MatrixMarketEntries&& e, at::ScalarType dtype) {
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

/// The header of a Matrix Market stream (banner and size line), without reading the entries.
inline MatrixMarketHeader read_matrix_market_header(std::istream& in, const std::string& source = "<stream>") {
  return detail::MatrixMarketReader(in, source).header();
}

/// A Matrix Market stream as a SparseTensor; `source` names it in errors.
inline SparseTensor read_matrix_market(std::istream& in, const MatrixMarketReadOptions& o = {},
                                       const std::string& source = "<stream>") {
  detail::MatrixMarketReader reader(in, source);
  const auto h = reader.header();
  const auto dtype = detail::matrix_market_dtype(h, o, source);
  auto t = detail::to_triples(reader.read([](std::int64_t) { return true; }), dtype);
  return SparseTensor(t.values, t.rows, t.cols, {h.rows, h.cols});
}

/// A Matrix Market file as a SparseTensor (both triangles of a symmetric file).
inline SparseTensor read_matrix_market(const std::string& path, const MatrixMarketReadOptions& o = {}) {
  auto in = detail::open_matrix_market(path);
  return read_matrix_market(in, o, path);
}

/// Matrix Market text in memory (what a fuzzer or a test feeds).
inline SparseTensor parse_matrix_market(std::string_view text, const MatrixMarketReadOptions& o = {}) {
  std::istringstream in{std::string(text)};
  return read_matrix_market(in, o, "<string>");
}

/// A distributed read of a square matrix: every rank streams the file and keeps the entries of the
/// rows it will own. `partition.method` simple (the default) needs nothing more; any other method
/// reads the pattern once on rank 0 to compute the partition, whose ids are broadcast (as
/// `DSparseTensor::partition` does). Collective over `mesh`: a fault on any rank (a missing file,
/// a malformed line) is the same Error on every rank.
inline DSparseTensor read_matrix_market(const std::string& path, const Mesh& mesh,
                                        const PartitionOptions& partition = {},
                                        const MatrixMarketReadOptions& o = {}) {
  if (!mesh) throw Error("read_matrix_market: a distributed read needs a mesh");
  const MPI_Comm comm = mesh.comm();
  const int me = comm::rank_of(comm), p = comm::size_of(comm);
  std::string fault;
  MatrixMarketHeader h;
  at::Tensor ids;  // partition ids, for methods other than simple
  detail::Triples t;
  // Step 1 (not simple): rank 0 partitions the pattern.
  if (partition.method != PartitionMethod::simple) {
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
    comm::check(MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm), "MPI_Bcast");
    if (me != 0) ids = at::empty({n}, at::kLong);
    comm::check(MPI_Bcast(ids.data_ptr(), comm::count(n), MPI_INT64_T, 0, comm), "MPI_Bcast");
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
  return DSparseTensor::from_local(t.values, t.rows, t.cols, {h.rows, h.cols}, mesh, fl);
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

/// Writes `A` to a stream in Matrix Market form; values with 17 significant digits, so a float64
/// matrix reads back bit for bit.
inline void write_matrix_market(std::ostream& out, const SparseTensor& A, const MatrixMarketWriteOptions& o = {}) {
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

  const auto values = A.values().detach().to(at::kComplexDouble).contiguous();
  const auto rows = A.row_indices().contiguous(), cols = A.col_indices().contiguous();
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
  const auto dense = A.to_dense().detach().to(at::kComplexDouble).contiguous();
  const auto* dv = dense.data_ptr<c10::complex<double>>();
  for (std::int64_t j = 0; j < A.cols(); ++j)
    for (std::int64_t i = 0; i < A.rows(); ++i)
      if (stored(i, j)) out << value(dv[i * A.cols() + j]).substr(1) << '\n';
}

/// Writes `A` to a file (see the stream overload).
inline void write_matrix_market(const std::string& path, const SparseTensor& A,
                                const MatrixMarketWriteOptions& o = {}) {
  std::ofstream out(path);
  if (!out) throw Error("write_matrix_market: cannot open '" + path + "' for writing");
  write_matrix_market(out, A, o);
  out.flush();
  if (!out) throw Error("write_matrix_market: writing '" + path + "' failed");
}

}  // namespace einshard::sparse
