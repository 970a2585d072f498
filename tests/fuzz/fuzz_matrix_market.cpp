// libFuzzer target: the Matrix Market reader (sparse/io/matrix_market_reader.hpp, the parser under
// read_matrix_market and parse_matrix_market) on arbitrary text. It must either throw
// MatrixMarketError (an es::Error whose line number lies inside the input) or give entries whose
// indices lie inside the announced shape, one value pair per entry, no more entries than the
// header allows (twice that for a symmetric file, whose off-diagonal entries are mirrored).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "einshard/error.hpp"
#include "einshard/sparse/io/matrix_market_reader.hpp"

namespace sp = einshard::sparse;

namespace {
[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_matrix_market: invariant broken: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::size_t lines = 1;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  std::istringstream in(text);
  try {
    sp::detail::MatrixMarketReader reader(in, "<fuzz>");
    const auto h = reader.header();
    if (h.rows < 0 || h.cols < 0 || h.entries < 0) broken("negative sizes in an accepted header");
    // Keep every other row: the filter of the distributed read must not change what is checked.
    const auto e = reader.read([](std::int64_t i) { return i % 2 == 0 || i % 3 == 0; });
    const auto n = e.rows.size();
    if (e.cols.size() != n || e.re.size() != n || e.im.size() != n) broken("entry arrays of different lengths");
    if (static_cast<std::int64_t>(n) > 2 * h.entries) broken("more entries than the header allows");
    for (std::size_t k = 0; k < n; ++k) {
      if (e.rows[k] < 0 || e.rows[k] >= h.rows || e.cols[k] < 0 || e.cols[k] >= h.cols) broken("entry out of range");
      if (!(e.rows[k] % 2 == 0 || e.rows[k] % 3 == 0)) broken("an entry the filter rejected");
    }
  } catch (const sp::MatrixMarketError& err) {
    if (err.line() > lines) broken("the error names a line past the input");
    if (std::string(err.what()).find("<fuzz>") == std::string::npos) broken("the error does not name the source");
  } catch (const einshard::Error&) {
    broken("an einshard::Error that is not a MatrixMarketError");
  }
  return 0;
}
