// libFuzzer target: the readers of DSparseTensor::save's format (sparse/io/format.hpp): the
// metadata text and the partition files, from bytes in memory, as DSparseTensor::load checks them
// (whole here; the load feeds the same checker chunk by chunk) (the checksum is computed here from
// the bytes, so damaged contents reach the structural checks rather than stopping at a checksum
// mismatch).
//
// Input: one selector byte (bit 0: metadata or partition), then for a partition the expected (id, parts, m, n, rows, nnz, value size) as small numbers, then the
// file's bytes. Every accepted partition is walked as load walks it (every index it will trust
// read back and bounded), so an unchecked count or offset shows as an ASan report.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/sparse/io/format.hpp"

namespace d = einshard::sparse::detail;

namespace {
[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_sparse_io: invariant broken: %s\n", what);
  std::abort();
}

std::int64_t index_at(const std::vector<unsigned char>& b, const d::PartitionSections::Span& s, std::int64_t size,
                      std::int64_t i) {
  if (s.begin + (i + 1) * size > static_cast<std::int64_t>(b.size())) broken("a section reaches past the file");
  return d::io_check::index(b.data(), s, size, i);
}

void walk(const std::vector<unsigned char>& b, const d::PartitionHeader& h, const d::PartitionSections& s) {
  const auto width = h.domain_owned() + h.G;
  for (std::int64_t r = 0; r < h.R; ++r) {
    const auto lo = index_at(b, s.rowptr, h.rowptr_size, r), hi = index_at(b, s.rowptr, h.rowptr_size, r + 1);
    if (lo < 0 || hi < lo || hi > h.K) broken("accepted row pointers out of order");
    for (auto k = lo; k < hi; ++k) {
      const auto c = index_at(b, s.col, h.col_size, k);
      if (c < 0 || c >= width) broken("accepted a column outside the local width");
    }
  }
  for (std::int64_t i = 0; i < h.S; ++i)
    if (const auto v = index_at(b, s.send_rows, 8, i); v < 0 || v >= h.domain_owned()) broken("accepted a send row");
  for (std::int64_t i = 0; i < h.G; ++i)
    if (const auto v = index_at(b, s.ghosts, 8, i); v < 0 || v >= h.n) broken("accepted a ghost out of range");
  if (s.values.begin + s.values.bytes != static_cast<std::int64_t>(b.size())) broken("values do not end the file");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const auto selector = data[0];
  ++data;
  --size;
  if ((selector & 1) == 0) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
      const auto m = d::parse_metadata(text, "<fuzz>");
      if (m.parts.empty() || m.value_size <= 0 || m.m < 0 || m.n < 0) broken("accepted metadata without parts");
      for (std::size_t i = 0; i < m.parts.size(); ++i)
        if (m.parts[i].id != static_cast<std::int64_t>(i) || m.parts[i].file.find('/') != std::string::npos)
          broken("accepted a bad partition line");
      // What save writes parses back to the same.
      const auto again = d::parse_metadata(d::metadata_text(m.m, m.n, m.dtype, m.parts), "<fuzz>");
      if (again.parts.size() != m.parts.size() || again.m != m.m || again.n != m.n) broken("metadata round trip");
    } catch (const einshard::Error& e) {
      if (std::string(e.what()).find("<fuzz>") == std::string::npos) broken("a metadata error without the source");
    }
    return 0;
  }
  if (size < 7) return 0;
  constexpr std::array<std::int64_t, 4> value_sizes{2, 4, 8, 16};
  const d::PartitionExpect want{data[0] % 4,       1 + data[1] % 4,      data[2] % 64,         data[3] % 64,
                                data[4] % 64,      data[5],              value_sizes[data[6] % 4]};
  const std::vector<unsigned char> file(data + 7, data + size);
  const auto bytes = static_cast<std::int64_t>(file.size());
  if (d::checksum_of(file.data(), bytes).size() != 16) broken("a checksum of another length");
  d::PartitionSections s;
  d::PartitionHeader h;
  if (d::check_partition(file.data(), bytes, want, h, s).empty()) walk(file, h, s);
  // Fed in pieces (as the load's read loop does), the checker reaches the same verdict.
  d::PartitionCheck pieces(want, bytes);
  std::string fault;
  for (std::int64_t done = 0; done < bytes && fault.empty();) {
    done = std::min(bytes, done + 1 + data[0] % 61);
    fault = pieces.feed(file.data(), done);
  }
  if (bytes == 0) fault = pieces.feed(file.data(), 0);
  if (fault != d::check_partition(file.data(), bytes, want, h, s)) broken("chunked and whole checks disagree");
  return 0;
}
