// GPU benchmarks, each against its anchor in the same run (JSON lines on rank 0):
//
//   poisson  2-D 5-point Poisson, CG + Jacobi to --rtol (1e-6) on CUDA DSparseTensors: time to
//            solution, iterations, and the SpMV's bandwidth (a minimal-traffic model: values,
//            column indices, row pointers, x and y read or written once) as a fraction of
//            --peak-tbs (H200: 4.8 TB/s); anchors: torch's own CSR matvec (cuSPARSE) on the same
//            rows, and torch-sla's published H200 times (2e6 unknowns 0.42 s, 1.69e8 224 s).
//   fft      a 3-D complex64 FFT of n^3 through einfft against torch::fft_fftn on the same GPU.
//   tp       a tensor-parallel contraction's local product ("l f/tp, f/tp e -> l e") against
//            torch::matmul of the same shards.
//
//   mpirun -n 1 build/release/bench/gpu/einshard_bench_gpu --case poisson --n 1415 [--rtol 1e-8] [--maxiter M]
//   build/release/bench/gpu/einshard_bench_gpu --case fft --n 512
//   build/release/bench/gpu/einshard_bench_gpu --case tp --n 8192
//
// Without a CUDA device every case prints {"status": "skipped"} and exits 0; an einshard error
// (a part that refuses CUDA tensors) prints {"status": "error", "what": ...}, on every rank alike.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>
#include <einshard/sparse.hpp>

#include "../common.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard_bench::median;

namespace {

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

std::string escaped(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c == '\n' ? ' ' : c;
  }
  return o;
}

void emit(const std::string& body) {
  if (rank() == 0) std::printf("{\"bench\": \"gpu\", %s}\n", body.c_str());
  std::fflush(stdout);
}

/// Waits for the work queued on the current stream of `t`'s device (timings end there).
void sync(const at::Tensor& t) { es::comm::detail::finish_stream(t); }

template <class F>
double seconds(const at::Tensor& on, F&& f) {
  sync(on);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  f();
  sync(on);
  double dt = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return dt;
}

at::Device device() {
  return {at::kCUDA, static_cast<c10::DeviceIndex>(rank() % std::max<int>(1, static_cast<int>(at::getNumGPUs())))};
}

void poisson(std::int64_t n, double peak_tbs, int reps, int maxiter, double rtol) {
  const auto N = n * n;
  const auto dev = device();
  const es::Mesh mesh(MPI_COMM_WORLD, {world()}, {"p"});
  const auto rows_of = es::compute_split_shapes(N, world());
  std::int64_t first = 0;
  for (int r = 0; r < rank(); ++r) first += rows_of[static_cast<std::size_t>(r)];
  const auto mine = rows_of[static_cast<std::size_t>(rank())];
  // This rank's rows of the 5-point stencil, built on the device.
  const auto opts = at::TensorOptions(at::kLong).device(dev);
  const auto row = at::arange(first, first + mine, opts);
  const auto i = row.div(n, "floor"), j = row.remainder(n);
  std::vector<at::Tensor> R{row}, C{row}, V{at::full({mine}, 4.0, at::TensorOptions(at::kDouble).device(dev))};
  const std::vector<std::pair<at::Tensor, std::int64_t>> neighbours{
      {i.gt(0), -n}, {i.lt(n - 1), n}, {j.gt(0), -1}, {j.lt(n - 1), 1}};
  for (const auto& [keep, offset] : neighbours) {
    const auto r = row.masked_select(keep);
    R.push_back(r);
    C.push_back(r + offset);
    V.push_back(at::full({r.numel()}, -1.0, at::TensorOptions(at::kDouble).device(dev)));
  }
  const auto rows = at::cat(R), cols = at::cat(C), values = at::cat(V);
  const auto A = sp::DSparseTensor::from_local(values, rows, cols, {N, N}, mesh);
  const auto b = A.vector(at::ones({mine}, at::TensorOptions(at::kDouble).device(dev)));
  sp::SolveResult result;
  const double solve = seconds(values, [&] {
    result = A.solve(b, {.method = sp::Method::cg, .preconditioner = sp::Preconditioner::jacobi, .rtol = rtol,
                         .maxiter = maxiter});
  });
  // SpMV bandwidth, einshard's and torch's CSR (cuSPARSE) on this rank's rows.
  std::vector<double> ours, theirs;
  const auto x = A.vector(at::ones({mine}, at::TensorOptions(at::kDouble).device(dev)));
  const auto local = at::sparse_coo_tensor(at::stack({rows - first, cols}), values, {mine, N}).coalesce().to_sparse_csr();
  const auto xf = at::ones({N}, at::TensorOptions(at::kDouble).device(dev));
  for (int k = 0; k < reps; ++k) {
    ours.push_back(seconds(values, [&] { (void)A.matvec(x); }));
    theirs.push_back(seconds(values, [&] { (void)at::mv(local, xf); }));
  }
  const double nnz = static_cast<double>(A.global_nnz());
  const double bytes = nnz * (8 + 8) + static_cast<double>(N) * (8 + 8 + 8);
  const double bw = bytes / median(ours), bw_torch = bytes / median(theirs);
  const double published = N <= 3'000'000 ? 0.42 : 224.0;
  char line[1024];
  std::snprintf(line, sizeof line,
                "\"case\": \"poisson\", \"status\": \"ok\", \"kernels\": \"%s\", \"ranks\": %d, \"unknowns\": %lld, "
                "\"rtol\": %.1e, \"iterations\": %d, "
                "\"converged\": %s, \"seconds\": %.6g, \"torch_sla_published_seconds\": %.6g, "
                "\"spmv_seconds\": %.6g, \"spmv_tbs\": %.6g, \"spmv_fraction_of_peak\": %.4f, "
                "\"torch_csr_spmv_seconds\": %.6g, \"torch_csr_fraction_of_peak\": %.4f, \"peak_tbs\": %.3g",
                std::string(sp::kernels_for(values)).c_str(), world(), static_cast<long long>(N), rtol, result.info.iterations, result.info.converged ? "true" : "false",
                solve, published, median(ours), bw / 1e12, bw / (peak_tbs * 1e12), median(theirs),
                bw_torch / (peak_tbs * 1e12), peak_tbs);
  emit(line);
}

void fft(std::int64_t n, int reps) {
  const auto dev = device();
  const auto x = at::randn({n, n, n}, at::TensorOptions(at::kComplexFloat).device(dev));
  const es::Mesh mesh(MPI_COMM_WORLD, {world()}, {"p"});
  const es::Options o{.mesh = mesh, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}};
  // Warm-up: plans (cuFFT's plan cache) and the caching allocator.
  (void)es::einfft("x/p y z -> kx ky/p kz", {x}, o);
  (void)at::fft_fftn(x);
  std::vector<double> ours, theirs;
  for (int k = 0; k < reps; ++k) {
    ours.push_back(seconds(x, [&] { (void)es::einfft("x/p y z -> kx ky/p kz", {x}, o); }));
    theirs.push_back(seconds(x, [&] { (void)at::fft_fftn(x); }));
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "\"case\": \"fft3d\", \"status\": \"ok\", \"ranks\": %d, \"n\": %lld, \"dtype\": \"complex64\", "
                "\"einfft_seconds\": %.6g, \"torch_fftn_seconds\": %.6g, \"ratio\": %.4f",
                world(), static_cast<long long>(n), median(ours), median(theirs), median(ours) / median(theirs));
  emit(line);
}

void tp(std::int64_t n, int reps) {
  const auto dev = device();
  const auto f = es::compute_split_shapes(n, world())[static_cast<std::size_t>(rank())];
  const auto x = at::randn({n, f}, at::TensorOptions(at::kFloat).device(dev));
  const auto y = at::randn({f, n}, at::TensorOptions(at::kFloat).device(dev));
  const es::Mesh mesh(MPI_COMM_WORLD, {world()}, {"tp"});
  const es::Options o{.mesh = mesh};
  const std::string notation = "l f/tp, f/tp e -> l e";
  (void)es::einshard(notation, {x, y}, o);
  (void)at::matmul(x, y);
  std::vector<double> ours, theirs;
  for (int k = 0; k < reps; ++k) {
    ours.push_back(seconds(x, [&] { (void)es::einshard(notation, {x, y}, o); }));
    // The anchor: the local product plus the sum the notation implies (a no-op at one rank).
    theirs.push_back(seconds(x, [&] { (void)es::comm::all_reduce(at::matmul(x, y), mesh.comm("tp")); }));
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "\"case\": \"tp_contraction\", \"status\": \"ok\", \"ranks\": %d, \"n\": %lld, \"dtype\": \"float32\", "
                "\"einshard_seconds\": %.6g, \"matmul_allreduce_seconds\": %.6g, \"ratio\": %.4f",
                world(), static_cast<long long>(n), median(ours), median(theirs), median(ours) / median(theirs));
  emit(line);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::string which = "fft";
  std::int64_t n = 0;
  double peak = 4.8;
  int reps = 10, maxiter = 100000;
  double rtol = 1e-6;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (std::strcmp(argv[a], "--case") == 0) which = argv[a + 1];
    if (std::strcmp(argv[a], "--n") == 0) n = std::atoll(argv[a + 1]);
    if (std::strcmp(argv[a], "--peak-tbs") == 0) peak = std::atof(argv[a + 1]);
    if (std::strcmp(argv[a], "--reps") == 0) reps = std::atoi(argv[a + 1]);
    if (std::strcmp(argv[a], "--maxiter") == 0) maxiter = std::atoi(argv[a + 1]);
    if (std::strcmp(argv[a], "--rtol") == 0) rtol = std::atof(argv[a + 1]);
  }
  int have = at::hasCUDA() && at::getNumGPUs() > 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (have == 0) {
    emit("\"case\": \"" + which + "\", \"status\": \"skipped\", \"reason\": \"no CUDA device\"");
  } else {
    try {
      if (which == "poisson") poisson(n > 0 ? n : 1415, peak, reps, maxiter, rtol);
      else if (which == "fft") fft(n > 0 ? n : 512, reps);
      else if (which == "tp") tp(n > 0 ? n : 8192, reps);
      else emit("\"case\": \"" + escaped(which) + "\", \"status\": \"error\", \"what\": \"unknown case\"");
    } catch (const std::exception& e) {
      emit("\"case\": \"" + escaped(which) + "\", \"status\": \"error\", \"what\": \"" + escaped(e.what()) + "\"");
    }
  }
  MPI_Finalize();
  return 0;
}
