#pragma once
/// @file
/// The on-disk format of `DSparseTensor::save`, parsed and checked from bytes in memory, without
/// LibTorch or MPI (so the libFuzzer targets link it alone). save_load.hpp does the files and the
/// collectives around it. One format version is written and read.
///
/// Metadata `metadata.txt` (text):
///   `einshard-dsparse <version>` / `shape <m> <n>` / `dtype <name>` / `partitions <P>` /
///   one line per partition: `partition <id> <file> <rows> <nnz> <bytes> <checksum hex>`.
///
/// Partition file (native byte order; its checksum is `Checksum`'s): the rank's local CSR and its
/// halo plan exactly as the matrix holds them, so a load at the saved world size maps them back without assembly.
///   8 bytes "ESDSPART", int64 header[16] (see `PartitionHeader`), then sections, each starting at
///   a multiple of 16 bytes: owned rows[R] (global, ascending), owned columns[C] (only when the
///   domain is partitioned apart from the rows, C >= 0), ghosts[G] (global, in halo order), receive
///   neighbours[NR] and send neighbours[NS] as (rank, count) int64 pairs, send rows[S] (local),
///   rowptr[R + 1], col[K] (local: owned columns first, then ghost slots), values[K]. The index
///   sections keep the widths the matrix uses (4 or 8 bytes, named in the header).

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <istream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "einshard/error.hpp"

namespace einshard::sparse::detail {

inline constexpr std::int64_t file_version = 3;
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

/// The checksum of a partition file: Fletcher sums mod 2^64 in eight interleaved lanes (word i of
/// 8 bytes into lane i mod 8: a += w, b += a, so b weighs each word by its position), finished by
/// a multiply-mix over the lanes and the length. Adds only, in 128-bit vectors, so it keeps up with
/// a read() from the page cache and a load above one rank is not bound by it (a chain of
/// multiplies does not). Any change of one word changes a; moved or swapped words change b. Not
/// cryptographic: it detects damage.
class Checksum {
 public:
  void update(const void* data, std::size_t size) {
    if (size == 0) return;  // data may be null then, which memcpy must not see
    const auto* p = static_cast<const unsigned char*>(data);
    bytes_ += size;
    if (fill_ > 0) {  // finish the block left over from the last call
      const auto take = std::min(size, block - fill_);
      std::memcpy(pending_.data() + fill_, p, take);
      fill_ += take, p += take, size -= take;
      if (fill_ < block) return;
      add(pending_.data());
      fill_ = 0;
    }
    const auto blocks = size / block;
    add_blocks(p, blocks);
    p += blocks * block, size -= blocks * block;
    std::memcpy(pending_.data(), p, size);
    fill_ = size;
  }
  [[nodiscard]] std::uint64_t value() const {
    auto c = *this;
    if (c.fill_ > 0) {
      std::fill(c.pending_.begin() + static_cast<std::ptrdiff_t>(c.fill_), c.pending_.end(), 0);
      c.add(c.pending_.data());
    }
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (int j = 0; j < vectors; ++j)
      for (int l = 0; l < 2; ++l) h = mix(mix(h, c.a_[j][l]), c.b_[j][l]);
    return mix(h, c.bytes_);
  }

 private:
  using u64x2 = std::uint64_t __attribute__((vector_size(16)));
  static constexpr int vectors = 4;
  static constexpr std::size_t block = vectors * sizeof(u64x2);
  static std::uint64_t mix(std::uint64_t h, std::uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
  }
  void add(const unsigned char* p) { add_blocks(p, 1); }
  /// The sums live in locals here: as members, every store to them might alias the bytes read
  /// (unsigned char aliases everything), so the compiler would reload and store them per block.
  void add_blocks(const unsigned char* p, std::size_t blocks) {
    u64x2 a0 = a_[0], a1 = a_[1], a2 = a_[2], a3 = a_[3], b0 = b_[0], b1 = b_[1], b2 = b_[2], b3 = b_[3];
    for (std::size_t i = 0; i < blocks; ++i, p += block) {
      u64x2 w0, w1, w2, w3;
      std::memcpy(&w0, p, sizeof w0);
      std::memcpy(&w1, p + 16, sizeof w1);
      std::memcpy(&w2, p + 32, sizeof w2);
      std::memcpy(&w3, p + 48, sizeof w3);
      a0 += w0, a1 += w1, a2 += w2, a3 += w3;
      b0 += a0, b1 += a1, b2 += a2, b3 += a3;
    }
    a_[0] = a0, a_[1] = a1, a_[2] = a2, a_[3] = a3, b_[0] = b0, b_[1] = b1, b_[2] = b2, b_[3] = b3;
  }
  u64x2 a_[vectors]{}, b_[vectors]{};
  std::uint64_t bytes_ = 0;
  std::array<unsigned char, block> pending_{};
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
  std::int64_t partitions = 0;  ///< how many partitions the matrix was saved in
  /// The partitions' entries: every one as parsed; on a loading rank, those it reads.
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

/// The metadata of `text` (read from `where`), or an Error naming `where`.
inline Metadata parse_metadata(const std::string& text, const std::string& where) {
  std::istringstream s(text);
  Metadata m;
  std::string word;
  std::int64_t count = -1;
  const auto bad = [&](const std::string& what) { return Error("DSparseTensor::load: " + where + ": expected " + what); };
  if (!(s >> word >> m.version) || word != "einshard-dsparse")
    throw bad("a metadata file starting 'einshard-dsparse <version>'");
  if (m.version != file_version)
    throw Error("DSparseTensor::load: " + where + ": expected format version " + std::to_string(file_version) +
                ", found version " + std::to_string(m.version));
  if (!(s >> word >> m.m >> m.n) || word != "shape" || m.m < 0 || m.n < 0) throw bad("'shape <m> <n>' with sizes >= 0");
  if (!(s >> word >> m.dtype) || word != "dtype") throw bad("'dtype <name>'");
  m.value_size = dtype_size(m.dtype);
  if (m.value_size == 0)
    throw bad("a dtype of float32, float64, float16, bfloat16, complex64 or complex128, found '" + m.dtype + "'");
  // A count is bounded by the text (one line per partition), so a damaged count cannot reserve memory.
  if (!(s >> word >> count) || word != "partitions" || count < 1 || count > static_cast<std::int64_t>(text.size()))
    throw bad("'partitions <P>' with P >= 1");
  m.partitions = count;
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

/// The fixed header of a partition file, the word order on disk.
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

inline constexpr const char* not_a_partition = "expected a partition file (magic ESDSPART), found other bytes";

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
}  // namespace io_check

/// Checks a partition file against `want` as its bytes arrive: the read loop feeds
/// it each chunk while the chunk is still in cache, so the checks make no pass over memory of
/// their own. Sections arrive in file order, and each is checked knowing the ones before it: the
/// header and every count, ascending owned rows (and columns), the halo plan (neighbours distinct
/// and not itself, ghosts ascending per neighbour and not owned, send rows in range), row pointers
/// from 0 to K, and columns strictly ascending in each row and inside the local width. The row
/// and column checks are branch-free reductions (the compiler vectorizes them): columns ascend
/// in each row when every descent of the whole column array falls where a row begins.
class PartitionCheck {
 public:
  PartitionCheck(const PartitionExpect& want, std::int64_t size) : want_(want), size_(size) {}

  /// Checks what the first `avail` bytes of `data` allow that earlier calls did not (each call
  /// passes a longer prefix of the same storage). The fault found so far, or "".
  const std::string& feed(const unsigned char* data, std::int64_t avail) {
    if (!fault_.empty()) return fault_;
    if (stage_ == Stage::header) {
      if (avail < 8 + header_words * 8) {
        if (avail >= size_) fault_ = not_a_partition;
        return fault_;
      }
      fault_ = check_header(data);
      if (!fault_.empty()) return fault_;
      stage_ = Stage::owned;
    }
    if (stage_ == Stage::owned) {
      if (!ascending(data, s_.owned, avail, h_.m, "expected owned rows ascending in [0, m), found others")) return fault_;
      stage_ = h_.C >= 0 ? Stage::owned_cols : Stage::plan;
    }
    if (stage_ == Stage::owned_cols) {
      if (!ascending(data, s_.owned_cols, avail, h_.n, "expected owned columns ascending in [0, n), found others"))
        return fault_;
      stage_ = Stage::plan;
    }
    if (stage_ == Stage::plan) {
      if (avail < s_.send_rows.begin + s_.send_rows.bytes) return fault_;
      fault_ = check_plan(data);
      if (!fault_.empty()) return fault_;
      stage_ = Stage::rowptr;
      at_ = 0;
    }
    with_index_types([&](auto p, auto c) {
      if (stage_ == Stage::rowptr && rowptr(data, avail, p)) stage_ = Stage::col, at_ = 0;
      if (stage_ == Stage::col && columns(data, avail, p, c)) stage_ = Stage::done;
    });
    return fault_;
  }
  [[nodiscard]] bool complete() const { return stage_ == Stage::done; }
  [[nodiscard]] const PartitionHeader& header() const { return h_; }
  [[nodiscard]] const PartitionSections& sections() const { return s_; }

 private:
  enum class Stage { header, owned, owned_cols, plan, rowptr, col, done };
  template <class T>
  static T at(const unsigned char* data, std::int64_t offset, std::int64_t i) {
    return io_check::at<T>(data, offset, i);
  }
  template <class T>
  static T load(const unsigned char* base, std::int64_t i) {
    T v;
    std::memcpy(&v, base + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    return v;
  }
  /// Whole elements of `s` (of `size` bytes each) inside the first `avail` bytes.
  static std::int64_t arrived(const PartitionSections::Span& s, std::int64_t avail, std::int64_t size) {
    return std::clamp<std::int64_t>((avail - s.begin) / size, 0, s.bytes / size);
  }
  template <class F>
  void with_index_types(F&& f) const {
    if (h_.rowptr_size == 4) {
      if (h_.col_size == 4) f(std::int32_t{}, std::int32_t{}); else f(std::int32_t{}, std::int64_t{});
    } else {
      if (h_.col_size == 4) f(std::int64_t{}, std::int32_t{}); else f(std::int64_t{}, std::int64_t{});
    }
  }

  std::string check_header(const unsigned char* data) {
    if (std::memcmp(data, partition_magic.data(), 8) != 0) return not_a_partition;
    std::array<std::int64_t, header_words> w{};
    std::memcpy(w.data(), data + 8, sizeof w);
    h_ = PartitionHeader::of(w.data());
    if (h_.version != file_version || h_.id != want_.id || h_.parts != want_.parts || h_.m != want_.m ||
        h_.n != want_.n || h_.R != want_.rows || h_.K != want_.nnz)
      return "expected what the metadata lists (version " + std::to_string(file_version) + ", partition " +
             std::to_string(want_.id) + " of " + std::to_string(want_.parts) + ", shape (" +
             std::to_string(want_.m) + ", " + std::to_string(want_.n) + "), " + std::to_string(want_.rows) +
             " rows, " + std::to_string(want_.nnz) + " entries), found another header";
    if (h_.value_size != want_.value_size)
      return "expected values of " + std::to_string(want_.value_size) + " bytes (the metadata's dtype), found " +
             std::to_string(h_.value_size) + " (a dtype mismatch)";
    if ((h_.rowptr_size != 4 && h_.rowptr_size != 8) || (h_.col_size != 4 && h_.col_size != 8) ||
        h_.reserved != 0 || h_.C < -1 || h_.NR > h_.parts || h_.NS > h_.parts)
      return "expected index widths of 4 or 8 bytes and counts the matrix allows, found a damaged header";
    if (!sections_of(h_, size_, s_) || s_.total != size_)
      return "expected the size its header describes (" +
             (s_.total > 0 ? std::to_string(s_.total) + " bytes" : std::string("an impossible size")) + "), found " +
             std::to_string(size_) + " bytes (a dtype mismatch or a damaged header)";
    const auto Dn = h_.domain_owned();
    if (h_.R > h_.m || Dn > h_.n || h_.G > h_.n - Dn)
      return "expected at most the matrix's rows and columns, found more owned rows, columns or ghosts";
    constexpr std::int64_t narrow = std::numeric_limits<std::int32_t>::max();
    if ((h_.rowptr_size == 4 && h_.K > narrow) || (h_.col_size == 4 && Dn + h_.G > narrow))
      return "expected sizes that its 32-bit indices can hold, found a damaged header";
    return {};
  }

  /// The arrived part of `s` (int64) strictly ascending in [0, bound); true once all of it is.
  bool ascending(const unsigned char* data, const PartitionSections::Span& s, std::int64_t avail,
                 std::int64_t bound, const char* fault) {
    const auto upto = arrived(s, avail, 8);
    const auto* base = data + s.begin;
    // As unsigned, a negative first row is out of range too; the rest are above it.
    std::int64_t bad = at_ == 0 && upto > 0 && static_cast<std::uint64_t>(load<std::int64_t>(base, 0)) >=
                                                   static_cast<std::uint64_t>(bound);
    for (auto i = std::max<std::int64_t>(at_, 1); i < upto; ++i) {
      const auto v = load<std::int64_t>(base, i);
      bad += int{v <= load<std::int64_t>(base, i - 1)} + int{v >= bound};  // counts: no branch
    }
    if (bad) fault_ = fault;
    at_ = upto;
    if (bad || upto < s.bytes / 8) return false;
    at_ = 0;
    return true;
  }

  std::string check_plan(const unsigned char* data) const {
    const auto Dn = h_.domain_owned();
    const auto neighbours = [&](const PartitionSections::Span& span, std::int64_t count, std::int64_t total) {
      std::int64_t last = -1, sum = 0;
      for (std::int64_t i = 0; i < count; ++i) {
        const auto r = at<std::int64_t>(data, span.begin, 2 * i), c = at<std::int64_t>(data, span.begin, 2 * i + 1);
        if (r <= last || r >= h_.parts || r == h_.id || c <= 0 || c > total - sum) return false;
        last = r;
        sum += c;
      }
      return sum == total;
    };
    if (!neighbours(s_.recv, h_.NR, h_.G) || !neighbours(s_.send, h_.NS, h_.S))
      return "expected a sound halo plan, found damaged neighbours or counts";
    // Ghosts: ascending within each neighbour's slice, in [0, n), none owned here.
    const auto& dom = h_.C < 0 ? s_.owned : s_.owned_cols;
    const auto owned_at = [&](std::int64_t i) { return at<std::int64_t>(data, dom.begin, i); };
    for (std::int64_t k = 0, g = 0; k < h_.NR; ++k) {
      const auto end = g + at<std::int64_t>(data, s_.recv.begin, 2 * k + 1);
      for (std::int64_t last = -1; g < end; ++g) {
        const auto v = at<std::int64_t>(data, s_.ghosts.begin, g);
        if (v <= last || v >= h_.n) return "expected a sound halo plan, found damaged ghost columns";
        std::int64_t lo = 0, hi = Dn;  // binary search among the owned columns
        while (lo < hi) {
          const auto mid = lo + (hi - lo) / 2;
          if (owned_at(mid) < v) lo = mid + 1; else hi = mid;
        }
        if (lo < Dn && owned_at(lo) == v) return "expected a sound halo plan, found a ghost column it owns";
        last = v;
      }
    }
    for (std::int64_t i = 0; i < h_.S; ++i) {
      const auto v = at<std::int64_t>(data, s_.send_rows.begin, i);
      if (v < 0 || v >= Dn) return "expected a sound halo plan, found damaged send rows";
    }
    return {};
  }

  /// Row pointers from 0, ascending, at most K, the last K; true once all have arrived.
  template <class P>
  bool rowptr(const unsigned char* data, std::int64_t avail, P) {
    const auto upto = arrived(s_.rowptr, avail, sizeof(P));
    const auto* base = data + s_.rowptr.begin;
    // Ascending from 0 keeps them >= 0, so only the top needs a bound.
    std::int64_t bad = at_ == 0 && upto > 0 && load<P>(base, 0) != 0;
    const auto K = static_cast<P>(h_.K);
    for (auto i = std::max<std::int64_t>(at_, 1); i < upto; ++i)
      bad += int{load<P>(base, i) < load<P>(base, i - 1)} + int{load<P>(base, i) > K};
    at_ = upto;
    if (!bad && upto == h_.R + 1 && static_cast<std::int64_t>(at<P>(data, s_.rowptr.begin, h_.R)) != h_.K) bad = true;
    if (bad) fault_ = "expected row pointers ascending from 0 to the entry count, found damaged ones";
    return !bad && upto == h_.R + 1;
  }

  /// Columns inside the local width, and descents only where rows begin; true once all arrived.
  template <class P, class I>
  bool columns(const unsigned char* data, std::int64_t avail, P, I) {
    using U = std::make_unsigned_t<I>;
    const auto upto = arrived(s_.col, avail, sizeof(I));
    // Negative columns wrap to large unsigned ones, so one comparison bounds both sides.
    const auto width = static_cast<U>(std::min<std::uint64_t>(
        static_cast<std::uint64_t>(h_.domain_owned() + h_.G), static_cast<std::uint64_t>(std::numeric_limits<I>::max())));
    const auto* col = data + s_.col.begin;
    const auto* rp = data + s_.rowptr.begin;
    bool bad = at_ == 0 && upto > 0 && static_cast<U>(load<I>(col, 0)) >= width;
    // Counters of the column's own width vectorize best; blocks keep them from wrapping.
    for (auto k0 = std::max<std::int64_t>(at_, 1); k0 < upto; k0 += std::int64_t{1} << 20) {
      U outside = 0, descents = 0;
      for (auto k = k0, end = std::min(upto, k0 + (std::int64_t{1} << 20)); k < end; ++k) {
        const auto c = load<I>(col, k);
        outside += static_cast<U>(c) >= width;
        descents += c <= load<I>(col, k - 1);
      }
      bad = bad || outside > 0;
      descents_ += static_cast<std::int64_t>(descents);
    }
    at_ = upto;
    // Row starts whose entry and the one before have arrived (in locals: see add_blocks).
    auto row = row_, last = last_start_, starts = starts_descents_;
    for (; row < h_.R; ++row) {
      const auto e = static_cast<std::int64_t>(load<P>(rp, row));
      if (e >= upto) break;
      // A row start inside (0, K), counted once however many empty rows share it.
      starts += int{e > last} * int{load<I>(col, e) <= load<I>(col, e > 0 ? e - 1 : 0)};
      last = e;
    }
    row_ = row, last_start_ = last, starts_descents_ = starts;
    if (!bad && upto == h_.K && descents_ != starts_descents_) bad = true;
    if (bad) fault_ = "expected columns ascending in each row inside the local width, found damaged rows";
    return !bad && upto == h_.K;
  }

  PartitionExpect want_;
  std::int64_t size_;
  PartitionHeader h_;
  PartitionSections s_;
  Stage stage_ = Stage::header;
  std::string fault_;
  std::int64_t at_ = 0;  // next element of the section being checked
  std::int64_t row_ = 0, last_start_ = 0, descents_ = 0, starts_descents_ = 0;
};

/// Checks the bytes of a whole partition file (the checksum already matched)
/// against `want` (see `PartitionCheck`). Fills `h` and `s` and returns "" when the file is
/// sound, else what is wrong.
inline std::string check_partition(const unsigned char* data, std::int64_t size, const PartitionExpect& want,
                                   PartitionHeader& h, PartitionSections& s) {
  PartitionCheck check(want, size);
  auto fault = check.feed(data, size);
  h = check.header();
  s = check.sections();
  return fault;
}

/// The checksum a partition file must match.
inline std::string checksum_of(const unsigned char* data, std::int64_t size) {
  Checksum sum;
  sum.update(data, static_cast<std::size_t>(size));
  return hex(sum.value());
}

}  // namespace einshard::sparse::detail
