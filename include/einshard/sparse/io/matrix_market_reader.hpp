#pragma once
/// @file
/// The Matrix Market reader itself: the banner, the size line and the entries of any
/// `std::istream`, checked line by line (every fault a `MatrixMarketError` naming the line).
/// Without LibTorch or MPI, so the libFuzzer target links it alone; matrix_market.hpp turns the
/// entries into tensors.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"

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

}  // namespace detail

}  // namespace einshard::sparse
