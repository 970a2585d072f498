#pragma once
/// @file
/// Files of a `DSparseTensor`: a directory with one binary file per partition and a text metadata
/// file listing every partition with its size and checksum. Each rank writes its own partition
/// (temporary file, fsync, rename), rank 0 writes the metadata last, so a reader never sees a
/// half-written set. `load` reads the files at any world size: with as many ranks as partitions
/// each rank reads its own file and keeps the saved partition; otherwise the files are shared out
/// among the ranks and the rows are repartitioned (simple blocks) by the assembly's owner exchange.
///
/// Partition file (native byte order, every section 8-byte aligned but the last):
///   8 bytes "ESDSPART", then int64 version, partition id, partitions, n, owned rows R, entries K,
///   then int64 owned[R], int64 rows[K], int64 cols[K] (global indices), values[K].
/// Metadata `metadata.txt`:
///   `einshard-dsparse <version>` / `shape <n> <n>` / `dtype <name>` / `partitions <P>` /
///   one line per partition: `partition <id> <file> <rows> <nnz> <bytes> <checksum hex>`.

#include <ATen/ATen.h>
#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/dsparse_tensor.hpp"
#include "einshard/sparse/partition.hpp"
#include "einshard/sparse/queries.hpp"
#include "einshard/sparse/sparse_tensor.hpp"

namespace einshard::sparse {

namespace detail {

inline constexpr std::int64_t file_version = 1;
inline constexpr std::array<char, 8> partition_magic{'E', 'S', 'D', 'S', 'P', 'A', 'R', 'T'};
inline constexpr const char* metadata_name = "metadata.txt";

inline std::string partition_file_name(std::int64_t id) { return "partition_" + std::to_string(id) + ".bin"; }

inline const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return "unsupported";
  }
}
inline std::optional<at::ScalarType> dtype_of_name(const std::string& s) {
  for (auto t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kComplexFloat, at::kComplexDouble})
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

/// A streaming 64-bit checksum over 8-byte words (xor-multiply-shift, the tail zero-padded): fast
/// enough not to slow the write down (one multiply per word), and any change of a byte changes it
/// with overwhelming probability. Not cryptographic: it detects damage, not tampering.
class Checksum {
 public:
  void update(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    bytes_ += size;
    while (size > 0 && fill_ > 0) {  // finish a word left over from the last call
      pending_[fill_++] = *p++;
      --size;
      if (fill_ == 8) mix_pending();
    }
    for (; size >= 8; p += 8, size -= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    for (; size > 0; --size) pending_[fill_++] = *p++;
  }
  [[nodiscard]] std::uint64_t value() const {
    auto c = *this;
    if (c.fill_ > 0) {
      std::fill(c.pending_.begin() + c.fill_, c.pending_.end(), 0);
      c.mix_pending();
    }
    c.mix(c.bytes_);
    return c.h_;
  }

 private:
  void mix(std::uint64_t w) {
    h_ = (h_ ^ w) * 0x9e3779b97f4a7c15ULL;
    h_ ^= h_ >> 29;
  }
  void mix_pending() {
    std::uint64_t w;
    std::memcpy(&w, pending_.data(), 8);
    mix(w);
    fill_ = 0;
  }
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
  std::uint64_t bytes_ = 0;
  std::array<unsigned char, 8> pending_{};
  std::size_t fill_ = 0;
};

inline std::string hex(std::uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

/// One partition's content: global row ids it owns and its entries (global COO), on the CPU.
struct PartitionData {
  at::Tensor owned, rows, cols, values;
};

/// What the metadata lists for a partition.
struct PartitionEntry {
  std::int64_t id = 0, rows = 0, nnz = 0, bytes = 0;
  std::string file, checksum;
};

/// Writes `part` as `dir/file` atomically (temporary, fsync, rename); returns its size and checksum.
/// Call only after the directory's metadata is removed (prepare_directory).
/// Errors come back as a message (empty on success) so the caller can agree across ranks.
inline std::string write_partition(const std::filesystem::path& dir, std::int64_t id, std::int64_t parts,
                                   std::int64_t n, const PartitionData& part, PartitionEntry& entry) {
  entry = {id, part.owned.numel(), part.values.numel(), 0, partition_file_name(id), {}};
  const auto final_path = dir / entry.file;
  const auto temp_path = dir / (entry.file + ".tmp");
  // A previous save's file becomes the temporary: truncating and rewriting an existing file is
  // several times faster than filling a new one on common file systems (block allocation), and
  // no reader can be misled meanwhile, since the metadata that would vouch for it is gone.
  std::error_code ignored;
  if (std::filesystem::exists(final_path, ignored)) std::filesystem::rename(final_path, temp_path, ignored);
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return "DSparseTensor::save: cannot create " + temp_path.string() + ": " + std::strerror(errno);
  Checksum sum;
  std::string fault;
  const auto put = [&](const void* data, std::size_t size) {
    sum.update(data, size);
    const auto* p = static_cast<const char*>(data);
    while (size > 0 && fault.empty()) {
      const auto w = ::write(fd, p, size);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        fault = "DSparseTensor::save: writing " + temp_path.string() + " failed: " + std::strerror(errno);
        break;
      }
      p += w;
      size -= static_cast<std::size_t>(w);
    }
  };
  const std::array<std::int64_t, 7> header{file_version, id, parts, n, entry.rows, entry.nnz, 0};
  put(partition_magic.data(), partition_magic.size());
  put(header.data(), 6 * sizeof(std::int64_t));
  for (const auto* t : {&part.owned, &part.rows, &part.cols, &part.values}) {
    const auto c = t->contiguous();
    put(c.data_ptr(), static_cast<std::size_t>(c.numel() * c.element_size()));
  }
  if (fault.empty() && ::fsync(fd) != 0)
    fault = "DSparseTensor::save: fsync of " + temp_path.string() + " failed: " + std::strerror(errno);
  if (::close(fd) != 0 && fault.empty())
    fault = "DSparseTensor::save: closing " + temp_path.string() + " failed: " + std::strerror(errno);
  if (fault.empty() && std::rename(temp_path.c_str(), final_path.c_str()) != 0)
    fault = "DSparseTensor::save: renaming " + temp_path.string() + " to " + final_path.string() +
            " failed: " + std::strerror(errno);
  entry.bytes = static_cast<std::int64_t>(8 + 6 * sizeof(std::int64_t) +
                                          (entry.rows + 2 * entry.nnz) * sizeof(std::int64_t)) +
                entry.nnz * part.values.element_size();
  entry.checksum = hex(sum.value());
  return fault;
}

/// The metadata text of a saved matrix.
inline std::string metadata_text(std::int64_t n, at::ScalarType dtype, const std::vector<PartitionEntry>& parts) {
  std::ostringstream s;
  s << "einshard-dsparse " << file_version << "\nshape " << n << ' ' << n << "\ndtype " << dtype_name(dtype)
    << "\npartitions " << parts.size() << '\n';
  for (const auto& e : parts)
    s << "partition " << e.id << ' ' << e.file << ' ' << e.rows << ' ' << e.nnz << ' ' << e.bytes << ' '
      << e.checksum << '\n';
  return s.str();
}

/// Writes the metadata atomically; the message of a failure, or "".
inline std::string write_metadata(const std::filesystem::path& dir, const std::string& text) {
  const auto final_path = dir / metadata_name;
  const auto temp_path = dir / (std::string(metadata_name) + ".tmp");
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return "DSparseTensor::save: cannot create " + temp_path.string() + ": " + std::strerror(errno);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return "DSparseTensor::save: writing " + temp_path.string() + " failed: " + std::strerror(errno);
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0)
    return "DSparseTensor::save: renaming " + temp_path.string() + " failed: " + std::strerror(errno);
  return {};
}

/// The parsed metadata of a saved matrix.
struct Metadata {
  std::int64_t version = 0, n = 0;
  at::ScalarType dtype = at::kDouble;
  std::vector<PartitionEntry> parts;
};

inline Metadata parse_metadata(const std::string& text, const std::string& where) {
  std::istringstream s(text);
  Metadata m;
  std::string word, dtype;
  std::int64_t n2 = 0, count = -1;
  const auto bad = [&](const std::string& what) {
    return Error("DSparseTensor::load: " + where + ": expected " + what);
  };
  if (!(s >> word >> m.version) || word != "einshard-dsparse") throw bad("a metadata file starting 'einshard-dsparse <version>'");
  if (m.version != file_version)
    throw Error("DSparseTensor::load: " + where + ": format version " + std::to_string(m.version) +
                " is not supported, expected version " + std::to_string(file_version));
  if (!(s >> word >> m.n >> n2) || word != "shape" || m.n < 0 || n2 != m.n) throw bad("'shape <n> <n>' of a square matrix");
  if (!(s >> word >> dtype) || word != "dtype") throw bad("'dtype <name>'");
  const auto t = dtype_of_name(dtype);
  if (!t) throw bad("a dtype of float32, float64, float16, bfloat16, complex64 or complex128, found '" + dtype + "'");
  m.dtype = *t;
  if (!(s >> word >> count) || word != "partitions" || count < 1) throw bad("'partitions <P>' with P >= 1");
  for (std::int64_t i = 0; i < count; ++i) {
    PartitionEntry e;
    if (!(s >> word >> e.id >> e.file >> e.rows >> e.nnz >> e.bytes >> e.checksum) || word != "partition" ||
        e.id != i || e.rows < 0 || e.nnz < 0 || e.file.find('/') != std::string::npos)
      throw bad(std::to_string(count) + " partition lines, found a bad line for partition " + std::to_string(i));
    m.parts.push_back(std::move(e));
  }
  return m;
}

/// Reads and checks one partition file; a message naming the file on failure ("" on success).
inline std::string read_partition(const std::filesystem::path& dir, const Metadata& meta, const PartitionEntry& e,
                                  PartitionData& out) {
  const auto path = (dir / e.file).string();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "DSparseTensor::load: cannot open " + path + ": " + std::strerror(errno);
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size != e.bytes) {
    ::close(fd);
    return "DSparseTensor::load: " + path + " is truncated or damaged: expected " + std::to_string(e.bytes) +
           " bytes (metadata), found " + std::to_string(st.st_size);
  }
  auto bytes = at::empty({(e.bytes + 7) / 8}, at::kLong);  // 8-aligned, so sections view in place
  auto* p = static_cast<char*>(bytes.data_ptr());
  std::int64_t done = 0;
  while (done < e.bytes) {
    const auto r = ::read(fd, p + done, static_cast<std::size_t>(e.bytes - done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += r;
  }
  ::close(fd);
  if (done != e.bytes) return "DSparseTensor::load: reading " + path + " failed after " + std::to_string(done) + " bytes";
  Checksum sum;
  sum.update(p, static_cast<std::size_t>(e.bytes));
  if (hex(sum.value()) != e.checksum)
    return "DSparseTensor::load: " + path + " is corrupt: expected checksum " + e.checksum + " (metadata), found " +
           hex(sum.value());
  const auto* h = reinterpret_cast<const std::int64_t*>(p + 8);
  if (std::memcmp(p, partition_magic.data(), 8) != 0) return "DSparseTensor::load: " + path + " is not a partition file";
  if (h[0] != file_version || h[1] != e.id || h[2] != static_cast<std::int64_t>(meta.parts.size()) || h[3] != meta.n ||
      h[4] != e.rows || h[5] != e.nnz)
    return "DSparseTensor::load: " + path + " does not match the metadata (expected version " +
           std::to_string(file_version) + ", partition " + std::to_string(e.id) + " of " +
           std::to_string(meta.parts.size()) + ", n " + std::to_string(meta.n) + ")";
  const auto esize = static_cast<std::int64_t>(c10::elementSize(meta.dtype));
  if (e.bytes != 56 + (e.rows + 2 * e.nnz) * 8 + e.nnz * esize)
    return "DSparseTensor::load: " + path + " has " + std::to_string(e.bytes) + " bytes, expected " +
           std::to_string(56 + (e.rows + 2 * e.nnz) * 8 + e.nnz * esize) + " for " + std::to_string(e.nnz) +
           " entries of dtype " + dtype_name(meta.dtype) + " (a dtype mismatch)";
  const auto words = bytes.view(at::kByte);
  std::int64_t at_byte = 56;
  const auto take = [&](std::int64_t count, at::ScalarType t) {
    const auto size = count * static_cast<std::int64_t>(c10::elementSize(t));
    auto s = words.narrow(0, at_byte, size).clone().view(t);
    at_byte += size;
    return s;
  };
  out.owned = take(e.rows, at::kLong);
  out.rows = take(e.nnz, at::kLong);
  out.cols = take(e.nnz, at::kLong);
  out.values = take(e.nnz, meta.dtype);
  const auto range_ok = [&](const at::Tensor& t) {
    return t.numel() == 0 || (t.min().item<std::int64_t>() >= 0 && t.max().item<std::int64_t>() < meta.n);
  };
  if (!range_ok(out.owned) || !range_ok(out.rows) || !range_ok(out.cols))
    return "DSparseTensor::load: " + path + " holds indices outside [0, " + std::to_string(meta.n) + ")";
  return {};
}

/// The partition `a` holds on this rank, in global indices, on the CPU.
inline PartitionData partition_data(const DSparseTensor& a) {
  const auto t = global_entries(a);
  return {a.layout()->owned(), t.rows, t.cols, t.values.detach().cpu().contiguous()};
}

/// Rank 0's verdict on the metadata (read there and broadcast, so every rank parses the same
/// text): the parsed metadata on every rank, or the same Error on every rank.
inline Metadata read_metadata(const std::filesystem::path& dir, MPI_Comm comm) {
  const auto path = (dir / metadata_name).string();
  std::string text, fault;
  if (comm::rank_of(comm) == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      fault = "DSparseTensor::load: cannot open " + path + ": " + std::strerror(errno) +
              " (expected a directory written by DSparseTensor::save)";
    } else {
      char buf[1 << 16];
      ssize_t r;
      while ((r = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(r));
      ::close(fd);
    }
  }
  comm::raise_if_any(comm, fault);
  int length = static_cast<int>(text.size());
  comm::check(MPI_Bcast(&length, 1, MPI_INT, 0, comm), "MPI_Bcast");
  text.resize(static_cast<std::size_t>(length));
  comm::check(MPI_Bcast(text.data(), length, MPI_CHAR, 0, comm), "MPI_Bcast");
  return parse_metadata(text, path);  // the same text everywhere: the same result or Error
}

/// Creates `dir` on rank 0 and removes a previous save's metadata (so a save that dies half way
/// leaves no metadata that could vouch for mixed files); the same Error on every rank on failure.
inline void prepare_directory(const std::filesystem::path& dir, MPI_Comm comm) {
  std::string fault;
  if (comm::rank_of(comm) == 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir))
      fault = "DSparseTensor::save: cannot create the directory " + dir.string() + ": " + ec.message();
    else
      std::filesystem::remove(dir / metadata_name, ec);
  }
  comm::raise_if_any(comm, fault);
}

}  // namespace detail

inline void DSparseTensor::save(const std::string& directory) const {
  const MPI_Comm comm = layout_->comm();
  const std::filesystem::path dir(directory);
  detail::prepare_directory(dir, comm);
  const int p = layout_->size(), me = layout_->rank();
  detail::PartitionEntry mine;
  comm::raise_if_any(comm, detail::write_partition(dir, me, p, n_, detail::partition_data(*this), mine));
  // Rank 0 learns every partition's line, then writes the metadata last.
  std::vector<std::vector<std::int64_t>> to_root(static_cast<std::size_t>(p));
  const auto sum = std::stoull(mine.checksum, nullptr, 16);
  to_root[0] = {mine.id, mine.rows, mine.nnz, mine.bytes, static_cast<std::int64_t>(sum)};
  const auto got = comm::alltoallv(to_root, comm);
  std::string fault;
  if (me == 0) {
    std::vector<detail::PartitionEntry> parts;
    for (const auto& g : got)
      parts.push_back({g[0], g[1], g[2], g[3], detail::partition_file_name(g[0]),
                       detail::hex(static_cast<std::uint64_t>(g[4]))});
    fault = detail::write_metadata(dir, detail::metadata_text(n_, dtype(), parts));
  }
  comm::raise_if_any(comm, fault);
}

inline DSparseTensor DSparseTensor::load(const std::string& directory, const Mesh& mesh) {
  if (!mesh) throw Error("DSparseTensor::load: needs a mesh");
  const MPI_Comm comm = mesh.comm();
  const std::filesystem::path dir(directory);
  const auto meta = detail::read_metadata(dir, comm);
  const int q = comm::size_of(comm), me = comm::rank_of(comm);
  const auto parts = static_cast<std::int64_t>(meta.parts.size());
  // Same world size: each rank its own file and the saved partition. Otherwise file j goes to
  // rank j mod q and the rows are repartitioned in simple blocks by the assembly.
  std::vector<detail::PartitionData> read;
  std::string fault;
  for (std::int64_t j = me; j < parts && fault.empty(); j += q) {
    detail::PartitionData d;
    fault = detail::read_partition(dir, meta, meta.parts[static_cast<std::size_t>(j)], d);
    read.push_back(std::move(d));
  }
  comm::raise_if_any(comm, fault);
  const auto cat = [&](at::Tensor detail::PartitionData::*field, at::ScalarType t) {
    std::vector<at::Tensor> pieces;
    for (const auto& d : read) pieces.push_back(d.*field);
    return pieces.empty() ? at::empty({0}, t) : at::cat(pieces);
  };
  const auto values = cat(&detail::PartitionData::values, meta.dtype);
  const auto rows = cat(&detail::PartitionData::rows, at::kLong), cols = cat(&detail::PartitionData::cols, at::kLong);
  if (parts == q) return from_local(values, rows, cols, {meta.n, meta.n}, mesh, {.owned_rows = read.at(0).owned});
  return from_local(values, rows, cols, {meta.n, meta.n}, mesh);
}

/// Pre-shards a matrix on one process for `parts` ranks: the files of a `DSparseTensor::save` of
/// `A` partitioned with `options` on `parts` ranks (the same partition ids; entries in global
/// order), so a later run at that world size loads each rank's rows straight from its file.
inline void save_partitioned(const SparseTensor& A, const std::string& directory, int parts,
                             const PartitionOptions& options = {}) {
  if (A.rows() != A.cols())
    throw Error("save_partitioned: expected a square matrix, got (" + std::to_string(A.rows()) + ", " +
                std::to_string(A.cols()) + ")");
  if (parts < 1) throw Error("save_partitioned: expected at least 1 part, got " + std::to_string(parts));
  const std::filesystem::path dir(directory);
  detail::prepare_directory(dir, MPI_COMM_SELF);
  const auto n = A.rows();
  const auto ids = partition_ids(A.row_indices(), A.col_indices(), n, parts, options).to(at::kLong);
  const auto row_part = ids.index_select(0, A.row_indices());
  std::vector<detail::PartitionEntry> entries(static_cast<std::size_t>(parts));
  for (int r = 0; r < parts; ++r) {
    const auto keep = (row_part == r).nonzero().flatten();
    const detail::PartitionData d{(ids == r).nonzero().flatten(), A.row_indices().index_select(0, keep),
                                  A.col_indices().index_select(0, keep),
                                  A.values().detach().index_select(0, keep).contiguous()};
    const auto fault = detail::write_partition(dir, r, parts, n, d, entries[static_cast<std::size_t>(r)]);
    if (!fault.empty()) throw Error(fault);
  }
  const auto fault = detail::write_metadata(dir, detail::metadata_text(n, A.dtype(), entries));
  if (!fault.empty()) throw Error(fault);
}

}  // namespace einshard::sparse
