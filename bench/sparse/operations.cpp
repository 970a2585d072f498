// DSparseTensor operations against their anchors, in one launch:
//
//  * components: connected_components (FastSV) against plain min-label propagation with a halo
//    exchange per sweep (the original's algorithm, implemented here on the same halo) on a path of
//    `--path` vertices (default 10^6), natural order, simple partition. Label propagation needs
//    one sweep per hop (about N sweeps for label 0 to reach the far end), far too many to run at
//    10^6: it runs `--lp-sweeps` sweeps and its time is that per sweep times the sweeps it needs
//    (N - 1 + 1, counted exactly: the diameter plus the sweep that sees no change).
//  * files: save and load of a 2-D Poisson matrix (`--grid`^2 rows) against writing and reading
//    the same bytes per rank (the size of its partition file) with plain write()/read() (fsync
//    after writing on both sides, like save), on the same ranks. Every sample is taken the same way
//    on both sides: all ranks start together (a barrier) and the sample ends when the last rank is
//    done (a barrier inside the timed region), so with more ranks than cores neither side hides
//    the time it waits for the others. The baseline read (`plain_read_mbs`, the ratio `load_ratio`)
//    goes into a buffer of the file's size allocated for that read from the allocator the load's
//    tensors come from (c10's), as any loader must: both see the same first-touch page faults or
//    the same reuse of freed memory. A read into one buffer reused across repetitions is reported
//    beside it (`plain_read_reused_mbs`, `load_ratio_reused`).
//    Throughput = bytes / time; ratio = einshard / plain.
//
// Output: JSON lines on rank 0.
//   {"bench":"components","ranks":P,"n":N,"rounds":r,"fastsv_ms":...,"lp_ms_per_sweep":...,
//    "lp_sweeps_needed":N,"lp_projected_ms":...,"speedup":lp_projected/fastsv,"rounds_bound":2 log2 N}
//   {"bench":"save_load","ranks":P,"n":...,"bytes_per_rank":...,"save_mbs":...,"plain_write_mbs":...,
//    "save_ratio":...,"load_mbs":...,"plain_read_mbs":...,"load_ratio":...,
//    "plain_read_reused_mbs":...,"load_ratio_reused":...}
//
//   mpirun -n P einshard_bench_sparse_operations [--path 1000000] [--lp-sweeps 200] [--grid 1000]
//        [--reps 3] [--dir /tmp]

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../common.hpp"
#include "einshard/sparse.hpp"

namespace sp = einshard::sparse;
using einshard_bench::median;
using einshard_bench::timed_ms;

namespace {

/// The owned rows [first, last) of the path 0 - 1 - ... - (n-1), both directions stored.
sp::DSparseTensor path(std::int64_t n, const einshard::Mesh& mesh) {
  const auto [first, last] = sp::simple_rows(n, mesh.comm());
  std::vector<std::int64_t> r, c;
  for (auto i = first; i < last; ++i) {
    if (i > 0) r.push_back(i), c.push_back(i - 1);
    if (i + 1 < n) r.push_back(i), c.push_back(i + 1);
  }
  const auto m = static_cast<std::int64_t>(r.size());
  return sp::DSparseTensor::from_local(at::ones({m}, at::kDouble), at::tensor(r, at::kLong).view({m}),
                                       at::tensor(c, at::kLong).view({m}), {n, n}, mesh);
}

/// `sweeps` sweeps of min-label propagation (owner -> ghost halo, int64 labels, an all-reduce of
/// the change flag per sweep, as the original); returns the sweeps that changed something.
int label_propagation(const sp::DSparseTensor& D, int sweeps) {
  const auto& local = D.local();
  const auto n_owned = D.layout()->local_size();
  sp::HaloExchange exchange(std::make_shared<sp::HaloPlan>(D.halo()));
  auto lab = at::cat({D.layout()->owned(), D.halo().ghosts}).contiguous();
  auto* l = lab.data_ptr<std::int64_t>();
  const auto rowptr = local.rowptr.to(at::kLong).contiguous();
  const auto col = local.col.to(at::kLong).contiguous();
  const auto* rp = rowptr.data_ptr<std::int64_t>();
  const auto* ci = col.data_ptr<std::int64_t>();
  int changed_sweeps = 0;
  for (int s = 0; s < sweeps; ++s) {
    int changed = 0;
    for (std::int64_t i = 0; i < n_owned; ++i)
      for (auto k = rp[i]; k < rp[i + 1]; ++k)
        if (l[ci[k]] < l[i]) l[i] = l[ci[k]], changed = 1;
    auto owned = lab.narrow(0, 0, n_owned);
    auto ghosts = lab.narrow(0, n_owned, lab.numel() - n_owned);
    exchange.start(owned, ghosts);
    exchange.finish();
    MPI_Allreduce(MPI_IN_PLACE, &changed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    changed_sweeps += changed;
  }
  return changed_sweeps;
}

/// A sample of a collective step, taken the same way for einshard's calls and for the plain
/// write()/read() of the same bytes: from a common start until the last rank is done.
template <class F>
double together(F&& step) {
  MPI_Barrier(MPI_COMM_WORLD);
  double ms = timed_ms([&] {
    step();
    MPI_Barrier(MPI_COMM_WORLD);
  });
  MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return ms;
}

/// Reads `file` into `into` (its size in bytes).
void read_into(const std::string& file, char* into, std::size_t size) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  std::size_t done = 0;
  while (done < size) {
    const auto r = ::read(fd, into + done, size - done);
    if (r <= 0) break;
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
}

void plain_write(const std::string& file, const std::vector<char>& bytes) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const auto w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w <= 0) break;
    done += static_cast<std::size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::int64_t n_path = 1000000, grid = 1000;
  int lp_sweeps = 200, reps = 3;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--path") n_path = std::stoll(argv[i + 1]);
    if (a == "--lp-sweeps") lp_sweeps = std::stoi(argv[i + 1]);
    if (a == "--grid") grid = std::stoll(argv[i + 1]);
    if (a == "--reps") reps = std::stoi(argv[i + 1]);
    if (a == "--dir") dir = argv[i + 1];
  }
  {
    const einshard::Mesh mesh(MPI_COMM_WORLD, {size}, {"x"});
    // ---- components ----
    const auto D = path(n_path, mesh);
    std::vector<double> fast, lp;
    sp::Components c;
    for (int r = 0; r < reps; ++r) {
      fast.push_back(timed_ms([&] { c = D.connected_components(); }));
      lp.push_back(timed_ms([&] { (void)label_propagation(D, lp_sweeps); }) / lp_sweeps);
    }
    const auto needed = static_cast<double>(n_path);  // n - 1 hops, plus the sweep without change
    if (rank == 0)
      std::printf(
          "{\"bench\":\"components\",\"ranks\":%d,\"n\":%lld,\"count\":%lld,\"rounds\":%d,\"rounds_bound\":%.1f,"
          "\"fastsv_ms\":%.2f,\"lp_ms_per_sweep\":%.4f,\"lp_sweeps_needed\":%.0f,\"lp_projected_ms\":%.1f,"
          "\"speedup\":%.1f}\n",
          size, static_cast<long long>(n_path), static_cast<long long>(c.count), c.rounds,
          2 * std::log2(static_cast<double>(n_path)), median(fast), median(lp), needed, median(lp) * needed,
          median(lp) * needed / median(fast));

    // ---- save / load ----
    auto coo_rows = sp::simple_rows(grid * grid, mesh.comm());
    std::vector<std::int64_t> r, cc;
    std::vector<double> v;
    for (auto i = coo_rows.first; i < coo_rows.second; ++i) {
      const auto x = i % grid, y = i / grid;
      r.push_back(i), cc.push_back(i), v.push_back(4.0);
      if (x > 0) r.push_back(i), cc.push_back(i - 1), v.push_back(-1.0);
      if (x + 1 < grid) r.push_back(i), cc.push_back(i + 1), v.push_back(-1.0);
      if (y > 0) r.push_back(i), cc.push_back(i - grid), v.push_back(-1.0);
      if (y + 1 < grid) r.push_back(i), cc.push_back(i + grid), v.push_back(-1.0);
    }
    const auto m = static_cast<std::int64_t>(r.size());
    const auto P = sp::DSparseTensor::from_local(at::tensor(v, at::kDouble).view({m}), at::tensor(r, at::kLong).view({m}),
                                                 at::tensor(cc, at::kLong).view({m}), {grid * grid, grid * grid}, mesh);
    long pid = static_cast<long>(::getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const auto where = std::filesystem::path(dir) / ("einshard_bench_io_" + std::to_string(pid));
    // The same bytes: this rank's partition file as save writes it.
    P.save(where.string());
    const auto bytes_per_rank = static_cast<std::size_t>(
        std::filesystem::file_size(where / ("partition_" + std::to_string(rank) + ".bin")));
    std::vector<char> buffer(bytes_per_rank, 1);
    const auto plain_file = (where / ("plain_" + std::to_string(rank))).string();
    std::vector<double> save, write, load, read, read_reused;
    for (int k = 0; k < reps; ++k) {
      save.push_back(together([&] { P.save(where.string()); }));
      write.push_back(together([&] { plain_write(plain_file, buffer); }));
      load.push_back(together([&] { (void)sp::DSparseTensor::load(where.string(), mesh); }));
      read.push_back(together([&] {
        const auto fresh = at::empty({static_cast<std::int64_t>(bytes_per_rank)}, at::kByte);
        read_into(plain_file, static_cast<char*>(fresh.data_ptr()), bytes_per_rank);
      }));
      read_reused.push_back(together([&] { read_into(plain_file, buffer.data(), bytes_per_rank); }));
    }
    double total = static_cast<double>(bytes_per_rank);
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const auto mbs = [&](double ms) { return total / 1e6 / (ms / 1e3); };
    if (rank == 0) {
      std::printf(
          "{\"bench\":\"save_load\",\"ranks\":%d,\"n\":%lld,\"bytes_per_rank\":%zu,\"save_mbs\":%.0f,"
          "\"plain_write_mbs\":%.0f,\"save_ratio\":%.2f,\"load_mbs\":%.0f,\"plain_read_mbs\":%.0f,\"load_ratio\":%.2f,"
          "\"plain_read_reused_mbs\":%.0f,\"load_ratio_reused\":%.2f}\n",
          size, static_cast<long long>(grid * grid), bytes_per_rank, mbs(median(save)), mbs(median(write)),
          median(write) / median(save), mbs(median(load)), mbs(median(read)), median(read) / median(load),
          mbs(median(read_reused)), median(read_reused) / median(load));
      std::filesystem::remove_all(where);
    }
  }
  MPI_Finalize();
  return 0;
}
