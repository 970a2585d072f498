#pragma once
/// @file
/// Files of a `DSparseTensor`: a directory with one binary file per partition and a text metadata
/// file listing every partition with its size and checksum (the format: format.hpp). Each rank
/// writes its own partition (temporary file, fsync, rename), rank 0 writes the metadata last, so a
/// reader never sees a half-written set. Rank 0 alone handles the metadata's P lines (gathered at a
/// save, parsed and scattered at a load): every other rank holds O(1) of it.
///
/// A partition file holds the rank's local CSR and halo plan as the matrix keeps them, so `load`
/// with as many ranks as partitions maps each file straight back (no assembly, no halo
/// handshake: one small all-to-all of neighbour counts checks the files agree). At another world
/// size file j goes to rank j mod q, which turns its CSR into global entries; the assembly's owner
/// exchange moves them to their rows' owners in the simple partition. No rank gathers O(N) data.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/reduce.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/exchange.hpp"
#include "einshard/comm/sparse_exchange.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/sparse/matrix/csr.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/halo.hpp"
#include "einshard/sparse/io/format.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/matrix/partition.hpp"
#include "einshard/sparse/matrix/sparse_tensor.hpp"
#if EINSHARD_DEFINE_SPARSE  // only the definitions below need these
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <filesystem>
#endif

namespace einshard::sparse {

/// Pre-shards a matrix on one process for `parts` ranks: the files a `DSparseTensor::save` of `A`
/// partitioned with `options` on `parts` ranks writes (the same rows, halo plans and local CSR), so
/// a later run at that world size loads each rank's part straight from its file.
void save_partitioned(const SparseTensor& A, const std::string& directory, int parts,
                      const PartitionOptions& options = {});

// Header-only: defined here, inline. Compiled: defined once in einshard_compiled (src/sparse.cpp).
// See config.hpp.
#if EINSHARD_DEFINE_SPARSE
namespace detail {

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

/// "<op>: <path>: expected <step> to succeed, found "<errno's text>"", for a failed system call.
inline std::string system_fault(const char* op, const std::string& path, const std::string& step) {
  return std::string(op) + ": " + path + ": expected " + step + " to succeed, found \"" + std::strerror(errno) + "\"";
}

/// One partition as written: the rank's rows, halo plan and local CSR, on the CPU.
struct PartitionParts {
  at::Tensor owned;
  std::optional<at::Tensor> owned_cols;  // only when the domain is partitioned apart from the rows
  at::Tensor ghosts;
  std::vector<std::int64_t> recv, send;  // (rank, count) pairs
  at::Tensor send_rows, rowptr, col, values;
};

/// The bytes of the open file `fd` as a kByte tensor mapped copy-on-write from the page cache, or
/// an undefined tensor when the file system cannot map it. Mapping instead of read() spares the
/// copy out of the page cache, most of a load's time when the file is cached. The mapping keeps
/// the file open under a shared flock until the last tensor viewing it goes: a save over the
/// directory (in any process) rewrites a file in place only when it can take that lock, and
/// otherwise writes a new file and renames it over, so a mapped file never changes under a matrix.
/// Takes `fd` over on success.
inline at::Tensor map_file(int fd, std::int64_t bytes) {
  if (bytes <= 0 || ::flock(fd, LOCK_SH | LOCK_NB) != 0) return {};
  void* p = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    ::flock(fd, LOCK_UN);
    return {};
  }
  return at::from_blob(
      p, {bytes},
      [bytes, fd](void* q) {
        ::munmap(q, static_cast<std::size_t>(bytes));
        ::close(fd);  // releases the lock
      },
      at::TensorOptions(at::kByte));
}

/// Whether an earlier save's file at `path` may be truncated and rewritten in place: no loaded
/// matrix maps it (see `map_file`).
inline bool rewritable(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool unlocked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return unlocked;
}

/// Writes `part` as `dir/file` atomically (temporary, fsync, rename); fills `entry` (size and
/// checksum). Call only after the directory's metadata is removed (prepare_directory). Errors come
/// back as a message (empty on success) so the caller can agree across ranks.
inline std::string write_partition(const std::filesystem::path& dir, std::int64_t id, std::int64_t parts,
                                   std::int64_t m, std::int64_t n, const PartitionParts& part, PartitionEntry& entry) {
  entry = {id, part.owned.numel(), part.values.numel(), 0, partition_file_name(id), {}};
  const auto final_path = dir / entry.file;
  const auto temp_path = dir / (entry.file + ".tmp");
  // A previous save's file becomes the temporary: truncating and rewriting an existing file is
  // several times faster than filling a new one on common file systems (block allocation), and
  // no reader can be misled meanwhile, since the metadata that would vouch for it is gone. A file
  // that a loaded matrix maps is left to it: the new one is written beside it and renamed over.
  std::error_code ignored;
  if (std::filesystem::exists(final_path, ignored) && rewritable(final_path))
    std::filesystem::rename(final_path, temp_path, ignored);
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return system_fault("DSparseTensor::save", temp_path.string(), "creating it");
  Checksum sum;
  std::string fault;
  std::int64_t written = 0;
  const auto put = [&](const void* data, std::size_t size) {
    sum.update(data, size);
    written += static_cast<std::int64_t>(size);
    const auto* p = static_cast<const char*>(data);
    while (size > 0 && fault.empty()) {
      const auto w = ::write(fd, p, size);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        fault = system_fault("DSparseTensor::save", temp_path.string(), "writing it");
        break;
      }
      p += w;
      size -= static_cast<std::size_t>(w);
    }
  };
  const auto c = [](const at::Tensor& t) { return t.detach().cpu().contiguous(); };
  const auto rowptr = c(part.rowptr), col = c(part.col), values = c(part.values);
  PartitionHeader h{file_version, id, parts, m, n, part.owned.numel(),
                    part.owned_cols ? part.owned_cols->numel() : -1, part.ghosts.numel(), values.numel(),
                    static_cast<std::int64_t>(part.recv.size() / 2), static_cast<std::int64_t>(part.send.size() / 2),
                    part.send_rows.numel(), rowptr.element_size(), col.element_size(), values.element_size(), 0};
  PartitionSections s;
  sections_of(h, std::numeric_limits<std::int64_t>::max(), s);
  const auto w = h.words();
  put(partition_magic.data(), partition_magic.size());
  put(w.data(), sizeof w);
  const std::array<char, section_alignment> zeros{};
  const auto section = [&](const PartitionSections::Span& span, const void* data) {
    put(zeros.data(), static_cast<std::size_t>(span.begin - written));
    put(data, static_cast<std::size_t>(span.bytes));
  };
  const auto tensor = [&](const PartitionSections::Span& span, const at::Tensor& t) {
    const auto ct = t.numel() ? c(t) : t;
    section(span, ct.numel() ? ct.data_ptr() : nullptr);
  };
  tensor(s.owned, part.owned.to(at::kLong));
  if (part.owned_cols) tensor(s.owned_cols, part.owned_cols->to(at::kLong));
  tensor(s.ghosts, part.ghosts.to(at::kLong));
  section(s.recv, part.recv.data());
  section(s.send, part.send.data());
  tensor(s.send_rows, part.send_rows.to(at::kLong));
  tensor(s.rowptr, rowptr);
  tensor(s.col, col);
  tensor(s.values, values);
  if (fault.empty() && ::fsync(fd) != 0)
    fault = system_fault("DSparseTensor::save", temp_path.string(), "fsync");
  if (::close(fd) != 0 && fault.empty())
    fault = system_fault("DSparseTensor::save", temp_path.string(), "closing it");
  if (fault.empty() && std::rename(temp_path.c_str(), final_path.c_str()) != 0)
    fault = system_fault("DSparseTensor::save", temp_path.string(), "renaming it to " + final_path.string());
  entry.bytes = written;
  entry.checksum = hex(sum.value());
  return fault;
}

/// Writes the metadata atomically; the message of a failure, or "".
inline std::string write_metadata(const std::filesystem::path& dir, const std::string& text) {
  const auto final_path = dir / metadata_name;
  const auto temp_path = dir / (std::string(metadata_name) + ".tmp");
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return system_fault("DSparseTensor::save", temp_path.string(), "creating it");
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return system_fault("DSparseTensor::save", temp_path.string(), "writing it");
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0)
    return system_fault("DSparseTensor::save", temp_path.string(), "renaming it to " + final_path.string());
  return {};
}

/// One partition file read back and checked: its bytes (16-byte aligned storage, so sections view
/// in place) and where its sections lie.
struct LoadedPartition {
  at::Tensor bytes;  // kByte view of the file
  PartitionHeader header;
  PartitionSections sections;
  /// A section as a tensor of `t`, sharing the file's storage (no copy).
  [[nodiscard]] at::Tensor view(const PartitionSections::Span& s, at::ScalarType t) const {
    return bytes.narrow(0, s.begin, s.bytes).view(t);
  }
  [[nodiscard]] static at::ScalarType index_type(std::int64_t size) { return size == 4 ? at::kInt : at::kLong; }
};

/// Reads and checks one partition file; a message naming the file on failure ("" on success).
/// The checksum and the structural checks run chunk by chunk, while the chunk is in cache: no
/// pass over the file's memory of their own.
inline std::string read_partition(const std::filesystem::path& dir, const Metadata& meta, const PartitionEntry& e,
                                  LoadedPartition& out) {
  const auto path = (dir / e.file).string();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return system_fault("DSparseTensor::load", path, "opening it");
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size != e.bytes) {
    ::close(fd);
    return "DSparseTensor::load: " + path + " is truncated or damaged: expected " + std::to_string(e.bytes) +
           " bytes (metadata), found " + std::to_string(st.st_size);
  }
  // The matrix's tensors view these bytes in place: mapped, or else read into one allocation.
  auto bytes = map_file(fd, e.bytes);
  const bool mapped = bytes.defined();
  if (!mapped) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    bytes = at::empty({(e.bytes + 15) / 16, 2}, at::kLong).view(at::kByte).flatten().narrow(0, 0, e.bytes);
  }
  auto* p = static_cast<unsigned char*>(bytes.data_ptr());
  Checksum sum;
  const PartitionExpect want{e.id, meta.partitions, meta.m, meta.n, e.rows, e.nnz, meta.value_size};
  PartitionCheck check(want, e.bytes);
  constexpr std::int64_t chunk = std::int64_t{1} << 18;  // well inside L2 while both passes read it
  std::int64_t done = 0;
  while (done < e.bytes) {
    auto r = std::min(chunk, e.bytes - done);
    if (!mapped) {
      r = ::read(fd, p + done, static_cast<std::size_t>(r));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
    }
    sum.update(p + done, static_cast<std::size_t>(r));
    done += r;
    (void)check.feed(p, done);  // a fault waits for the checksum's verdict
  }
  if (!mapped) ::close(fd);
  if (done != e.bytes)
    return "DSparseTensor::load: " + path + ": expected " + std::to_string(e.bytes) + " bytes from read(), found " +
           std::to_string(done);
  if (hex(sum.value()) != e.checksum)
    return "DSparseTensor::load: " + path + " is corrupt: expected checksum " + e.checksum + " (metadata), found " +
           hex(sum.value());
  out.bytes = bytes;
  const auto fault = check.feed(p, e.bytes);
  out.header = check.header();
  out.sections = check.sections();
  return fault.empty() ? fault : "DSparseTensor::load: " + path + ": " + fault;
}

/// A loaded partition's entries in global indices (the repartitioning load's input).
inline CooEntries global_entries(const LoadedPartition& d, at::ScalarType dtype) {
  const auto& s = d.sections;
  const auto values = d.view(s.values, dtype);
  const auto& h = d.header;
  const auto owned = d.view(s.owned, at::kLong);
  const auto rowptr = d.view(s.rowptr, LoadedPartition::index_type(h.rowptr_size)).to(at::kLong);
  const auto counts = rowptr.slice(0, 1) - rowptr.slice(0, 0, h.R);
  const auto columns = at::cat({h.C < 0 ? owned : d.view(s.owned_cols, at::kLong), d.view(s.ghosts, at::kLong)});
  return {values, at::repeat_interleave(owned, counts, 0, h.K),
          columns.index_select(0, d.view(s.col, LoadedPartition::index_type(h.col_size)).to(at::kLong))};
}

/// Rank 0's verdict on the metadata, read and parsed there: the same Error on every rank, or on
/// every rank the matrix's header and the entries of the partitions it reads (file j goes to rank
/// j mod q). One broadcast of a page carries the verdict and the header (or rank 0's error), one
/// scatter each rank's entries: no rank but rank 0 holds anything of size P.
inline Metadata read_metadata(const std::filesystem::path& dir, MPI_Comm comm) {
  const auto path = (dir / metadata_name).string();
  const int q = comm::size_of(comm), me = comm::rank_of(comm);
  Metadata meta;
  std::string head;  // rank 0: "E<error>", or "M" and the header's words
  std::vector<std::string> lines(me == 0 ? static_cast<std::size_t>(q) : 0);
  if (me == 0) {
    std::string text;
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      head = "E" + system_fault("DSparseTensor::load", path, "opening it") +
             " (is it a directory written by DSparseTensor::save?)";
    } else {
      char buf[1 << 16];
      ssize_t r;
      while ((r = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(r));
      ::close(fd);
      try {
        meta = parse_metadata(text, path);
        if (!dtype_of_name(meta.dtype))
          throw Error("DSparseTensor::load: " + path + ": expected a supported dtype, found '" + meta.dtype + "'");
        std::ostringstream h;
        h << 'M' << meta.version << ' ' << meta.m << ' ' << meta.n << ' ' << meta.dtype << ' ' << meta.value_size
          << ' ' << meta.partitions;
        head = h.str();
        for (const auto& e : meta.parts)
          lines[static_cast<std::size_t>(e.id % q)] += std::to_string(e.id) + ' ' + e.file + ' ' + std::to_string(e.rows) +
                                                       ' ' + std::to_string(e.nnz) + ' ' + std::to_string(e.bytes) +
                                                       ' ' + e.checksum + '\n';
      } catch (const Error& e) {
        head = std::string("E") + e.what();
      }
    }
  }
  // The page: the verdict's length (at most a page: an error names a path and a line), then it.
  constexpr std::size_t page = 4096;
  std::vector<char> buffer(page, '\0');
  head.resize(std::min(head.size(), page - 1));
  std::copy(head.begin(), head.end(), buffer.begin());
  comm::broadcast_values(std::span<char>(buffer), 0, comm);
  head.assign(buffer.data());
  if (head.front() != 'M') throw Error(head.substr(1));
  if (me != 0) {
    std::istringstream h(head.substr(1));
    h >> meta.version >> meta.m >> meta.n >> meta.dtype >> meta.value_size >> meta.partitions;
  }
  const auto mine = comm::scatter_strings(lines, 0, comm);
  std::istringstream in(mine);
  meta.parts.clear();
  for (PartitionEntry e; in >> e.id >> e.file >> e.rows >> e.nnz >> e.bytes >> e.checksum;) meta.parts.push_back(e);
  return meta;
}

/// Creates `dir` on rank 0 and removes a previous save's metadata (so a save that dies half way
/// leaves no metadata that could vouch for mixed files); the same Error on every rank on failure.
inline void prepare_directory(const std::filesystem::path& dir, MPI_Comm comm) {
  std::string fault;
  if (comm::rank_of(comm) == 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir))
      fault = "DSparseTensor::save: " + dir.string() + ": expected creating the directory to succeed, found \"" +
              ec.message() + "\"";
    else
      std::filesystem::remove(dir / metadata_name, ec);
  }
  comm::raise_if_any(comm, fault);
}

/// The (rank, count) pairs of a plan's neighbours.
inline std::vector<std::int64_t> neighbour_pairs(const std::vector<int>& ranks, const std::vector<std::int64_t>& offsets) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    out.push_back(ranks[i]);
    out.push_back(offsets[i + 1] - offsets[i]);
  }
  return out;
}

/// What a load at the saved world size must agree on before it builds anything: whether each
/// rank's read failed, whether each domain has a partition of its own, and whether each rank's
/// file sends what its neighbours' files expect to receive (a mismatched plan would hang or
/// truncate the exchange). One all-reduce settles the first two; for the third each rank tells the
/// ranks it receives from how much it expects (a sparse exchange with its neighbours only) and one
/// all-reduce finds the first mismatched plan; each fault is the same Error on every rank. `read`
/// is this rank's file, or null when reading it failed with `fault`.
inline void agree_saved(const LoadedPartition* read, const std::string& fault, const Metadata& meta,
                        const std::filesystem::path& dir, MPI_Comm comm) {
  const int p = comm::size_of(comm), me = comm::rank_of(comm);
  const int own = read && read->header.C >= 0 ? 1 : 0;
  std::array<int, 3> v{read ? p : me, own, -own};  // first failed rank; every rank's own-domain flag alike
  comm::all_reduce_values(std::span<int>(v), comm::Reduction::min, comm);
  if (v[0] < p) comm::raise_from(comm, v[0], fault);
  const bool same = v[1] == -v[2] && (v[1] != 0 || meta.m == meta.n);  // a rectangular matrix always has its own
  if (!same)
    throw Error("DSparseTensor::load: " + dir.string() +
                ": expected partition files that agree on the columns' partition, found files that disagree "
                "(files of different saves mixed?)");
  const auto& h = read->header;
  const auto recv = read->view(read->sections.recv, at::kLong), send = read->view(read->sections.send, at::kLong);
  const auto* rp = recv.data_ptr<std::int64_t>();
  const auto* sp = send.data_ptr<std::int64_t>();
  std::vector<comm::Parcel<std::int64_t>> expect;
  for (std::int64_t i = 0; i < h.NR; ++i)
    if (rp[2 * i + 1] != 0) expect.push_back({static_cast<int>(rp[2 * i]), {rp[2 * i + 1]}});
  std::vector<std::pair<std::int64_t, std::int64_t>> sends;  // (rank, count) this file sends
  for (std::int64_t i = 0; i < h.NS; ++i)
    if (sp[2 * i + 1] != 0) sends.emplace_back(sp[2 * i], sp[2 * i + 1]);
  std::sort(sends.begin(), sends.end());
  bool agree = true;
  for (const auto& e : expect) agree = agree && e.peer >= 0 && e.peer < p;
  if (agree) {  // a peer out of range is this file's mismatch, not the exchange's error
    const auto expected = comm::sparse_exchange(expect, comm);
    agree = expected.size() == sends.size();
    for (std::size_t k = 0; agree && k < sends.size(); ++k)
      agree = expected[k].peer == sends[k].first && expected[k].values.at(0) == sends[k].second;
  } else {
    (void)comm::sparse_exchange(std::vector<comm::Parcel<std::int64_t>>{}, comm);
  }
  const int first = comm::all_reduce_value(agree ? p : me, comm::Reduction::min, comm);
  if (first < p)  // the message names the file of the first rank at fault, which only that rank holds
    comm::raise_from(comm, first,
                     "DSparseTensor::load: " + (dir / meta.parts.at(0).file).string() +
                         ": expected the halo plan the other partitions' files expect, found another "
                         "(files of different saves mixed?)");
}

/// The halo plan a file holds, over `domain` (checked by `agree_saved`).
inline std::shared_ptr<const HaloPlan> saved_plan(const LoadedPartition& d, std::shared_ptr<const RowLayout> domain) {
  const auto& h = d.header;
  const auto& s = d.sections;
  auto plan = std::make_shared<HaloPlan>();
  const auto recv = d.view(s.recv, at::kLong), send = d.view(s.send, at::kLong);
  const auto* rp = recv.data_ptr<std::int64_t>();
  const auto* sp = send.data_ptr<std::int64_t>();
  plan->recv_offsets.push_back(0);
  for (std::int64_t i = 0; i < h.NR; ++i) {
    plan->recv_ranks.push_back(static_cast<int>(rp[2 * i]));
    plan->recv_offsets.push_back(plan->recv_offsets.back() + rp[2 * i + 1]);
  }
  plan->send_offsets.push_back(0);
  for (std::int64_t i = 0; i < h.NS; ++i) {
    plan->send_ranks.push_back(static_cast<int>(sp[2 * i]));
    plan->send_offsets.push_back(plan->send_offsets.back() + sp[2 * i + 1]);
  }
  plan->ghosts = d.view(s.ghosts, at::kLong);
  plan->send_rows = d.view(s.send_rows, at::kLong);
  plan->layout = std::move(domain);
  return plan;
}

}  // namespace detail

EINSHARD_INLINE void DSparseTensor::save(const std::string& directory) const {
  const MPI_Comm comm = layout_->comm();
  const std::filesystem::path dir(directory);
  detail::prepare_directory(dir, comm);
  const int p = layout_->size(), me = layout_->rank();
  detail::PartitionParts part{layout_->owned(),
                              domain_.get() == layout_.get() ? std::nullopt : std::optional<at::Tensor>(domain_->owned()),
                              plan_->ghosts,
                              detail::neighbour_pairs(plan_->recv_ranks, plan_->recv_offsets),
                              detail::neighbour_pairs(plan_->send_ranks, plan_->send_offsets),
                              plan_->send_rows,
                              local_.rowptr,
                              local_.col,
                              local_.values};
  detail::PartitionEntry mine;
  comm::raise_if_any(comm, detail::write_partition(dir, me, p, m_, n_, part, mine));
  // Rank 0 learns every partition's line (a gather: the other ranks hold nothing of size P), then
  // writes the metadata last.
  const auto sum = std::stoull(mine.checksum, nullptr, 16);
  const std::array<std::int64_t, 5> line{mine.id, mine.rows, mine.nnz, mine.bytes, static_cast<std::int64_t>(sum)};
  const auto got = comm::gather_values(line, 0, comm);
  std::string fault;
  if (me == 0) {
    std::vector<detail::PartitionEntry> parts;
    for (std::size_t r = 0; r < got.size(); r += line.size()) {
      const auto* g = got.data() + r;
      parts.push_back({g[0], g[1], g[2], g[3], detail::partition_file_name(g[0]),
                       detail::hex(static_cast<std::uint64_t>(g[4]))});
    }
    fault = detail::write_metadata(dir, detail::metadata_text(m_, n_, detail::dtype_name(dtype()), parts));
  }
  comm::raise_if_any(comm, fault);
}

EINSHARD_INLINE DSparseTensor DSparseTensor::load(const std::string& directory, const Mesh& mesh,
                                                  const LoadOptions& options) {
  if (!mesh) throw Error("DSparseTensor::load: expected a mesh, found an empty one");
  const auto placed = [&options](DSparseTensor m) { return options.device.is_cpu() ? m : m.to(options.device); };
  const MPI_Comm comm = mesh.comm();
  const std::filesystem::path dir(directory);
  const auto meta = detail::read_metadata(dir, comm);
  const auto dtype = *detail::dtype_of_name(meta.dtype);
  const int q = comm::size_of(comm);
  const auto parts = meta.partitions;
  // File j goes to rank j mod q (the entries read_metadata gave this rank): at the saved world size
  // each rank reads its own.
  std::vector<detail::LoadedPartition> read;
  std::string fault;
  for (const auto& entry : meta.parts) {
    detail::LoadedPartition d;
    fault = detail::read_partition(dir, meta, entry, d);
    read.push_back(std::move(d));
    if (!fault.empty()) break;
  }
  if (parts == q) {
    detail::agree_saved(fault.empty() ? &read.at(0) : nullptr, fault, meta, dir, comm);
    const auto& d = read.at(0);
    const auto& h = d.header;
    const auto& s = d.sections;
    auto layout = std::make_shared<const RowLayout>(detail::AdoptRows{}, d.view(s.owned, at::kLong), meta.m, comm);
    auto domain = h.C < 0 ? layout : std::make_shared<const RowLayout>(detail::AdoptRows{}, d.view(s.owned_cols, at::kLong), meta.n, comm);
    auto plan = detail::saved_plan(d, domain);
    Csr local{h.R, h.domain_owned() + h.G, d.view(s.rowptr, detail::LoadedPartition::index_type(h.rowptr_size)),
              d.view(s.col, detail::LoadedPartition::index_type(h.col_size)), d.view(s.values, dtype)};
    return placed(DSparseTensor(mesh, std::move(layout), std::move(domain), std::move(plan), std::move(local)));
  }
  comm::raise_if_any(comm, fault);
  std::vector<at::Tensor> values, rows, cols;
  for (const auto& d : read) {
    auto t = detail::global_entries(d, dtype);
    values.push_back(std::move(t.values));
    rows.push_back(std::move(t.rows));
    cols.push_back(std::move(t.cols));
  }
  const auto cat = [](const std::vector<at::Tensor>& v, at::ScalarType t) {
    return v.empty() ? at::empty({0}, t) : at::cat(v);
  };
  const std::array<std::int64_t, 2> shape{meta.m, meta.n};
  return placed(from_local(cat(values, dtype), cat(rows, at::kLong), cat(cols, at::kLong), shape, mesh));
}

EINSHARD_INLINE void save_partitioned(const SparseTensor& A, const std::string& directory, int parts,
                                      const PartitionOptions& options) {
  if (A.rows() != A.cols())
    throw Error("save_partitioned: expected a square matrix, found shape (" + std::to_string(A.rows()) + ", " +
                std::to_string(A.cols()) + ")");
  if (parts < 1) throw Error("save_partitioned: expected at least 1 part, found " + std::to_string(parts));
  const std::filesystem::path dir(directory);
  detail::prepare_directory(dir, MPI_COMM_SELF);
  const auto n = A.rows();
  const auto ids = partition_ids(A.row_indices(), A.col_indices(), n, parts, options).to(at::kLong);
  const auto rows = A.row_indices().to(at::kLong), cols = A.col_indices().to(at::kLong);
  const auto row_part = ids.index_select(0, rows), col_part = ids.index_select(0, cols);
  // As the halo handshake orders them: ghosts by owner, then by index (key = owner * n + index).
  std::vector<at::Tensor> owned(static_cast<std::size_t>(parts)), keys(static_cast<std::size_t>(parts)),
      keep(static_cast<std::size_t>(parts));
  for (int r = 0; r < parts; ++r) {
    const auto i = static_cast<std::size_t>(r);
    owned[i] = (ids == r).nonzero().flatten();
    keep[i] = (row_part == r).nonzero().flatten();
    const auto c = cols.index_select(0, keep[i]), o = col_part.index_select(0, keep[i]);
    keys[i] = std::get<0>(at::_unique(o.masked_select(o != r) * n + c.masked_select(o != r), /*sorted=*/true));
  }
  std::vector<detail::PartitionEntry> entries(static_cast<std::size_t>(parts));
  for (int r = 0; r < parts; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const auto R = owned[i].numel();
    const auto ghost_owner = at::div(keys[i], n, "floor"), ghosts = keys[i] - ghost_owner * n;
    detail::PartitionParts part{owned[i], std::nullopt, ghosts, {}, {}, {}, {}, {}, {}};
    for (int s = 0; s < parts; ++s) {
      const auto c = (ghost_owner == s).sum().item<std::int64_t>();
      if (c > 0) part.recv.insert(part.recv.end(), {s, c});
    }
    std::vector<at::Tensor> send;
    for (int s = 0; s < parts; ++s) {
      const auto k = keys[static_cast<std::size_t>(s)];
      const auto mine = k.masked_select(at::div(k, n, "floor") == r) - static_cast<std::int64_t>(r) * n;
      if (s == r || mine.numel() == 0) continue;
      part.send.insert(part.send.end(), {s, mine.numel()});
      send.push_back(at::searchsorted(owned[i], mine));
    }
    part.send_rows = send.empty() ? at::empty({0}, at::kLong) : at::cat(send);
    const auto er = rows.index_select(0, keep[i]), ec = cols.index_select(0, keep[i]);
    const auto eo = col_part.index_select(0, keep[i]);
    const auto local_col = at::where(eo == r, at::searchsorted(owned[i], ec),
                                     R + at::searchsorted(keys[i], eo * n + ec));
    const auto local = detail::coo_to_csr(A.values().detach().index_select(0, keep[i]),
                                          at::searchsorted(owned[i], er), local_col, R, R + ghosts.numel());
    part.rowptr = local.rowptr;
    part.col = local.col;
    part.values = local.values;
    const auto fault = detail::write_partition(dir, r, parts, n, n, part, entries[i]);
    if (!fault.empty()) throw Error(fault);
  }
  const auto fault = detail::write_metadata(dir, detail::metadata_text(n, n, detail::dtype_name(A.dtype()), entries));
  if (!fault.empty()) throw Error(fault);
}

#endif  // EINSHARD_DEFINE_SPARSE

}  // namespace einshard::sparse
