// The flagship example: a Poisson problem -Δu = f on the unit square (or cube) with u = 0 on the
// boundary, assembled distributed (each rank builds only its own rows), solved under mpirun with
// CG and algebraic multigrid (hypre's BoomerAMG over all ranks: the solver to copy for problems of
// this kind), and checked against the manufactured solution u = Π_d g(x_d), g(t) = sin(πt) e^t
// (not an eigenvector of the discrete Laplacian, so CG has real work to do).
//
//   mpirun -n 4 --oversubscribe build/release/examples/poisson [--n 256] [--dim 2|3]
//          [--pc amg|none|jacobi|l1_jacobi|block_jacobi|chebyshev|ssor|neumann]
//          [--variant standard|single] [--rtol 1e-8] [--every N]
//
// Prints the residual as CG goes (every iteration with AMG, every 50th otherwise; --every sets
// it, 0 for none), then the iterations, the final residual, the error against the exact solution
// (it shrinks as h^2) and the time to solution (preconditioner setup + iterations); with Jacobi or
// no preconditioner also the bytes streamed per second. Exits nonzero if CG does not converge or
// the error is not at the discretization level. Without hypre (einshard configured without
// libhypre-dev) the default preconditioner is Jacobi.

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include <einshard/mesh.hpp>
#include <einshard/sparse.hpp>

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

struct Args {
  std::int64_t n = 256;  // interior points per side
  int dim = 2;
#if defined(EINSHARD_HAS_HYPRE)
  std::string pc = "amg";
#else
  std::string pc = "jacobi";
#endif
  std::string variant = "standard";
  double rtol = 1e-8;
  int every = -1;  // -1: every iteration with amg, every 50th otherwise
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--n") a.n = std::stoll(v);
    else if (k == "--dim") a.dim = std::stoi(v);
    else if (k == "--pc") a.pc = v;
    else if (k == "--variant") a.variant = v;
    else if (k == "--rtol") a.rtol = std::stod(v);
    else if (k == "--every") a.every = std::stoi(v);
    else throw std::invalid_argument("unknown option " + k);
  }
  if (a.dim != 2 && a.dim != 3) throw std::invalid_argument("--dim must be 2 or 3");
  if (a.every < 0) a.every = a.pc == "amg" ? 1 : 50;
  return a;
}

/// This rank's rows of the (2d+1)-point Laplacian scaled by 1/h^2, and f at those points.
struct Rows {
  std::vector<double> values, f, exact;
  std::vector<std::int64_t> rows, cols;
};

Rows assemble(const Args& a, std::int64_t first, std::int64_t last) {
  Rows out;
  const auto n = a.n;
  const double h = 1.0 / static_cast<double>(n + 1), inv_h2 = 1.0 / (h * h);
  const double pi = std::numbers::pi;
  const std::int64_t stride[3] = {1, n, n * n};
  for (std::int64_t i = first; i < last; ++i) {
    std::int64_t c[3] = {i % n, (i / n) % n, a.dim == 3 ? i / (n * n) : 0};
    out.rows.push_back(i);
    out.cols.push_back(i);
    out.values.push_back(2.0 * a.dim * inv_h2);
    double g[3], g2[3];
    for (int d = 0; d < a.dim; ++d) {
      for (int side : {-1, 1}) {
        const auto nb = c[d] + side;
        if (nb < 0 || nb >= n) continue;  // Dirichlet boundary: the neighbour is a known zero
        out.rows.push_back(i);
        out.cols.push_back(i + side * stride[d]);
        out.values.push_back(-inv_h2);
      }
      const double t = h * static_cast<double>(c[d] + 1);
      g[d] = std::sin(pi * t) * std::exp(t);
      g2[d] = std::exp(t) * ((1.0 - pi * pi) * std::sin(pi * t) + 2.0 * pi * std::cos(pi * t));
    }
    double u = 1.0, f = 0.0;
    for (int d = 0; d < a.dim; ++d) {
      u *= g[d];
      double term = -g2[d];
      for (int e = 0; e < a.dim; ++e)
        if (e != d) term *= g[e];
      f += term;
    }
    out.exact.push_back(u);
    out.f.push_back(f);
  }
  return out;
}

at::Tensor tensor(const std::vector<double>& v) { return at::tensor(v, at::kDouble).view({static_cast<std::int64_t>(v.size())}); }
at::Tensor tensor(const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong).view({static_cast<std::int64_t>(v.size())}); }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  at::set_num_threads(1);
  int status = 0;
  try {
    const auto a = parse(argc, argv);
    const es::Mesh mesh(MPI_COMM_WORLD, {size}, {"rows"});
    const std::int64_t N = a.dim == 2 ? a.n * a.n : a.n * a.n * a.n;

    // Distributed assembly: this rank builds its own rows only.
    const double t_asm = MPI_Wtime();
    const auto [first, last] = sp::simple_rows(N, mesh.comm());
    const auto rows = assemble(a, first, last);
    const auto A = sp::DSparseTensor::from_local(tensor(rows.values), tensor(rows.rows), tensor(rows.cols), {N, N}, mesh);
    const auto b = A.vector(tensor(rows.f));
    const double assembly = MPI_Wtime() - t_asm;
    const auto global_nnz = A.global_nnz();  // collective: every rank calls it
    if (rank == 0)
      std::printf("poisson: %dD, %lld unknowns, %lld nonzeros, %d ranks, CG (%s) + %s, rtol %.0e; assembly %.3f s\n",
                  a.dim, static_cast<long long>(N), static_cast<long long>(global_nnz), size,
                  a.variant.c_str(), a.pc.c_str(), a.rtol, assembly);

    MPI_Barrier(MPI_COMM_WORLD);
    const double t_solve = MPI_Wtime();
    const auto s = A.solve(b, {.preconditioner = sp::preconditioner_from_string(a.pc),
                               .rtol = a.rtol,
                               .maxiter = 100000,
                               .monitor =
                                   [&](int k, double r) {
                                     if (rank == 0 && a.every > 0 && k % a.every == 0)
                                       std::printf("  iteration %6d  residual %.3e\n", k, r);
                                   },
                               .cg_variant = a.variant == "single" ? sp::CgVariant::single_reduction
                                                                  : sp::CgVariant::standard});
    double to_solution = MPI_Wtime() - t_solve;  // setup + iterations, slowest rank
    MPI_Allreduce(MPI_IN_PLACE, &to_solution, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    // The error against the exact solution, max over all points (a reduction, no gather).
    double err = (s.x.local() - tensor(rows.exact)).abs().max().item<double>();
    if (s.x.local().numel() == 0) err = 0.0;
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double h = 1.0 / static_cast<double>(a.n + 1);

    // Bytes one standard CG iteration streams: the matrix (values, 32-bit columns, row pointers)
    // and the vectors of the fused kernels (SpMV: p in, q out; update: x, p, r, q in, x, r out,
    // + d in, z out with Jacobi; direction: z or r and p in, p out).
    const double nnz = static_cast<double>(global_nnz), n = static_cast<double>(N);
    const bool jac = a.pc == "jacobi" || a.pc == "l1_jacobi";
    const double bytes = nnz * 12.0 + n * 8.0 + n * 8.0 * (2 + 6 + (jac ? 2 : 0) + 3);
    const double per_iter = s.info.iterations > 0 ? s.info.seconds / s.info.iterations : 0.0;
    if (rank == 0) {
      std::printf("poisson: %s after %d iterations, residual %.3e (||b|| %.3e)\n", sp::to_string(s.info.reason),
                  s.info.iterations, s.info.residual_norm, s.info.rhs_norm);
      std::printf("poisson: max error vs exact solution %.3e (h^2 = %.3e)\n", err, h * h);
      std::printf("poisson: time to solution %.3f s (preconditioner setup %.3f s, iterations %.3f s, %.2f ms each)\n",
                  to_solution, s.info.setup_seconds, s.info.seconds, per_iter * 1e3);
      if (a.pc == "none" || jac)
        std::printf("poisson: %.1f M row-iterations/s, ~%.2f GB/s streamed\n", per_iter > 0 ? n / per_iter / 1e6 : 0.0,
                    per_iter > 0 ? bytes / per_iter / 1e9 : 0.0);
      std::printf("poisson: to compare preconditioners, rerun with --pc jacobi (or amg, none, l1_jacobi, block_jacobi, "
                  "chebyshev, ssor, neumann)\n");
    }
    // Second-order discretization: the error is about (dim pi^2 / 12) h^2 * max|u''|-ish; allow 2x.
    const double bound = 2.0 * a.dim * std::numbers::pi * std::numbers::pi / 12.0 * h * h + 10 * a.rtol;
    if (!s.info.converged || err > bound) {
      if (rank == 0) std::printf("poisson: FAILED (converged %d, error %.3e > bound %.3e)\n", s.info.converged, err, bound);
      status = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "poisson: rank %d: %s\n", rank, e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
