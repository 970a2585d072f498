#pragma once
/// @file
/// How many of k right-hand sides iterate together. A block of k columns reads the matrix once for
/// all of them and makes one all-reduce per step for all of them, but its vectors are k times a
/// single solve's: where a single solve's vectors stay in the last-level cache and a block's do
/// not, every block pass streams from memory and the block is slower per column than k single
/// solves (2-D Poisson, 10⁵ rows, one rank, a 32 MiB cache: CG's block of 8 took 1.6–2.2x the time of
/// its 8 single solves, of 32 4.2x). So a block solve runs its columns in groups that fit this rank's
/// share of the cache, one group after another. The columns' recurrences are independent, so a
/// group's iterates are exactly those of the whole block.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include "einshard/comm/reduce.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse::detail {

/// The last-level cache in bytes, as Linux's sysfs reports it for CPU 0 (what `lscpu` shows; the
/// CPUID that sysconf reads is often wrong in virtual machines), else sysconf's; 0 when neither
/// knows. Read once.
inline std::int64_t last_level_cache_bytes() {
  static const std::int64_t bytes = [] {
    std::int64_t best = 0;
    for (int index = 0; index < 8; ++index) {
      std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
      std::string size;
      if (!(in >> size) || size.empty()) continue;
      const char unit = size.back();
      const std::int64_t scale = unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? 1024LL << 30 : 1;
      best = std::max<std::int64_t>(best, std::atoll(size.c_str()) * scale);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best == 0) best = std::max<std::int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
    return best;
  }();
  return bytes;
}

/// The ranks of this launch on this node, which share its cache, from the launcher's environment
/// (Open MPI, MPICH, Slurm); 1 when none says. Local: no collective.
inline std::int64_t ranks_on_this_node() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(name); v != nullptr && std::atoll(v) > 0) return static_cast<std::int64_t>(std::atoll(v));
  return 1;
}

/// The widest group of a block solve's k columns whose `vectors` blocks of (rows, width) elements of
/// `item` bytes fit in `cache_bytes`: all k when they do, else 8, 4, 2 or 1; all k when not even
/// one column's fit (every group would stream from memory: the whole block reads the matrix once)
/// or when the cache is unknown (0).
inline std::int64_t column_group_width(std::int64_t k, std::int64_t rows, std::int64_t vectors, std::int64_t item,
                                       std::int64_t cache_bytes) {
  const auto fits = [&](std::int64_t width) { return vectors * rows * width * item <= cache_bytes; };
  if (cache_bytes <= 0 || fits(k) || !fits(1)) return k;
  for (const std::int64_t width : {8, 4, 2})
    if (width < k && fits(width)) return width;
  return 1;
}

/// The blocks of (n_local, k) a block method holds.
inline std::int64_t block_vectors(const SolveOptions& o) {
  switch (o.method) {
    case Method::cg: return o.cg_variant == CgVariant::standard ? 5 : 7;
    case Method::bicgstab: return 9;
    case Method::minres: return 9;
    case Method::gmres: return o.restart + 4;
    case Method::fgmres: return 2 * o.restart + 4;
    case Method::lsqr:
    case Method::lsmr: return 1;  // column by column already
  }
  return 1;
}

/// Columns iterated together: `o.block_columns` when set, else the widest group that fits every
/// rank's share of its node's cache (one all-reduce: the same width on every rank).
inline std::int64_t column_group_width(const DVector& b, const SolveOptions& o) {
  const auto k = b.local().size(1);
  if (o.block_columns > 0) return std::min<std::int64_t>(o.block_columns, k);
  if (!b.local().is_cpu()) return k;  // a device's memory, not a CPU cache
  const auto share = last_level_cache_bytes() / ranks_on_this_node();
  const auto mine = column_group_width(k, b.local().size(0), block_vectors(o), b.local().element_size(), share);
  return comm::all_reduce_value(mine, comm::Reduction::min, b.layout()->comm());
}

/// `solve_block(b_g, o_g)` over the column groups of `b` of `width` columns (x0 sliced alike), their
/// solutions and columns' records joined as one block solve's.
template <class SolveBlock>
SolveResult solve_in_column_groups(const DVector& b, const SolveOptions& o, std::int64_t width,
                                   const std::shared_ptr<const RowLayout>& domain, SolveBlock&& solve_block) {
  const auto k = b.local().size(1);
  SolveResult result;
  auto x = at::empty({domain->local_size(), k}, b.local().options());
  for (std::int64_t j0 = 0; j0 < k; j0 += width) {
    const auto w = std::min(width, k - j0);
    auto og = o;
    if (o.x0) og.x0 = DVector(domain, o.x0->local().narrow(1, j0, w).contiguous());
    auto r = solve_block(DVector(b.layout(), b.local().narrow(1, j0, w).contiguous()), og);
    x.narrow(1, j0, w).copy_(r.x.local());
    result.info.seconds += r.info.seconds;
    for (auto& c : r.info.columns) result.info.columns.push_back(std::move(c));
  }
  summarize_columns(result.info);
  result.x = DVector(domain, x);
  return result;
}

}  // namespace einshard::sparse::detail
