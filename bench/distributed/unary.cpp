// Distributed unary einshard against hand-written MPI doing the same logical operation.
//
// Run under mpirun (any number of ranks; 2 and 4 are the measured ones; the cross-mesh cases run at
// exactly 4, the tiny one when the rank count divides 4). Every case builds the same
// input on every rank, then times its variants interleaved round by round (the order rotates each
// round, so no variant always runs first), with an MPI_Barrier before every timed operation. One
// operation's time is the maximum over the ranks of the per-rank elapsed time (MPI_Allreduce MAX):
// the time of the collective as a whole. Before timing, every variant's result is compared with
// einshard's (at::equal, all data integer-valued so every summation order is exact): the
// variants do equal work, or the program stops with an error.
//
// Variants (which ones a case has is listed with the case):
//   einshard            es::einshard<"...">(x, {.mesh = mesh}); a fresh result tensor per call
//   *_raw               the bare MPI collective on buffers allocated and packed once, outside the
//                       timing: the "raw MPI on the same bytes"
//   mpi_*               a hand-written MPI program: its pack/unpack/slice copies, buffers kept
//                       across calls (a tuned loop would keep them)
//   mpi_*_alloc         the same, allocating its result tensor per call as einshard must
//   subarray_p2p_alloc  comm::exchange_boxes's first method written out by hand: MPI_Isend/
//                       MPI_Irecv with MPI_Type_create_subarray, no packing
//   pack_p2p_alloc      the alternative: pack each peer's block contiguously, Isend/Irecv
//   *_2sync             (split_gather) the hand-written code plus the two small MPI_Allgathers
//                       that einshard's two calls make to agree on metadata
//
// Output: JSON lines on rank 0, one per (einshard variant, anchor variant) of each case:
//   {"bench":"distributed","case":...,"ranks":P,"mib_per_rank":...,"einshard":...,"anchor":...,
//    "einshard_ms":median,"anchor_ms":median,"ratio":einshard_ms/anchor_ms,
//    "ratio_paired":median over rounds of the same-round ratio,"einshard_p10_ms":...,...}
// plus a "reduce_scatter_choice" line per size (which algorithm is faster here).
//
//   mpirun -n 4 einshard_bench_distributed [--quick] [--iters N] [--case NAME]... [--mib LIST] [--list]
//
//   --quick      small sizes and few rounds (a smoke test)
//   --iters N    timed rounds per case (default 15; the tiny case runs 100x as many)
//   --case NAME  run only cases whose name starts with NAME (repeatable, or comma-separated)
//   --mib LIST   sizes per rank in MiB for every sized case, e.g. 16,64 (default: 16,128 for the
//                repartitions, 16,64 for the others; float64 repartition: 16)
//   --list       print the case names and exit
// Environment: EINSHARD_NUM_THREADS (intra-op threads per rank, default 1).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <einshard/einshard.hpp>

namespace es = einshard;

namespace {

constexpr double MiB = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------
// Small utilities.

struct Config {
  bool quick = false;
  int iters = 15;
  std::vector<std::string> only;
  std::vector<double> mib;  // overrides every case's sizes
  bool list = false;
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int threads_from_env() {
  const char* value = std::getenv("EINSHARD_NUM_THREADS");
  if (value == nullptr || *value == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return (end != value && *end == '\0' && n > 0 && n < 1024) ? static_cast<int>(n) : 1;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string num(double v, const char* fmt = "%.5g") {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << '(';
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? "," : "") << t.size(d);
  s << ')';
  return s.str();
}

void mpi_check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw std::runtime_error(std::string(what) + " failed");
}

MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    default: throw std::runtime_error("bench: float32 or float64 only");
  }
}

/// Integer-valued data (exact in float32 sums of a few ranks): element i of the global tensor.
at::Tensor pattern(std::int64_t first, std::int64_t n, at::ScalarType dtype) {
  return (at::arange(first, first + n, at::kLong).remainder(1021) - 510).to(dtype);
}

/// Rows of a 2-D tensor of `cols` columns holding about `bytes` bytes, rounded down to a
/// multiple of `multiple` (at least `multiple`).
std::int64_t rows_for(double bytes, std::int64_t cols, std::int64_t element, std::int64_t multiple) {
  auto rows = static_cast<std::int64_t>(bytes / static_cast<double>(cols * element));
  rows = std::max<std::int64_t>(rows / multiple, 1) * multiple;
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Cases and the interleaved timing loop.

struct Variant {
  std::string name;
  bool einshard = false;                // an einshard variant (else an anchor)
  std::function<at::Tensor()> fn;
  /// For the check only, when `fn` leaves its result in another layout (read after `fn` ran).
  std::function<at::Tensor()> result = {};
};

struct Case {
  std::string name;       // e.g. "repartition"
  std::string notation;   // what einshard runs
  std::string mesh;       // e.g. "(4)" or "(2,2)"
  std::string dtype;
  std::string shape;      // local input shape on rank 0
  double mib_per_rank = 0;
  int rounds = 0;
  bool report_us = false;  // tiny case: also print microseconds
  std::vector<Variant> variants;
  std::function<void()> setup;  // run once (all ranks) before the check, e.g. to pre-pack
};

struct Timings {
  std::vector<std::vector<double>> ms;  // [variant][round]
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "einshard_bench_distributed: rank %d: %s\n", world_rank(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

/// Runs every variant once and compares its result with the first variant's (einshard's) on
/// every rank. Any mismatch anywhere stops the program.
void check_case(const Case& c) {
  const auto reference = c.variants.front().fn();
  for (std::size_t v = 1; v < c.variants.size(); ++v) {
    auto out = c.variants[v].fn();
    if (c.variants[v].result) out = c.variants[v].result();
    int bad = 0;
    std::string why;
    if (out.sizes() != reference.sizes()) {
      bad = 1;
      why = "shape " + shape_of(out) + " vs " + shape_of(reference);
    } else if (!at::equal(out, reference)) {
      bad = 1;
      why = "values differ (max |diff| " +
            std::to_string((out.to(at::kDouble) - reference.to(at::kDouble)).abs().max().item<double>()) + ")";
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any)
      fail("case '" + c.name + "' (" + num(c.mib_per_rank) + " MiB): variant '" + c.variants[v].name +
           "' does not compute what '" + c.variants.front().name + "' computes" +
           (bad ? ": " + why : std::string(" (on another rank)")));
  }
}

Timings time_case(const Case& c) {
  const auto V = c.variants.size();
  Timings t;
  t.ms.assign(V, {});
  // One untimed warm-up round (first-touch of buffers, MPI connection setup, communicators).
  for (const auto& v : c.variants) {
    MPI_Barrier(MPI_COMM_WORLD);
    (void)v.fn();
  }
  for (int round = 0; round < c.rounds; ++round) {
    for (std::size_t k = 0; k < V; ++k) {
      const auto v = (k + static_cast<std::size_t>(round)) % V;
      double elapsed = 0;
      {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        const auto result = c.variants[v].fn();
        elapsed = MPI_Wtime() - t0;
      }  // the result is freed here, outside the timing
      double slowest = 0;
      MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t.ms[v].push_back(slowest * 1e3);
    }
  }
  return t;
}

void report(const Case& c, const Timings& t, const std::string& extra) {
  if (world_rank() != 0) return;
  for (std::size_t e = 0; e < c.variants.size(); ++e) {
    if (!c.variants[e].einshard) continue;
    for (std::size_t a = 0; a < c.variants.size(); ++a) {
      if (c.variants[a].einshard) continue;
      const auto& te = t.ms[e];
      const auto& ta = t.ms[a];
      std::vector<double> paired;
      for (std::size_t i = 0; i < te.size(); ++i) paired.push_back(te[i] / ta[i]);
      const double em = quantile(te, 0.5), am = quantile(ta, 0.5);
      std::string line = "{\"bench\":\"distributed\",\"case\":" + json_string(c.name) +
                         ",\"notation\":" + json_string(c.notation) +
                         ",\"ranks\":" + std::to_string(world_size()) +
                         ",\"mesh\":" + json_string(c.mesh) + ",\"dtype\":" + json_string(c.dtype) +
                         ",\"shape\":" + json_string(c.shape) +
                         ",\"mib_per_rank\":" + num(c.mib_per_rank, "%.4g") +
                         ",\"einshard\":" + json_string(c.variants[e].name) +
                         ",\"anchor\":" + json_string(c.variants[a].name) +
                         ",\"einshard_ms\":" + num(em) + ",\"anchor_ms\":" + num(am) +
                         ",\"ratio\":" + num(em / am, "%.4f") +
                         ",\"ratio_paired\":" + num(quantile(paired, 0.5), "%.4f") +
                         ",\"einshard_p10_ms\":" + num(quantile(te, 0.1)) +
                         ",\"einshard_p90_ms\":" + num(quantile(te, 0.9)) +
                         ",\"anchor_p10_ms\":" + num(quantile(ta, 0.1)) +
                         ",\"anchor_p90_ms\":" + num(quantile(ta, 0.9));
      if (c.report_us)
        line += ",\"einshard_us\":" + num(em * 1e3, "%.2f") + ",\"anchor_us\":" + num(am * 1e3, "%.2f") +
                ",\"overhead_us\":" + num((em - am) * 1e3, "%.2f");
      line += ",\"rounds\":" + std::to_string(te.size()) + extra + "}";
      std::printf("%s\n", line.c_str());
    }
  }
  std::fflush(stdout);
}

/// The steps and this rank's bytes of einshard's last call, as extra JSON fields.
std::string plan_fields() {
  const auto& p = es::last_plan();
  std::string names;
  for (const auto& n : p.names()) names += (names.empty() ? "" : ",") + n;
  const auto f = p.total_forward();
  return ",\"steps\":" + json_string(names) + ",\"bytes_sent_rank0\":" + std::to_string(f.bytes_sent) +
         ",\"bytes_received_rank0\":" + std::to_string(f.bytes_received);
}

/// Runs a case: setup, check, time, report. Returns the timings (for cross-case summaries).
Timings run_case(Case& c) {
  if (c.setup) c.setup();
  check_case(c);
  // The plan of einshard's call on rank 0, for the report (the check ran einshard last among the
  // einshard variants only if it is first; run it once more to be sure the plan is its own).
  (void)c.variants.front().fn();
  const auto plan = plan_fields();
  auto t = time_case(c);
  report(c, t, plan);
  return t;
}

bool wanted(const Config& cfg, const std::string& name) {
  if (cfg.only.empty()) return true;
  return std::any_of(cfg.only.begin(), cfg.only.end(),
                     [&](const std::string& o) { return name.rfind(o, 0) == 0; });
}

// ---------------------------------------------------------------------------------------------
// Hand-written MPI building blocks.

/// Packs the column blocks of a rows x cols row-major matrix into `parts` consecutive
/// rows x (cols/parts) blocks: block k holds columns [k*cols/parts, (k+1)*cols/parts).
void pack_column_blocks(const std::byte* src, std::byte* dst, std::int64_t rows, std::int64_t cols,
                        std::int64_t parts, std::int64_t element) {
  const auto width = cols / parts;
  const auto row_bytes = static_cast<std::size_t>(width * element);
  for (std::int64_t k = 0; k < parts; ++k)
    for (std::int64_t i = 0; i < rows; ++i)
      std::memcpy(dst + (k * rows + i) * width * element, src + (i * cols + k * width) * element, row_bytes);
}

struct Subarray {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  Subarray(std::vector<int> sizes, std::vector<int> subsizes, std::vector<int> starts, MPI_Datatype elem) {
    mpi_check(MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), subsizes.data(),
                                       starts.data(), MPI_ORDER_C, elem, &type),
              "MPI_Type_create_subarray");
    MPI_Type_commit(&type);
  }
  Subarray(const Subarray&) = delete;
  Subarray& operator=(const Subarray&) = delete;
  ~Subarray() { MPI_Type_free(&type); }
};

// ---------------------------------------------------------------------------------------------
// Case: repartition `a/dp b -> a b/dp` on a 1-D mesh of all ranks.
//
// Rank r holds rows [r*R, (r+1)*R) of an (R*P) x B matrix; afterwards it holds columns
// [r*C, (r+1)*C), C = B/P, of all rows. Each rank sends an R x C block to every other rank.

Case repartition(const es::Mesh& mesh, double mib, at::ScalarType dtype, std::int64_t cols_hint,
                 bool investigate) {
  const int P = mesh.size(), me = mesh.rank();
  const auto e = static_cast<std::int64_t>(at::elementSize(dtype));
  const std::int64_t B = cols_hint % P == 0 ? cols_hint : 512 * P;
  const std::int64_t C = B / P;
  const std::int64_t R = rows_for(mib * MiB, B, e, 1);
  const std::int64_t A = R * P;
  const auto x = pattern(me * R * B, R * B, dtype).reshape({R, B});
  const MPI_Comm comm = mesh.comm();
  const MPI_Datatype elem = mpi_type(dtype);
  const int block = static_cast<int>(R * C);
  std::vector<int> counts(static_cast<std::size_t>(P), block), displs(static_cast<std::size_t>(P));
  for (int k = 0; k < P; ++k) displs[static_cast<std::size_t>(k)] = k * block;

  // Buffers the anchors keep across calls.
  auto packed = at::empty({R * B}, x.options());      // raw: packed once in setup
  auto pack_scratch = at::empty({R * B}, x.options());  // mpi_*: packed every call
  auto raw_out = at::empty({A, C}, x.options());
  auto kept_out = at::empty({A, C}, x.options());

  Case c;
  c.name = "repartition";
  c.notation = "a/dp b -> a b/dp";
  c.mesh = "(" + std::to_string(P) + ")";
  c.dtype = dtype == at::kFloat ? "float32" : "float64";
  c.shape = shape_of(x);
  c.mib_per_rank = static_cast<double>(R * B * e) / MiB;
  c.setup = [=] {
    pack_column_blocks(static_cast<const std::byte*>(x.const_data_ptr()),
                       static_cast<std::byte*>(packed.data_ptr()), R, B, P, e);
  };
  c.variants.push_back({"einshard", true, [=] {
                          return es::einshard<"a/dp b -> a b/dp">(x, {.mesh = mesh});
                        }});
  // The anchor: MPI_Alltoallv alone, on already packed contiguous blocks.
  c.variants.push_back({"alltoallv_raw", false, [=] {
                          mpi_check(MPI_Alltoallv(packed.const_data_ptr(), counts.data(), displs.data(), elem,
                                                  raw_out.data_ptr(), counts.data(), displs.data(), elem, comm),
                                    "MPI_Alltoallv");
                          return raw_out;
                        }});
  // A hand-written repartition: pack, all-to-all; the received blocks are already the result's
  // rows in order (no unpack needed).
  auto pack_alltoallv = [=](at::Tensor out) {
    pack_column_blocks(static_cast<const std::byte*>(x.const_data_ptr()),
                       static_cast<std::byte*>(pack_scratch.data_ptr()), R, B, P, e);
    mpi_check(MPI_Alltoallv(pack_scratch.const_data_ptr(), counts.data(), displs.data(), elem,
                            out.data_ptr(), counts.data(), displs.data(), elem, comm),
              "MPI_Alltoallv");
    return out;
  };
  c.variants.push_back({"mpi_pack_alltoallv", false, [=] { return pack_alltoallv(kept_out); }});
  c.variants.push_back({"mpi_pack_alltoallv_alloc", false,
                        [=] { return pack_alltoallv(at::empty({A, C}, x.options())); }});
  if (investigate) {
    // The first comm::exchange_boxes, by hand: subarray datatypes on both sides, no packing.
    c.variants.push_back({"subarray_p2p_alloc", false, [=] {
                            auto out = at::empty({A, C}, x.options());
                            std::vector<std::unique_ptr<Subarray>> types;
                            std::vector<MPI_Request> req;
                            for (int q = 0; q < P; ++q) {
                              if (q == me) continue;
                              types.push_back(std::make_unique<Subarray>(
                                  std::vector<int>{static_cast<int>(A), static_cast<int>(C)},
                                  std::vector<int>{static_cast<int>(R), static_cast<int>(C)},
                                  std::vector<int>{static_cast<int>(q * R), 0}, elem));
                              req.emplace_back();
                              MPI_Irecv(out.data_ptr(), 1, types.back()->type, q, 7101, comm, &req.back());
                            }
                            for (int q = 0; q < P; ++q) {
                              if (q == me) continue;
                              types.push_back(std::make_unique<Subarray>(
                                  std::vector<int>{static_cast<int>(R), static_cast<int>(B)},
                                  std::vector<int>{static_cast<int>(R), static_cast<int>(C)},
                                  std::vector<int>{0, static_cast<int>(q * C)}, elem));
                              req.emplace_back();
                              MPI_Isend(x.const_data_ptr(), 1, types.back()->type, q, 7101, comm, &req.back());
                            }
                            out.narrow(0, me * R, R).copy_(x.narrow(1, me * C, C));
                            MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE);
                            return out;
                          }});
    // The alternative: pack each peer's block contiguously, then contiguous Isend/Irecv.
    c.variants.push_back({"pack_p2p_alloc", false, [=] {
                            auto out = at::empty({A, C}, x.options());
                            std::vector<MPI_Request> req;
                            for (int q = 0; q < P; ++q) {
                              if (q == me) continue;
                              req.emplace_back();
                              MPI_Irecv(static_cast<std::byte*>(out.data_ptr()) + q * R * C * e, block, elem, q,
                                        7101, comm, &req.back());
                            }
                            auto* scratch = static_cast<std::byte*>(pack_scratch.data_ptr());
                            const auto* src = static_cast<const std::byte*>(x.const_data_ptr());
                            for (int q = 0; q < P; ++q) {
                              auto* dst = q == me ? static_cast<std::byte*>(out.data_ptr()) + me * R * C * e
                                                  : scratch + q * R * C * e;
                              for (std::int64_t i = 0; i < R; ++i)
                                std::memcpy(dst + i * C * e, src + (i * B + q * C) * e,
                                            static_cast<std::size_t>(C * e));
                              if (q == me) continue;
                              req.emplace_back();
                              MPI_Isend(scratch + q * R * C * e, block, elem, q, 7101, comm, &req.back());
                            }
                            MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE);
                            return out;
                          }});
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Case: tiny repartition (4 x 4 global): the fixed per-call cost.

Case tiny(const es::Mesh& mesh) {
  const int P = mesh.size(), me = mesh.rank();
  const std::int64_t A = 4, B = 4;  // global 4 x 4 (P must divide 4)
  const std::int64_t R = A / P, C = B / P;
  const auto x = pattern(me * R * B, R * B, at::kFloat).reshape({R, B});
  const MPI_Comm comm = mesh.comm();
  const int block = static_cast<int>(R * C);
  std::vector<int> counts(static_cast<std::size_t>(P), block), displs(static_cast<std::size_t>(P));
  for (int k = 0; k < P; ++k) displs[static_cast<std::size_t>(k)] = k * block;
  auto scratch = at::empty({R * B}, x.options());
  auto out_kept = at::empty({A, C}, x.options());
  std::vector<std::int64_t> meta(es::comm::RankInfo::words, 1), meta_all(es::comm::RankInfo::words * P);

  Case c;
  c.name = "tiny_repartition";
  c.notation = "a/dp b -> a b/dp";
  c.mesh = "(" + std::to_string(P) + ")";
  c.dtype = "float32";
  c.shape = shape_of(x);
  c.mib_per_rank = static_cast<double>(R * B * 4) / MiB;
  c.report_us = true;
  c.variants.push_back({"einshard", true, [=] {
                          return es::einshard<"a/dp b -> a b/dp">(x, {.mesh = mesh});
                        }});
  c.variants.push_back({"mpi_pack_alltoallv_alloc", false, [=] {
                          auto out = at::empty({A, C}, x.options());
                          pack_column_blocks(static_cast<const std::byte*>(x.const_data_ptr()),
                                             static_cast<std::byte*>(scratch.data_ptr()), R, B, P, 4);
                          MPI_Alltoallv(scratch.const_data_ptr(), counts.data(), displs.data(), MPI_FLOAT,
                                        out.data_ptr(), counts.data(), displs.data(), MPI_FLOAT, comm);
                          return out;
                        }});
  c.variants.push_back({"mpi_pack_alltoallv", false, [=] {
                          pack_column_blocks(static_cast<const std::byte*>(x.const_data_ptr()),
                                             static_cast<std::byte*>(scratch.data_ptr()), R, B, P, 4);
                          MPI_Alltoallv(scratch.const_data_ptr(), counts.data(), displs.data(), MPI_FLOAT,
                                        out_kept.data_ptr(), counts.data(), displs.data(), MPI_FLOAT, comm);
                          return out_kept;
                        }});
  // The agreement's exchange alone (one MPI_Allgather of 28 int64 per rank); it computes nothing
  // comparable, so its result is einshard's, computed once, for the check.
  const auto expected = es::einshard<"a/dp b -> a b/dp">(x, {.mesh = mesh});
  c.variants.push_back({"agreement_allgather", false, [=]() mutable {
                          MPI_Allgather(meta.data(), static_cast<int>(meta.size()), MPI_INT64_T,
                                        meta_all.data(), static_cast<int>(meta.size()), MPI_INT64_T, comm);
                          return expected;
                        }});
  return c;
}

// ---------------------------------------------------------------------------------------------
// Cases on a (2,2) mesh: moves between mesh dimensions (4 ranks).
//
// `a/dp b -> a/sp b`: rank (d,s) holds row block d and needs row block s; only (0,0)->(1,0) and
// (1,1)->(0,1) move data (whole contiguous shards), the diagonal copies locally.
// `a/dp b/sp -> a/sp b/dp`: rank (d,s) holds block (d,s) and needs block (s,d): the off-diagonal
// ranks swap their whole blocks.

Case cross_mesh(const es::Mesh& mesh, double mib, bool swap_both) {
  const int me = mesh.rank();
  const int d = mesh.coordinate("dp"), s = mesh.coordinate("sp");
  const std::int64_t B = 2048;
  const auto e = std::int64_t{4};
  const MPI_Comm comm = mesh.comm();
  Case c;
  c.mesh = "(2,2)";
  c.dtype = "float32";
  // Local shard: R x Cl; the data a rank needs is a whole shard of rank `source`, it sends its
  // whole shard to the ranks in `dests`.
  std::int64_t R = 0, Cl = 0;
  at::Tensor x;
  int source = -1;
  std::vector<int> dests;
  auto rank_of = [](int dd, int ss) { return dd * 2 + ss; };
  if (!swap_both) {
    c.name = "cross_mesh_move";
    c.notation = "a/dp b -> a/sp b";
    Cl = B;
    R = rows_for(mib * MiB, Cl, e, 1);
    x = pattern(d * R * B, R * B, at::kFloat).reshape({R, Cl});
    source = rank_of(s, s);  // holds row block s (dp coordinate s), same sp coordinate
    if (d == s) dests.push_back(rank_of(1 - d, d));
  } else {
    c.name = "cross_mesh_swap";
    c.notation = "a/dp b/sp -> a/sp b/dp";
    Cl = B / 2;
    R = rows_for(mib * MiB, Cl, e, 1);
    // Global (2R) x B; block (d, s) is rows d*R.., columns s*Cl..; fill by global index.
    x = pattern(0, 2 * R * B, at::kFloat).reshape({2 * R, B}).narrow(0, d * R, R).narrow(1, s * Cl, Cl).contiguous();
    source = rank_of(s, d);
    if (d != s) dests.push_back(rank_of(s, d));
  }
  c.shape = shape_of(x);
  c.mib_per_rank = static_cast<double>(R * Cl * e) / MiB;
  auto kept = at::empty({R, Cl}, x.options());
  const int n = static_cast<int>(R * Cl);
  auto p2p = [=](at::Tensor out) {
    std::vector<MPI_Request> req;
    if (source != me) {
      req.emplace_back();
      MPI_Irecv(out.data_ptr(), n, MPI_FLOAT, source, 7102, comm, &req.back());
    }
    for (int q : dests) {
      req.emplace_back();
      MPI_Isend(x.const_data_ptr(), n, MPI_FLOAT, q, 7102, comm, &req.back());
    }
    if (source == me) std::memcpy(out.data_ptr(), x.const_data_ptr(), static_cast<std::size_t>(n) * 4);
    MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE);
    return out;
  };
  if (!swap_both)
    c.variants.push_back({"einshard", true, [=] { return es::einshard<"a/dp b -> a/sp b">(x, {.mesh = mesh}); }});
  else
    c.variants.push_back({"einshard", true, [=] {
                            return es::einshard<"a/dp b/sp -> a/sp b/dp">(x, {.mesh = mesh});
                          }});
  c.variants.push_back({"p2p_raw", false, [=] { return p2p(kept); }});
  c.variants.push_back({"p2p_alloc", false, [=] { return p2p(at::empty({R, Cl}, x.options())); }});
  return c;
}

// ---------------------------------------------------------------------------------------------
// Case: split then gather back, `a b -> a/dp b` then `a/dp b -> a b`, on uneven rows (A+1).

Case split_gather(const es::Mesh& mesh, double mib) {
  const int P = mesh.size(), me = mesh.rank();
  const std::int64_t B = 1024;
  const std::int64_t rows = rows_for(mib * MiB, B, 4, P) + 1;
  const auto x = pattern(0, rows * B, at::kFloat).reshape({rows, B});
  const auto split = es::compute_split_shapes(rows, P);
  std::vector<int> counts, displs;
  std::int64_t off = 0, my_off = 0;
  for (int r = 0; r < P; ++r) {
    if (r == me) my_off = off;
    counts.push_back(static_cast<int>(split[static_cast<std::size_t>(r)] * B));
    displs.push_back(static_cast<int>(off * B));
    off += split[static_cast<std::size_t>(r)];
  }
  const auto mine = split[static_cast<std::size_t>(me)];
  const MPI_Comm comm = mesh.comm();
  auto piece_kept = x.narrow(0, my_off, mine).clone();
  auto out_kept = at::empty({rows, B}, x.options());
  auto slice_gather = [=](at::Tensor piece, at::Tensor out) {
    std::memcpy(piece.data_ptr(), static_cast<const float*>(x.const_data_ptr()) + my_off * B,
                static_cast<std::size_t>(mine * B) * 4);
    MPI_Allgatherv(piece.const_data_ptr(), static_cast<int>(mine * B), MPI_FLOAT, out.data_ptr(), counts.data(),
                   displs.data(), MPI_FLOAT, comm);
    return out;
  };
  Case c;
  c.name = "split_gather";
  c.notation = "a b -> a/dp b; a/dp b -> a b";
  c.mesh = "(" + std::to_string(P) + ")";
  c.dtype = "float32";
  c.shape = shape_of(x);
  c.mib_per_rank = static_cast<double>(rows * B * 4) / MiB;
  c.variants.push_back({"einshard", true, [=] {
                          const auto s = es::einshard<"a b -> a/dp b">(x, {.mesh = mesh});
                          return es::einshard<"a/dp b -> a b">(s, {.mesh = mesh});
                        }});
  c.variants.push_back({"allgatherv_raw", false, [=] {
                          MPI_Allgatherv(piece_kept.const_data_ptr(), static_cast<int>(mine * B), MPI_FLOAT,
                                         out_kept.data_ptr(), counts.data(), displs.data(), MPI_FLOAT, comm);
                          return out_kept;
                        }});
  c.variants.push_back({"mpi_slice_allgatherv", false, [=] { return slice_gather(piece_kept, out_kept); }});
  c.variants.push_back({"mpi_slice_allgatherv_alloc", false, [=] {
                          return slice_gather(at::empty({mine, B}, x.options()), at::empty({rows, B}, x.options()));
                        }});
  // The same plus the two small all-gathers einshard's two calls make to agree on metadata (each
  // one synchronizes the ranks): what the data path costs once the agreement is accounted for.
  c.variants.push_back({"mpi_slice_allgatherv_alloc_2sync", false, [=] {
                          const int w = static_cast<int>(es::comm::RankInfo::words);
                          std::vector<std::int64_t> meta(static_cast<std::size_t>(w)),
                              all(static_cast<std::size_t>(w * P));
                          MPI_Allgather(meta.data(), w, MPI_INT64_T, all.data(), w, MPI_INT64_T, comm);
                          MPI_Allgather(meta.data(), w, MPI_INT64_T, all.data(), w, MPI_INT64_T, comm);
                          return slice_gather(at::empty({mine, B}, x.options()), at::empty({rows, B}, x.options()));
                        }});
  return c;
}

// ---------------------------------------------------------------------------------------------
// Case: gather of an inner dimension, `a b/dp -> a b` (the column-parallel gather): each rank's
// shard is a column block of the result, so it lands strided. einshard's comm::all_gather moves it
// with strided (vector) datatypes; by hand: all-gather the contiguous shards, then unpack.

Case gather_inner(const es::Mesh& mesh, double mib) {
  const int P = mesh.size(), me = mesh.rank();
  const std::int64_t C = 2048 / P * P == 2048 ? 2048 / P : 512;  // columns per rank
  const std::int64_t B = C * P;
  const std::int64_t A = rows_for(mib * MiB, B, 4, 1);
  // Global A x B by global index; rank r holds columns [r*C, (r+1)*C).
  const auto x = pattern(0, A * B, at::kFloat).reshape({A, B}).narrow(1, me * C, C).contiguous();
  const MPI_Comm comm = mesh.comm();
  const int n = static_cast<int>(A * C);
  auto staging = at::empty({P, A, C}, x.options());
  auto unpack = [=](at::Tensor out) {
    MPI_Allgather(x.const_data_ptr(), n, MPI_FLOAT, staging.data_ptr(), n, MPI_FLOAT, comm);
    const auto* src = static_cast<const float*>(staging.const_data_ptr());
    auto* dst = static_cast<float*>(out.data_ptr());
    for (int q = 0; q < P; ++q)
      for (std::int64_t i = 0; i < A; ++i)
        std::memcpy(dst + i * B + q * C, src + (q * A + i) * C, static_cast<std::size_t>(C) * 4);
    return out;
  };
  auto kept = at::empty({A, B}, x.options());
  Case c;
  c.name = "gather_inner";
  c.notation = "a b/dp -> a b";
  c.mesh = "(" + std::to_string(P) + ")";
  c.dtype = "float32";
  c.shape = shape_of(x);
  c.mib_per_rank = static_cast<double>(A * B * 4) / MiB;
  c.variants.push_back({"einshard", true, [=] { return es::einshard<"a b/dp -> a b">(x, {.mesh = mesh}); }});
  // The raw collective on the same bytes: the contiguous shards, gathered, not yet unpacked.
  c.variants.push_back({"allgather_raw", false,
                        [=] {
                          MPI_Allgather(x.const_data_ptr(), n, MPI_FLOAT, staging.data_ptr(), n, MPI_FLOAT, comm);
                          return staging;
                        },
                        [=] { return staging.permute({1, 0, 2}).reshape({A, B}); }});
  c.variants.push_back({"mpi_allgather_unpack", false, [=] { return unpack(kept); }});
  c.variants.push_back({"mpi_allgather_unpack_alloc", false, [=] { return unpack(at::empty({A, B}, x.options())); }});
  return c;
}

// ---------------------------------------------------------------------------------------------
// Case: partial -> full, `a b // dp -> a b`: one all-reduce.

Case partial_full(const es::Mesh& mesh, double mib) {
  const int P = mesh.size(), me = mesh.rank();
  const std::int64_t B = 1024;
  const std::int64_t A = rows_for(mib * MiB, B, 4, P);
  const auto x = (pattern(0, A * B, at::kFloat) * static_cast<float>(me + 1)).reshape({A, B});
  const MPI_Comm comm = mesh.comm();
  auto kept = at::empty({A, B}, x.options());
  auto allreduce = [=](at::Tensor out) {
    MPI_Allreduce(x.const_data_ptr(), out.data_ptr(), static_cast<int>(A * B), MPI_FLOAT, MPI_SUM, comm);
    return out;
  };
  Case c;
  c.name = "partial_full";
  c.notation = "a b // dp -> a b";
  c.mesh = "(" + std::to_string(P) + ")";
  c.dtype = "float32";
  c.shape = shape_of(x);
  c.mib_per_rank = static_cast<double>(A * B * 4) / MiB;
  c.variants.push_back({"einshard", true, [=] { return es::einshard<"a b // dp -> a b">(x, {.mesh = mesh}); }});
  c.variants.push_back({"allreduce_raw", false, [=] { return allreduce(kept); }});
  c.variants.push_back({"allreduce_alloc", false, [=] { return allreduce(at::empty({A, B}, x.options())); }});
  return c;
}

// ---------------------------------------------------------------------------------------------
// Case: partial -> shard, `a b // dp -> a/dp b`: reduce-scatter, both library algorithms.

Case partial_shard(const es::Mesh& mesh, double mib) {
  const int P = mesh.size(), me = mesh.rank();
  const std::int64_t B = 1024;
  const std::int64_t A = rows_for(mib * MiB, B, 4, P);
  const std::int64_t R = A / P;
  const auto x = (pattern(0, A * B, at::kFloat) * static_cast<float>(me + 1)).reshape({A, B});
  const MPI_Comm comm = mesh.comm();
  std::vector<int> counts(static_cast<std::size_t>(P), static_cast<int>(R * B));
  auto rs_kept = at::empty({R, B}, x.options());
  auto ar_kept = at::empty({A, B}, x.options());
  using Alg = es::comm::ReduceScatterAlgorithm;
  auto with = [=](Alg alg) {
    const auto saved = es::comm::algorithms().reduce_scatter;
    es::comm::algorithms().reduce_scatter = alg;
    auto y = es::einshard<"a b // dp -> a/dp b">(x, {.mesh = mesh});
    es::comm::algorithms().reduce_scatter = saved;
    return y;
  };
  Case c;
  c.name = "partial_shard";
  c.notation = "a b // dp -> a/dp b";
  c.mesh = "(" + std::to_string(P) + ")";
  c.dtype = "float32";
  c.shape = shape_of(x);
  c.mib_per_rank = static_cast<double>(A * B * 4) / MiB;
  c.variants.push_back({"einshard_native", true, [=] { return with(Alg::native); }});
  c.variants.push_back({"einshard_allreduce_slice", true, [=] { return with(Alg::allreduce_slice); }});
  c.variants.push_back({"reduce_scatter_raw", false, [=] {
                          MPI_Reduce_scatter(x.const_data_ptr(), rs_kept.data_ptr(), counts.data(), MPI_FLOAT,
                                             MPI_SUM, comm);
                          return rs_kept;
                        }});
  c.variants.push_back({"allreduce_raw", false, [=] {
                          MPI_Allreduce(x.const_data_ptr(), ar_kept.data_ptr(), static_cast<int>(A * B), MPI_FLOAT,
                                        MPI_SUM, comm);
                          return ar_kept.narrow(0, me * R, R);
                        }});
  return c;
}

// ---------------------------------------------------------------------------------------------

void usage() {
  std::fprintf(stderr,
               "usage: mpirun -n P einshard_bench_distributed [--quick] [--iters N] [--case NAME]... [--mib LIST] [--list]\n");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cfg.quick = true;
    } else if (a == "--iters" && i + 1 < argc) {
      cfg.iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--case" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');)
        if (!item.empty()) cfg.only.push_back(item);
    } else if (a == "--mib" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');)
        if (!item.empty() && std::atof(item.c_str()) > 0) cfg.mib.push_back(std::atof(item.c_str()));
    } else if (a == "--list") {
      cfg.list = true;
    } else {
      if (world_rank() == 0) usage();
      MPI_Finalize();
      return 1;
    }
  }
  const bool iters_given = [&] {
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--iters") return true;
    return false;
  }();
  if (cfg.quick && !iters_given) cfg.iters = 3;

  const std::vector<std::string> names{"tiny_repartition", "repartition", "repartition_f64", "cross_mesh_move",
                                       "cross_mesh_swap",  "split_gather", "gather_inner",   "partial_full",
                                       "partial_shard"};
  if (cfg.list) {
    if (world_rank() == 0)
      for (const auto& n : names) std::printf("%s\n", n.c_str());
    MPI_Finalize();
    return 0;
  }

  at::set_num_threads(threads_from_env());
  c10::NoGradGuard no_grad;
  const int P = world_size();
  int status = 0;
  try {
    es::Mesh line(MPI_COMM_WORLD, {P}, {"dp"});
    if (world_rank() == 0) {
      char version[MPI_MAX_LIBRARY_VERSION_STRING];
      int len = 0;
      MPI_Get_library_version(version, &len);
      std::string v(version, static_cast<std::size_t>(len));
      v = v.substr(0, v.find_first_of(",\n"));
      std::printf("{\"bench\":\"distributed\",\"case\":\"_config\",\"ranks\":%d,\"iters\":%d,\"quick\":%s,"
                  "\"torch_threads\":%d,\"mpi\":%s}\n",
                  P, cfg.iters, cfg.quick ? "true" : "false", at::get_num_threads(), json_string(v).c_str());
      std::fflush(stdout);
    }
    auto sizes = [&](std::vector<double> normal) {
      return !cfg.mib.empty() ? cfg.mib : cfg.quick ? std::vector<double>{1} : normal;
    };
    const auto big = sizes({16, 128}), mid = sizes({16, 64}), f64 = sizes({16});
    const int rounds = cfg.iters;

    if (wanted(cfg, "tiny_repartition") && 4 % P == 0) {
      auto c = tiny(line);
      c.rounds = rounds * 100;
      run_case(c);
    }
    if (wanted(cfg, "repartition"))
      for (double mib : big) {
        auto c = repartition(line, mib, at::kFloat, 2048, true);
        c.rounds = rounds;
        run_case(c);
      }
    if (wanted(cfg, "repartition_f64"))
      for (double mib : f64) {
        auto c = repartition(line, mib, at::kDouble, 2048, true);
        c.name = "repartition_f64";
        c.rounds = rounds;
        run_case(c);
      }
    if (P == 4) {
      es::Mesh grid(MPI_COMM_WORLD, {2, 2}, {"dp", "sp"});
      for (bool swap : {false, true}) {
        if (!wanted(cfg, swap ? "cross_mesh_swap" : "cross_mesh_move")) continue;
        for (double mib : mid) {
          auto c = cross_mesh(grid, mib, swap);
          c.rounds = rounds;
          run_case(c);
        }
      }
    }
    if (wanted(cfg, "split_gather"))
      for (double mib : mid) {
        auto c = split_gather(line, mib);
        c.rounds = rounds;
        run_case(c);
      }
    if (wanted(cfg, "gather_inner"))
      for (double mib : mid) {
        auto c = gather_inner(line, mib);
        c.rounds = rounds;
        run_case(c);
      }
    if (wanted(cfg, "partial_full"))
      for (double mib : mid) {
        auto c = partial_full(line, mib);
        c.rounds = rounds;
        run_case(c);
      }
    if (wanted(cfg, "partial_shard"))
      for (double mib : mid) {
        auto c = partial_shard(line, mib);
        c.rounds = rounds;
        const auto t = run_case(c);
        if (world_rank() == 0) {
          const double native = quantile(t.ms[0], 0.5), slice = quantile(t.ms[1], 0.5);
          std::vector<double> paired;
          for (std::size_t i = 0; i < t.ms[0].size(); ++i) paired.push_back(t.ms[0][i] / t.ms[1][i]);
          std::printf("{\"bench\":\"distributed\",\"case\":\"reduce_scatter_choice\",\"ranks\":%d,"
                      "\"mib_per_rank\":%s,\"native_ms\":%s,\"allreduce_slice_ms\":%s,"
                      "\"native_over_allreduce_slice\":%s,\"ratio_paired\":%s,\"faster\":\"%s\"}\n",
                      P, num(c.mib_per_rank, "%.4g").c_str(), num(native).c_str(), num(slice).c_str(),
                      num(native / slice, "%.4f").c_str(), num(quantile(paired, 0.5), "%.4f").c_str(),
                      native <= slice ? "native" : "allreduce_slice");
          std::fflush(stdout);
        }
      }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "einshard_bench_distributed: rank %d: %s\n", world_rank(), ex.what());
    status = 1;
  }
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
