#pragma once
/// @file
/// The on-disk format of `DSparseTensor::save`, parsed and checked from bytes in memory, without
/// LibTorch or MPI (so the libFuzzer targets link it alone). io.hpp does the files and the
/// collectives around it.
///
/// Metadata `metadata.txt` (text):
///   `einshard-dsparse <version>` / `shape <m> <n>` / `dtype <name>` / `partitions <P>` /
///   one line per partition: `partition <id> <file> <rows> <nnz> <bytes> <checksum hex>`.
///
/// Partition file, version 2 (native byte order): the rank's local CSR and its halo plan exactly as
/// the matrix holds them, so a load at the saved world size maps them back without assembly.
///   8 bytes "ESDSPART", int64 header[16] (see `PartitionHeader`), then sections, each starting at
///   a multiple of 16 bytes: owned rows[R] (global, ascending), owned columns[C] (only when the
///   domain is partitioned apart from the rows, C >= 0), ghosts[G] (global, in halo order), receive
///   neighbours[NR] and send neighbours[NS] as (rank, count) int64 pairs, send rows[S] (local),
///   rowptr[R + 1], col[K] (local: owned columns first, then ghost slots), values[K]. The index
///   sections keep the widths the matrix uses (4 or 8 bytes, named in the header).
/// Version 1 (still read): 8 bytes magic, int64 version, id, parts, n, R, K, then int64 owned[R],
/// rows[K], cols[K] (global COO), values[K]; its checksum is the one-lane form of `Checksum`.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <istream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"

namespace einshard::sparse::detail {

inline constexpr std::int64_t file_version = 2;
inline constexpr std::array<char, 8> partition_magic{'E', 'S', 'D', 'S', 'P', 'A', 'R', 'T'};
inline constexpr const char* metadata_name = "metadata.txt";
inline constexpr std::int64_t header_words = 16;
inline constexpr std::int64_t section_alignment = 16;  // complex128 values view in place

inline std::string partition_file_name(std::int64_t id) { return "partition_" + std::to_string(id) + ".bin"; }

/// Bytes per value of a dtype name of the metadata; 0 for an unknown name.
inline std::int64_t dtype_size(std::string_view name) {
  if (name == "float16" || name == "bfloat16") return 2;
  if (name == "float32") return 4;
  if (name == "float64" || name == "complex64") return 8;
  if (name == "complex128") return 16;
  return 0;
}

/// A streaming 64-bit checksum over 8-byte words (xor-multiply-shift, the tail zero-padded). Version
/// 2 mixes four interleaved lanes (word i into lane i mod 4) so the multiplies do not wait on each
/// other: about 4x the one-lane speed, well above what a read() delivers from the page cache.
/// Not cryptographic: it detects damage, not tampering.
class Checksum {
 public:
  explicit Checksum(int lanes = 4) : lanes_(lanes == 1 ? 1 : 4) { h_.fill(seed); }
  void update(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    bytes_ += size;
    while (size > 0 && fill_ > 0) {  // finish a word left over from the last call
      pending_[fill_++] = *p++;
      --size;
      if (fill_ == 8) {
        word(load(pending_.data()));
        fill_ = 0;
      }
    }
    for (; size >= 8 && next_ != 0; p += 8, size -= 8) word(load(p));
    if (lanes_ == 4)
      for (; size >= 32; p += 32, size -= 32) {
        h_[0] = mix(h_[0], load(p));
        h_[1] = mix(h_[1], load(p + 8));
        h_[2] = mix(h_[2], load(p + 16));
        h_[3] = mix(h_[3], load(p + 24));
      }
    for (; size >= 8; p += 8, size -= 8) word(load(p));
    for (; size > 0; --size) pending_[fill_++] = *p++;
  }
  [[nodiscard]] std::uint64_t value() const {
    auto c = *this;
    if (c.fill_ > 0) {
      std::fill(c.pending_.begin() + static_cast<std::ptrdiff_t>(c.fill_), c.pending_.end(), 0);
      c.word(load(c.pending_.data()));
    }
    auto h = c.h_[0];
    for (int i = 1; i < lanes_; ++i) h = mix(h, c.h_[static_cast<std::size_t>(i)]);
    return mix(h, c.bytes_);
  }

 private:
  static constexpr std::uint64_t seed = 0xcbf29ce484222325ULL;
  static std::uint64_t load(const unsigned char* p) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  }
  static std::uint64_t mix(std::uint64_t h, std::uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
  }
  void word(std::uint64_t w) {
    h_[next_] = mix(h_[next_], w);
    next_ = (next_ + 1) % static_cast<std::size_t>(lanes_);
  }
  int lanes_;
  std::array<std::uint64_t, 4> h_{};
  std::size_t next_ = 0;
  std::uint64_t bytes_ = 0;
  std::array<unsigned char, 8> pending_{};
  std::size_t fill_ = 0;
};

inline std::string hex(std::uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

/// What the metadata lists for a partition.
struct PartitionEntry {
  std::int64_t id = 0, rows = 0, nnz = 0, bytes = 0;
  std::string file, checksum;
};

/// The parsed metadata of a saved matrix.
struct Metadata {
  std::int64_t version = 0, m = 0, n = 0;
  std::string dtype;
  std::int64_t value_size = 0;
  std::vector<PartitionEntry> parts;
};

inline std::string metadata_text(std::int64_t m, std::int64_t n, const std::string& dtype,
                                 const std::vector<PartitionEntry>& parts) {
  std::ostringstream s;
  s << "einshard-dsparse " << file_version << "\nshape " << m << ' ' << n << "\ndtype " << dtype << "\npartitions "
    << parts.size() << '\n';
  for (const auto& e : parts)
    s << "partition " << e.id << ' ' << e.file << ' ' << e.rows << ' ' << e.nnz << ' ' << e.bytes << ' '
      << e.checksum << '\n';
  return s.str();
}

/// The metadata of `text` (read from `where`), or an Error naming `where`. Versions 1 and 2.
inline Metadata parse_metadata(const std::string& text, const std::string& where) {
  std::istringstream s(text);
  Metadata m;
  std::string word;
  std::int64_t count = -1;
  const auto bad = [&](const std::string& what) { return Error("DSparseTensor::load: " + where + ": expected " + what); };
  if (!(s >> word >> m.version) || word != "einshard-dsparse")
    throw bad("a metadata file starting 'einshard-dsparse <version>'");
  if (m.version != 1 && m.version != file_version)
    throw Error("DSparseTensor::load: " + where + ": format version " + std::to_string(m.version) +
                " is not supported, expected version 1 or " + std::to_string(file_version));
  if (!(s >> word >> m.m >> m.n) || word != "shape" || m.m < 0 || m.n < 0 || (m.version == 1 && m.m != m.n))
    throw bad(m.version == 1 ? "'shape <n> <n>' of a square matrix" : "'shape <m> <n>' with sizes >= 0");
  if (!(s >> word >> m.dtype) || word != "dtype") throw bad("'dtype <name>'");
  m.value_size = dtype_size(m.dtype);
  if (m.value_size == 0)
    throw bad("a dtype of float32, float64, float16, bfloat16, complex64 or complex128, found '" + m.dtype + "'");
  // A count is bounded by the text (one line per partition), so a damaged count cannot reserve memory.
  if (!(s >> word >> count) || word != "partitions" || count < 1 || count > static_cast<std::int64_t>(text.size()))
    throw bad("'partitions <P>' with P >= 1");
  for (std::int64_t i = 0; i < count; ++i) {
    PartitionEntry e;
    if (!(s >> word >> e.id >> e.file >> e.rows >> e.nnz >> e.bytes >> e.checksum) || word != "partition" ||
        e.id != i || e.rows < 0 || e.nnz < 0 || e.bytes < 0 || e.file.find('/') != std::string::npos ||
        e.file == ".." || e.file == ".")
      throw bad(std::to_string(count) + " partition lines, found a bad line for partition " + std::to_string(i));
    m.parts.push_back(std::move(e));
  }
  return m;
}

/// The fixed header of a version-2 partition file, the word order on disk.
struct PartitionHeader {
  std::int64_t version = 0, id = 0, parts = 0, m = 0, n = 0;
  std::int64_t R = 0;   ///< owned rows
  std::int64_t C = -1;  ///< owned columns when the domain has its own partition, else -1
  std::int64_t G = 0;   ///< ghosts
  std::int64_t K = 0;   ///< stored entries
  std::int64_t NR = 0, NS = 0;  ///< receive / send neighbours
  std::int64_t S = 0;           ///< send rows
  std::int64_t rowptr_size = 8, col_size = 4, value_size = 8;
  std::int64_t reserved = 0;
  [[nodiscard]] std::array<std::int64_t, header_words> words() const {
    return {version, id, parts, m, n, R, C, G, K, NR, NS, S, rowptr_size, col_size, value_size, reserved};
  }
  static PartitionHeader of(const std::int64_t* w) {
    return {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15]};
  }
  /// Columns of the domain this rank owns.
  [[nodiscard]] std::int64_t domain_owned() const { return C < 0 ? R : C; }
};

/// Byte offsets of a partition file's sections (each [begin, begin + bytes)), and its total size.
struct PartitionSections {
  struct Span {
    std::int64_t begin = 0, bytes = 0;
  };
  Span owned, owned_cols, ghosts, recv, send, send_rows, rowptr, col, values;
  std::int64_t total = 0;
};

/// The sections of a file with header `h`; false when a count is negative or the sizes overflow
/// `limit` bytes (the file's size: a damaged count cannot ask for more than the file holds).
inline bool sections_of(const PartitionHeader& h, std::int64_t limit, PartitionSections& s) {
  std::int64_t at = 8 + header_words * 8;
  bool ok = true;
  const auto next = [&](PartitionSections::Span& span, std::int64_t count, std::int64_t size) {
    if (count < 0 || size <= 0 || count > limit / size) {
      ok = false;
      return;
    }
    at = (at + section_alignment - 1) / section_alignment * section_alignment;
    span = {at, count * size};
    at += span.bytes;
    if (at > limit) ok = false;
  };
  next(s.owned, h.R, 8);
  next(s.owned_cols, std::max<std::int64_t>(h.C, 0), 8);
  next(s.ghosts, h.G, 8);
  next(s.recv, h.NR, 16);
  next(s.send, h.NS, 16);
  next(s.send_rows, h.S, 8);
  next(s.rowptr, h.R + 1, h.rowptr_size);
  next(s.col, h.K, h.col_size);
  next(s.values, h.K, h.value_size);
  s.total = at;
  return ok;
}

/// What a partition file must agree with: its metadata line and the matrix's.
struct PartitionExpect {
  std::int64_t id = 0, parts = 0, m = 0, n = 0, rows = 0, nnz = 0, value_size = 0;
};

namespace io_check {
template <class T>
T at(const unsigned char* data, std::int64_t offset, std::int64_t i) {
  T v;
  std::memcpy(&v, data + offset + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
  return v;
}
/// An index section as int64, whatever its width on disk.
inline std::int64_t index(const unsigned char* data, const PartitionSections::Span& s, std::int64_t size,
                          std::int64_t i) {
  return size == 4 ? at<std::int32_t>(data, s.begin, i) : at<std::int64_t>(data, s.begin, i);
}
/// Strictly ascending, inside [0, n).
inline bool ascending_in(const unsigned char* data, const PartitionSections::Span& s, std::int64_t n) {
  std::int64_t last = -1;
  for (std::int64_t i = 0; i < s.bytes / 8; ++i) {
    const auto v = at<std::int64_t>(data, s.begin, i);
    if (v <= last || v >= n) return false;
    last = v;
  }
  return true;
}
}  // namespace io_check

/// Checks the bytes of a version-2 partition file (the checksum already matched) against `want`:
/// the header, every count, the order and range of every index the load trusts (ascending owned
/// rows, ghosts that are not owned and ascending per neighbour, neighbours distinct and not itself,
/// row pointers from 0 to K, columns strictly ascending in each row and inside the local width).
/// Fills `h` and `s` and returns "" when the file is sound, else what is wrong.
inline std::string check_partition(const unsigned char* data, std::int64_t size, const PartitionExpect& want,
                                   PartitionHeader& h, PartitionSections& s) {
  using io_check::at;
  if (size < 8 + header_words * 8 || std::memcmp(data, partition_magic.data(), 8) != 0)
    return "is not a partition file";
  std::array<std::int64_t, header_words> w{};
  std::memcpy(w.data(), data + 8, sizeof w);
  h = PartitionHeader::of(w.data());
  if (h.version != file_version || h.id != want.id || h.parts != want.parts || h.m != want.m || h.n != want.n ||
      h.R != want.rows || h.K != want.nnz)
    return "does not match the metadata (expected version " + std::to_string(file_version) + ", partition " +
           std::to_string(want.id) + " of " + std::to_string(want.parts) + ", shape (" + std::to_string(want.m) +
           ", " + std::to_string(want.n) + "), " + std::to_string(want.rows) + " rows, " +
           std::to_string(want.nnz) + " entries)";
  if (h.value_size != want.value_size)
    return "holds values of " + std::to_string(h.value_size) + " bytes, the metadata's dtype has " +
           std::to_string(want.value_size) + " (a dtype mismatch)";
  if ((h.rowptr_size != 4 && h.rowptr_size != 8) || (h.col_size != 4 && h.col_size != 8) || h.reserved != 0 ||
      h.C < -1 || h.NR > h.parts || h.NS > h.parts)
    return "has a damaged header";
  if (!sections_of(h, size, s) || s.total != size)
    return "has " + std::to_string(size) + " bytes, its header describes " +
           (s.total > 0 ? std::to_string(s.total) : std::string("an impossible size")) +
           " (a dtype mismatch or a damaged header)";
  const auto Dn = h.domain_owned();
  if (h.R > h.m || Dn > h.n || h.G > h.n - Dn) return "has more owned rows, columns or ghosts than the matrix";
  if (!io_check::ascending_in(data, s.owned, h.m)) return "lists owned rows that are not ascending in [0, m)";
  const auto& dom = h.C < 0 ? s.owned : s.owned_cols;
  if (h.C >= 0 && !io_check::ascending_in(data, s.owned_cols, h.n))
    return "lists owned columns that are not ascending in [0, n)";
  const auto neighbours = [&](const PartitionSections::Span& span, std::int64_t count, std::int64_t total) {
    std::int64_t last = -1, sum = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const auto r = at<std::int64_t>(data, span.begin, 2 * i), c = at<std::int64_t>(data, span.begin, 2 * i + 1);
      if (r <= last || r >= h.parts || r == h.id || c <= 0 || c > total - sum) return false;
      last = r;
      sum += c;
    }
    return sum == total;
  };
  if (!neighbours(s.recv, h.NR, h.G) || !neighbours(s.send, h.NS, h.S))
    return "has a damaged halo plan (neighbours or their counts)";
  // Ghosts: ascending within each neighbour's slice, in [0, n), none owned here.
  const auto* owned_begin = data + dom.begin;
  const auto owned_at = [&](std::int64_t i) { return at<std::int64_t>(owned_begin, 0, i); };
  for (std::int64_t k = 0, g = 0; k < h.NR; ++k) {
    const auto end = g + at<std::int64_t>(data, s.recv.begin, 2 * k + 1);
    for (std::int64_t last = -1; g < end; ++g) {
      const auto v = at<std::int64_t>(data, s.ghosts.begin, g);
      if (v <= last || v >= h.n) return "has a damaged halo plan (ghost columns)";
      std::int64_t lo = 0, hi = Dn;  // binary search among the owned columns
      while (lo < hi) {
        const auto mid = lo + (hi - lo) / 2;
        if (owned_at(mid) < v) lo = mid + 1; else hi = mid;
      }
      if (lo < Dn && owned_at(lo) == v) return "has a damaged halo plan (a ghost column it owns)";
      last = v;
    }
  }
  for (std::int64_t i = 0; i < h.S; ++i) {
    const auto v = at<std::int64_t>(data, s.send_rows.begin, i);
    if (v < 0 || v >= Dn) return "has a damaged halo plan (send rows)";
  }
  if (io_check::index(data, s.rowptr, h.rowptr_size, 0) != 0 || io_check::index(data, s.rowptr, h.rowptr_size, h.R) != h.K)
    return "has damaged row pointers";
  const auto width = Dn + h.G;
  const auto check_rows = [&](auto rp_t, auto col_t) {
    using P = decltype(rp_t);
    using I = decltype(col_t);
    std::int64_t begin = 0;
    for (std::int64_t r = 0; r < h.R; ++r) {
      const auto end = static_cast<std::int64_t>(at<P>(data, s.rowptr.begin, r + 1));
      if (end < begin || end > h.K) return false;
      std::int64_t last = -1;
      for (auto k = begin; k < end; ++k) {
        const auto c = static_cast<std::int64_t>(at<I>(data, s.col.begin, k));
        if (c <= last || c >= width) return false;
        last = c;
      }
      begin = end;
    }
    return true;
  };
  const bool rows_ok = h.rowptr_size == 4 ? (h.col_size == 4 ? check_rows(std::int32_t{}, std::int32_t{})
                                                             : check_rows(std::int32_t{}, std::int64_t{}))
                                          : (h.col_size == 4 ? check_rows(std::int64_t{}, std::int32_t{})
                                                             : check_rows(std::int64_t{}, std::int64_t{}));
  if (!rows_ok) return "has damaged rows (row pointers, or columns not ascending inside the local width)";
  return {};
}

/// Version 1: the checks of a global-COO partition file; `s.owned`, `s.rowptr` (the rows), `s.col`
/// (the columns) and `s.values` are filled. "" when sound.
inline std::string check_partition_v1(const unsigned char* data, std::int64_t size, const PartitionExpect& want,
                                      PartitionSections& s) {
  if (size < 56 || std::memcmp(data, partition_magic.data(), 8) != 0) return "is not a partition file";
  std::array<std::int64_t, 6> h{};
  std::memcpy(h.data(), data + 8, sizeof h);
  if (h[0] != 1 || h[1] != want.id || h[2] != want.parts || h[3] != want.n || h[4] != want.rows || h[5] != want.nnz)
    return "does not match the metadata (expected version 1, partition " + std::to_string(want.id) + " of " +
           std::to_string(want.parts) + ", n " + std::to_string(want.n) + ")";
  const auto R = h[4], K = h[5];
  if (R > size / 8 || K > size / (16 + want.value_size) || size != 56 + (R + 2 * K) * 8 + K * want.value_size)
    return "has " + std::to_string(size) + " bytes, expected " +
           (R <= size / 8 && K <= size / 24 ? std::to_string(56 + (R + 2 * K) * 8 + K * want.value_size)
                                            : std::string("another size")) +
           " for " + std::to_string(K) + " entries of this dtype (a dtype mismatch)";
  s.owned = {56, R * 8};
  s.rowptr = {56 + R * 8, K * 8};
  s.col = {56 + (R + K) * 8, K * 8};
  s.values = {56 + (R + 2 * K) * 8, K * want.value_size};
  s.total = size;
  for (const auto* span : {&s.owned, &s.rowptr, &s.col})
    for (std::int64_t i = 0; i < span->bytes / 8; ++i) {
      const auto v = io_check::at<std::int64_t>(data, span->begin, i);
      if (v < 0 || v >= want.n) return "holds indices outside [0, " + std::to_string(want.n) + ")";
    }
  return {};
}

/// The checksum a partition file of `version` must match.
inline std::string checksum_of(const unsigned char* data, std::int64_t size, std::int64_t version) {
  Checksum sum(version == 1 ? 1 : 4);
  sum.update(data, static_cast<std::size_t>(size));
  return hex(sum.value());
}

}  // namespace einshard::sparse::detail
