// A PMPI counting layer for the scaling benchmarks: per rank and per phase of a benchmark, the
// calls, bytes and time (MPI_Wtime: simulated under SMPI) of every MPI function einshard calls.
// tests/mpi/test_plan_counts.cpp holds es::last_plan()'s figures to the same counts (totals()).
//
// Include it in exactly one translation unit of the program (it defines the MPI_* entry points,
// which forward to PMPI_*). It works with SimGrid's SMPI (whose MPI_* are weak symbols) and with
// Open MPI / MPICH (a definition in the executable takes precedence over the shared library's).
// Only calls made by the program and the code linked into it (einshard, header-only or its
// static compiled part) are counted: the point-to-point messages an MPI implementation uses inside
// a collective are not.
//
//   einshard_scale::phase("assemble");   // later calls count under "assemble"
//   ...
//   einshard_scale::report("poisson", extra_json);  // collective; rank 0 prints JSON lines
//
// Counted per call (this rank's view):
//   calls    number of calls
//   bytes    bytes this rank hands to MPI to send: point-to-point payload, a reduction's or
//            broadcast's buffer, its own contribution to a gather, every block of an all-to-all
//   received bytes of the point-to-point receives this rank posts (the buffer it offers: the
//            message itself where both sides agree on sizes, as einshard's do)
//   peers    ranks this rank sends a non-empty block to (point-to-point sends; all-to-all(v)
//            blocks with a non-zero count): what the algorithm needs, beside `calls`
//   dense    entries of per-rank count arrays handed to MPI (all-to-all(v)'s, all-gather(v)'s:
//            P entries each), the O(P) per-rank footprint of dense collectives
//   seconds  time inside the call (for a blocking collective: waiting for the slowest rank too)
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace einshard_scale {

enum Fn : int {
  f_send, f_isend, f_issend, f_recv, f_irecv, f_sendrecv, f_wait, f_waitall, f_waitany, f_testall, f_test, f_iprobe,
  f_allreduce, f_iallreduce, f_reduce, f_bcast, f_ibcast, f_barrier, f_ibarrier, f_exscan, f_scan,
  f_allgather, f_allgatherv, f_gather, f_gatherv, f_alltoall, f_alltoallv, f_reduce_scatter,
  f_comm_dup, f_comm_split, f_comm_free, f_cart_create, f_cart_sub, f_cart_coords,
  f_count
};

inline const char* fn_name(int f) {
  static const char* names[f_count] = {
      "Send", "Isend", "Issend", "Recv", "Irecv", "Sendrecv", "Wait", "Waitall", "Waitany", "Testall", "Test", "Iprobe",
      "Allreduce", "Iallreduce", "Reduce", "Bcast", "Ibcast", "Barrier", "Ibarrier", "Exscan", "Scan",
      "Allgather", "Allgatherv", "Gather", "Gatherv", "Alltoall", "Alltoallv", "Reduce_scatter",
      "Comm_dup", "Comm_split", "Comm_free", "Cart_create", "Cart_sub", "Cart_coords"};
  return names[f];
}

/// Collective calls (the rest are point-to-point, completion and local calls).
inline bool is_collective(int f) {
  return (f >= f_allreduce && f <= f_reduce_scatter) || f == f_comm_dup || f == f_comm_split ||
         f == f_cart_create || f == f_cart_sub;
}

struct Stat {
  double calls = 0, bytes = 0, peers = 0, dense = 0, seconds = 0, received = 0;
};
constexpr int n_fields = 6;

struct Phase {
  std::string name;
  std::array<Stat, f_count> fn{};
  double begin = 0, seconds = 0;  // the phase's own span (MPI_Wtime)
};

/// Another count that follows these phases (memory_count.hpp): told of every switch, and asked at
/// report time for `fields` numbers per phase, whose maxima over ranks it writes as JSON fields.
struct Follower {
  void (*switched)(int left, int entered) = nullptr;
  int fields = 0;
  void (*values)(int phase, double* out) = nullptr;
  std::string (*json)(const double* maxima) = nullptr;
};

struct State {
  std::vector<Phase> phases;
  int current = 0;
  bool on = true;
  Follower follower;
  // Reserved so that opening a phase allocates nothing a memory count would book to the last one.
  State() {
    phases.reserve(64);
    phases.push_back(Phase{"init"});
  }
};

static State& state() {  // internal linkage: one per dlopen copy (an inline function's static is GNU_UNIQUE, shared)
  // Per simulated rank: smpirun privatizes the executable's globals. Never destroyed, as
  // memory_count.hpp's phases (mmap privatization runs every rank's destructor on one segment).
  static auto& s = *new State;
  return s;
}

/// Later calls count under `name` (every rank must open the same phases in the same order).
inline void phase(const std::string& name) {
  auto& s = state();
  const double now = PMPI_Wtime();
  s.phases[static_cast<std::size_t>(s.current)].seconds += now - s.phases[static_cast<std::size_t>(s.current)].begin;
  int found = -1;
  for (std::size_t i = 0; i < s.phases.size(); ++i)
    if (s.phases[i].name == name) found = static_cast<int>(i);
  if (found < 0) {
    s.phases.push_back(Phase{name});
    found = static_cast<int>(s.phases.size()) - 1;
  }
  const int left = s.current;
  s.current = found;
  s.phases[static_cast<std::size_t>(found)].begin = now;
  if (s.follower.switched) s.follower.switched(left, found);
}

inline double type_bytes(MPI_Datatype t) {
  int size = 0;
  PMPI_Type_size(t, &size);
  return size;
}

inline int comm_size(MPI_Comm c) {
  int p = 1;
  PMPI_Comm_size(c, &p);
  return p;
}

/// Times one call and books it.
struct Scope {
  int f;
  double t0;
  double bytes = 0, peers = 0, dense = 0, received = 0;
  explicit Scope(int fn) : f(fn), t0(PMPI_Wtime()) {}
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() {
    auto& s = state();
    if (!s.on) return;
    auto& st = s.phases[static_cast<std::size_t>(s.current)].fn[static_cast<std::size_t>(f)];
    st.calls += 1;
    st.bytes += bytes;
    st.peers += peers;
    st.dense += dense;
    st.seconds += PMPI_Wtime() - t0;
    st.received += received;
  }
};

/// This rank's counts of every function over every phase so far: a test takes the difference
/// around one call to compare what it cost with what einshard's plan says it costs.
inline std::array<Stat, f_count> totals() {
  std::array<Stat, f_count> t{};
  for (const auto& ph : state().phases)
    for (std::size_t f = 0; f < t.size(); ++f) {
      const auto& st = ph.fn[f];
      t[f].calls += st.calls;
      t[f].bytes += st.bytes;
      t[f].peers += st.peers;
      t[f].dense += st.dense;
      t[f].seconds += st.seconds;
      t[f].received += st.received;
    }
  return t;
}

/// Collective over MPI_COMM_WORLD: rank 0 prints one JSON line per phase with, per MPI function
/// used in it, the maximum over ranks of each count (and the phase's time, max over ranks), plus
/// the totals over functions of calls, collectives, messages and bytes (each a max over ranks),
/// and the mean over ranks of the time spent outside MPI (computation).
inline void report(const char* bench, const std::string& extra) {
  auto& s = state();
  phase("report");
  s.on = false;
  int rank = 0, P = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &P);
  for (const auto& ph : s.phases) {
    if (ph.name == "report") continue;
    // Per function: calls, bytes, peers, dense, seconds, received; then the phase: its time,
    // collectives, point-to-point sends, bytes, seconds inside MPI.
    std::vector<double> v;
    double coll = 0, sends = 0, bytes = 0, inside = 0;
    for (int f = 0; f < f_count; ++f) {
      const auto& st = ph.fn[static_cast<std::size_t>(f)];
      v.insert(v.end(), {st.calls, st.bytes, st.peers, st.dense, st.seconds, st.received});
      if (is_collective(f)) coll += st.calls;
      if (f == f_send || f == f_isend || f == f_issend || f == f_sendrecv) sends += st.calls;
      bytes += st.bytes;
      inside += st.seconds;
    }
    v.insert(v.end(), {ph.seconds, coll, sends, bytes, inside});
    const std::size_t followed = v.size();
    v.resize(followed + static_cast<std::size_t>(s.follower.fields));
    if (s.follower.values) s.follower.values(static_cast<int>(&ph - s.phases.data()), v.data() + followed);
    std::vector<double> mx(v.size());
    PMPI_Allreduce(v.data(), mx.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    // This rank's time outside MPI in the phase (its computation): mean and max over ranks.
    const double compute = ph.seconds - inside;
    double compute_sum = 0;
    PMPI_Allreduce(&compute, &compute_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank != 0) continue;
    const auto* tail = mx.data() + n_fields * f_count;
    std::string line = std::string("{\"bench\":\"") + bench + "_counts\",\"ranks\":" + std::to_string(P) + extra +
                       ",\"phase\":\"" + ph.name + "\"";
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  ",\"seconds\":%.6g,\"collectives\":%.0f,\"sends\":%.0f,\"bytes\":%.0f,\"mpi_seconds\":%.6g,"
                  "\"compute_mean\":%.6g",
                  tail[0], tail[1], tail[2], tail[3], tail[4], compute_sum / P);
    line += buf;
    if (s.follower.json) line += s.follower.json(mx.data() + followed);
    line += ",\"fn\":{";
    bool first = true;
    for (int f = 0; f < f_count; ++f) {
      const auto* m = mx.data() + n_fields * f;
      if (m[0] == 0) continue;
      std::snprintf(buf, sizeof buf,
                    "%s\"%s\":{\"calls\":%.0f,\"bytes\":%.0f,\"peers\":%.0f,\"dense\":%.0f,\"seconds\":%.6g,"
                    "\"received\":%.0f}",
                    first ? "" : ",", fn_name(f), m[0], m[1], m[2], m[3], m[4], m[5]);
      line += buf;
      first = false;
    }
    line += "}}";
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);  // line by line: a simulation that crashes later keeps them
  }
  std::fflush(stdout);
  // Nobody leaves before rank 0 has printed: under SMPI a rank that returns from main can crash the
  // simulation at exit (thread-per-rank contexts), and its other ranks' unprinted lines with it.
  PMPI_Barrier(MPI_COMM_WORLD);
  s.on = true;
}

/// SMPI charges the CPU time an actor spends between two MPI calls as its computation, and stops
/// that clock on entry to every MPI call, except in a few: MPI_Comm_dup, MPI_Comm_free,
/// MPI_Cart_create and MPI_Cart_sub (SimGrid 3.32's smpi_pmpi_comm.cpp and smpi_pmpi_topo.cpp
/// call no smpi_bench_end). Those block in their own bcast and barrier, the simulation runs the
/// other actors meanwhile, and the whole simulator's CPU time (its O(P) group copies for every rank)
/// is charged to the caller as computation: seconds of simulated time growing as P^2 or faster,
/// which no real MPI would spend. This stops the clock around them as SMPI does around the others.
struct Unbenched {
#ifdef SMPI_H
  Unbenched() { smpi_bench_end(); }
  ~Unbenched() { smpi_bench_begin(); }
#endif
  Unbenched(const Unbenched&) = delete;
  Unbenched& operator=(const Unbenched&) = delete;
#ifndef SMPI_H
  Unbenched() = default;
#endif
};

}  // namespace einshard_scale

// ---- the entry points ---------------------------------------------------------------------------
// Signatures as MPI-3 declares them (const input buffers), which both SMPI and Open MPI follow.
extern "C" {

#define EINSHARD_SCALE_P2P(fn, call, count, type, peer)               \
  einshard_scale::Scope scope_(einshard_scale::fn);                   \
  scope_.bytes = static_cast<double>(count) * einshard_scale::type_bytes(type); \
  scope_.peers = (peer) ? 1 : 0;                                      \
  return call

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  EINSHARD_SCALE_P2P(f_send, PMPI_Send(buf, count, type, dest, tag, comm), count, type, true);
}
int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  EINSHARD_SCALE_P2P(f_isend, PMPI_Isend(buf, count, type, dest, tag, comm, req), count, type, true);
}
int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  EINSHARD_SCALE_P2P(f_issend, PMPI_Issend(buf, count, type, dest, tag, comm, req), count, type, true);
}
int MPI_Recv(void* buf, int count, MPI_Datatype type, int src, int tag, MPI_Comm comm, MPI_Status* status) {
  einshard_scale::Scope scope_(einshard_scale::f_recv);
  scope_.received = static_cast<double>(count) * einshard_scale::type_bytes(type);
  return PMPI_Recv(buf, count, type, src, tag, comm, status);
}
int MPI_Irecv(void* buf, int count, MPI_Datatype type, int src, int tag, MPI_Comm comm, MPI_Request* req) {
  einshard_scale::Scope scope_(einshard_scale::f_irecv);
  scope_.received = static_cast<double>(count) * einshard_scale::type_bytes(type);
  return PMPI_Irecv(buf, count, type, src, tag, comm, req);
}
int MPI_Sendrecv(const void* sbuf, int scount, MPI_Datatype stype, int dest, int stag, void* rbuf, int rcount,
                 MPI_Datatype rtype, int src, int rtag, MPI_Comm comm, MPI_Status* status) {
  einshard_scale::Scope scope_(einshard_scale::f_sendrecv);
  scope_.bytes = static_cast<double>(scount) * einshard_scale::type_bytes(stype);
  scope_.peers = 1;
  scope_.received = static_cast<double>(rcount) * einshard_scale::type_bytes(rtype);
  return PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, status);
}
int MPI_Wait(MPI_Request* req, MPI_Status* status) {
  einshard_scale::Scope scope_(einshard_scale::f_wait);
  return PMPI_Wait(req, status);
}
int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status statuses[]) {
  einshard_scale::Scope scope_(einshard_scale::f_waitall);
  return PMPI_Waitall(n, reqs, statuses);
}
int MPI_Waitany(int n, MPI_Request reqs[], int* index, MPI_Status* status) {
  einshard_scale::Scope scope_(einshard_scale::f_waitany);
  return PMPI_Waitany(n, reqs, index, status);
}
int MPI_Testall(int n, MPI_Request reqs[], int* flag, MPI_Status statuses[]) {
  einshard_scale::Scope scope_(einshard_scale::f_testall);
  return PMPI_Testall(n, reqs, flag, statuses);
}
int MPI_Test(MPI_Request* req, int* flag, MPI_Status* status) {
  einshard_scale::Scope scope_(einshard_scale::f_test);
  return PMPI_Test(req, flag, status);
}
int MPI_Iprobe(int src, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  einshard_scale::Scope scope_(einshard_scale::f_iprobe);
  return PMPI_Iprobe(src, tag, comm, flag, status);
}

#define EINSHARD_SCALE_BUF(fn, count, type)                                          \
  einshard_scale::Scope scope_(einshard_scale::fn);                                  \
  scope_.bytes = static_cast<double>(count) * einshard_scale::type_bytes(type)

int MPI_Allreduce(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  EINSHARD_SCALE_BUF(f_allreduce, count, type);
  return PMPI_Allreduce(s, r, count, type, op, comm);
}
int MPI_Iallreduce(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request* req) {
  EINSHARD_SCALE_BUF(f_iallreduce, count, type);
  return PMPI_Iallreduce(s, r, count, type, op, comm, req);
}
int MPI_Reduce(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm) {
  EINSHARD_SCALE_BUF(f_reduce, count, type);
  return PMPI_Reduce(s, r, count, type, op, root, comm);
}
int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  EINSHARD_SCALE_BUF(f_bcast, count, type);
  return PMPI_Bcast(buf, count, type, root, comm);
}
int MPI_Ibcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* req) {
  EINSHARD_SCALE_BUF(f_ibcast, count, type);
  return PMPI_Ibcast(buf, count, type, root, comm, req);
}
int MPI_Barrier(MPI_Comm comm) {
  einshard_scale::Scope scope_(einshard_scale::f_barrier);
  return PMPI_Barrier(comm);
}
int MPI_Ibarrier(MPI_Comm comm, MPI_Request* req) {
  einshard_scale::Scope scope_(einshard_scale::f_ibarrier);
  return PMPI_Ibarrier(comm, req);
}
int MPI_Exscan(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  EINSHARD_SCALE_BUF(f_exscan, count, type);
  return PMPI_Exscan(s, r, count, type, op, comm);
}
int MPI_Scan(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  EINSHARD_SCALE_BUF(f_scan, count, type);
  return PMPI_Scan(s, r, count, type, op, comm);
}
int MPI_Allgather(const void* s, int scount, MPI_Datatype stype, void* r, int rcount, MPI_Datatype rtype,
                  MPI_Comm comm) {
  einshard_scale::Scope scope_(einshard_scale::f_allgather);
  scope_.bytes = s == MPI_IN_PLACE ? rcount * einshard_scale::type_bytes(rtype)
                                   : scount * einshard_scale::type_bytes(stype);
  return PMPI_Allgather(s, scount, stype, r, rcount, rtype, comm);
}
int MPI_Allgatherv(const void* s, int scount, MPI_Datatype stype, void* r, const int* rcounts, const int* displs,
                   MPI_Datatype rtype, MPI_Comm comm) {
  einshard_scale::Scope scope_(einshard_scale::f_allgatherv);
  scope_.bytes = s == MPI_IN_PLACE ? 0 : scount * einshard_scale::type_bytes(stype);
  scope_.dense = 2.0 * einshard_scale::comm_size(comm);
  return PMPI_Allgatherv(s, scount, stype, r, rcounts, displs, rtype, comm);
}
int MPI_Gather(const void* s, int scount, MPI_Datatype stype, void* r, int rcount, MPI_Datatype rtype, int root,
               MPI_Comm comm) {
  EINSHARD_SCALE_BUF(f_gather, scount, stype);
  return PMPI_Gather(s, scount, stype, r, rcount, rtype, root, comm);
}
int MPI_Gatherv(const void* s, int scount, MPI_Datatype stype, void* r, const int* rcounts, const int* displs,
                MPI_Datatype rtype, int root, MPI_Comm comm) {
  EINSHARD_SCALE_BUF(f_gatherv, scount, stype);
  return PMPI_Gatherv(s, scount, stype, r, rcounts, displs, rtype, root, comm);
}
int MPI_Alltoall(const void* s, int scount, MPI_Datatype stype, void* r, int rcount, MPI_Datatype rtype,
                 MPI_Comm comm) {
  einshard_scale::Scope scope_(einshard_scale::f_alltoall);
  const int p = einshard_scale::comm_size(comm);
  scope_.bytes = static_cast<double>(scount) * einshard_scale::type_bytes(stype) * p;
  scope_.peers = scount > 0 ? p : 0;
  scope_.dense = p;
  return PMPI_Alltoall(s, scount, stype, r, rcount, rtype, comm);
}
int MPI_Alltoallv(const void* s, const int* scounts, const int* sdispls, MPI_Datatype stype, void* r,
                  const int* rcounts, const int* rdispls, MPI_Datatype rtype, MPI_Comm comm) {
  einshard_scale::Scope scope_(einshard_scale::f_alltoallv);
  const int p = einshard_scale::comm_size(comm);
  double n = 0, peers = 0;
  for (int i = 0; i < p; ++i) {
    n += scounts[i];
    peers += scounts[i] > 0 ? 1 : 0;
  }
  scope_.bytes = n * einshard_scale::type_bytes(stype);
  scope_.peers = peers;
  scope_.dense = 4.0 * p;
  return PMPI_Alltoallv(s, scounts, sdispls, stype, r, rcounts, rdispls, rtype, comm);
}
int MPI_Reduce_scatter(const void* s, void* r, const int* rcounts, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  einshard_scale::Scope scope_(einshard_scale::f_reduce_scatter);
  const int p = einshard_scale::comm_size(comm);
  double n = 0;
  for (int i = 0; i < p; ++i) n += rcounts[i];
  scope_.bytes = n * einshard_scale::type_bytes(type);
  scope_.dense = p;
  return PMPI_Reduce_scatter(s, r, rcounts, type, op, comm);
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) {
  einshard_scale::Scope scope_(einshard_scale::f_comm_dup);
  [[maybe_unused]] const einshard_scale::Unbenched unbenched_;
  return PMPI_Comm_dup(comm, out);
}
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  einshard_scale::Scope scope_(einshard_scale::f_comm_split);
  return PMPI_Comm_split(comm, color, key, out);
}
int MPI_Comm_free(MPI_Comm* comm) {
  einshard_scale::Scope scope_(einshard_scale::f_comm_free);
  [[maybe_unused]] const einshard_scale::Unbenched unbenched_;
  return PMPI_Comm_free(comm);
}
int MPI_Cart_create(MPI_Comm comm, int ndims, const int* dims, const int* periods, int reorder, MPI_Comm* out) {
  einshard_scale::Scope scope_(einshard_scale::f_cart_create);
  [[maybe_unused]] const einshard_scale::Unbenched unbenched_;
  return PMPI_Cart_create(comm, ndims, dims, periods, reorder, out);
}
int MPI_Cart_sub(MPI_Comm comm, const int* remain, MPI_Comm* out) {
  einshard_scale::Scope scope_(einshard_scale::f_cart_sub);
  [[maybe_unused]] const einshard_scale::Unbenched unbenched_;
  return PMPI_Cart_sub(comm, remain, out);
}
int MPI_Cart_coords(MPI_Comm comm, int rank, int maxdims, int* coords) {
  einshard_scale::Scope scope_(einshard_scale::f_cart_coords);
  return PMPI_Cart_coords(comm, rank, maxdims, coords);
}

}  // extern "C"
