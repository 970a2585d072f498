// elasticity: a 3-D cantilever under its own weight, linear elasticity with P1 tetrahedra,
// assembled element by element on the ranks with DSparseTensor::from_local and solved with CG and
// AMG for systems: three unknowns per node, nodal coarsening and the rigid body modes built from
// the node coordinates, given to hypre's BoomerAMG and to einshard's smoothed aggregation.
//
//   mpirun -n 4 build/release/examples/elasticity [--cells 8] [--rtol 1e-8]
//
// The beam is [0, 4] × [0, 1] × [0, 1], `cells` cubes across (4·cells along), each cut into six
// tetrahedra; E = 1, ν = 0.3, clamped at x = 0, gravity along −z. The clamped nodes are left out of
// the numbering (their unknowns are known), so the matrix is SPD and its rows come in whole nodes:
// node (i, j, k), i ≥ 1, is number ((i − 1)·(cells + 1) + k)·(cells + 1) + j, its displacement
// components rows 3·node + 0, 1, 2 — the interleaved order AmgOptions::functions describes.
//
// How the work is shared: each rank owns a slab of nodes along the beam and assembles the
// elements of its own cubes (a contiguous range), whatever rows they touch; from_local sends each
// entry to the owner of its row and sums duplicates (PETSc's MatSetValues with ADD_VALUES). The
// load vector is a sum over elements too; each rank sums the entries of its own rows.
//
// The program solves three times, with scalar AMG (hypre's, the defaults), with its systems options
// and with einshard's smoothed aggregation given the same modes, prints the iterations and times,
// checks that all reach the true residual ‖b − A x‖ ≤ rtol ‖b‖ and agree, and that the systems
// options and smoothed aggregation need fewer iterations than scalar AMG; it exits nonzero otherwise.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/sparse.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

struct Args {
  std::int64_t cells = 8;
  double rtol = 1e-8;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("elasticity: missing value after " + s);
    if (s == "--cells") a.cells = std::stoll(argv[++i]);
    else if (s == "--rtol") a.rtol = std::stod(argv[++i]);
    else throw std::runtime_error("elasticity: unknown argument " + s + " (--cells N, --rtol R)");
  }
  if (a.cells < 1) throw std::runtime_error("elasticity: --cells must be at least 1");
  return a;
}

/// The beam's grid: (4c + 1) × (c + 1) × (c + 1) nodes, h = 1 / c.
struct Beam {
  std::int64_t c, nx, ny, nz;
  double h;
  explicit Beam(std::int64_t cells) : c(cells), nx(4 * cells + 1), ny(cells + 1), nz(cells + 1), h(1.0 / cells) {}
  /// The unknowns' node number of grid node (i, j, k); -1 for the clamped face i = 0.
  [[nodiscard]] std::int64_t node(std::int64_t i, std::int64_t j, std::int64_t k) const {
    return i == 0 ? -1 : ((i - 1) * nz + k) * ny + j;
  }
  [[nodiscard]] std::int64_t nodes() const { return (nx - 1) * ny * nz; }
  [[nodiscard]] std::int64_t cubes() const { return (nx - 1) * (ny - 1) * (nz - 1); }
};

/// The four grid corners (i, j, k) of each of cube q's six tetrahedra (Kuhn's: the paths from
/// its corner 0 to corner 7 along the axes).
std::array<std::array<std::array<std::int64_t, 3>, 4>, 6> tetrahedra(const Beam& g, std::int64_t q) {
  const std::int64_t i = q / ((g.ny - 1) * (g.nz - 1)), k = (q / (g.ny - 1)) % (g.nz - 1), j = q % (g.ny - 1);
  const std::array<std::array<int, 3>, 6> paths{{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}};
  std::array<std::array<std::array<std::int64_t, 3>, 4>, 6> out{};
  for (std::size_t t = 0; t < 6; ++t) {
    std::array<std::int64_t, 3> at{i, j, k};
    out[t][0] = at;
    for (std::size_t s = 0; s < 3; ++s) {
      ++at[static_cast<std::size_t>(paths[t][s])];
      out[t][s + 1] = at;
    }
  }
  return out;
}

/// The 12 × 12 stiffness of a tetrahedron with corners x (row-major 4 × 3) and its volume:
/// K[(a,p),(b,q)] = V (λ ∂_p φ_a ∂_q φ_b + μ ∂_q φ_a ∂_p φ_b + μ δ_pq ∇φ_a·∇φ_b).
double element(const std::array<std::array<double, 3>, 4>& x, std::array<double, 144>& k) {
  const double nu = 0.3, lambda = nu / ((1 + nu) * (1 - 2 * nu)), mu = 1 / (2 * (1 + nu));
  // φ_a(x) = (J⁻¹ (x − x0))_a for a = 1..3, J = [x1 − x0, x2 − x0, x3 − x0]: ∇φ_a is row a − 1 of J⁻¹.
  std::array<std::array<double, 3>, 3> j{};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) j[r][c] = x[c + 1][r] - x[0][r];
  const double det = j[0][0] * (j[1][1] * j[2][2] - j[1][2] * j[2][1]) - j[0][1] * (j[1][0] * j[2][2] - j[1][2] * j[2][0]) +
                     j[0][2] * (j[1][0] * j[2][1] - j[1][1] * j[2][0]);
  std::array<std::array<double, 3>, 3> inv{};  // inv(J): row a − 1 is ∇φ_a
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      const int r1 = (c + 1) % 3, r2 = (c + 2) % 3, c1 = (r + 1) % 3, c2 = (r + 2) % 3;
      inv[r][c] = (j[r1][c1] * j[r2][c2] - j[r1][c2] * j[r2][c1]) / det;
    }
  std::array<std::array<double, 3>, 4> g{};
  for (int a = 1; a < 4; ++a) g[a] = inv[a - 1];
  for (int p = 0; p < 3; ++p) g[0][p] = -(g[1][p] + g[2][p] + g[3][p]);
  const double volume = std::abs(det) / 6;
  for (int a = 0; a < 4; ++a)
    for (int p = 0; p < 3; ++p)
      for (int b = 0; b < 4; ++b)
        for (int q = 0; q < 3; ++q) {
          const double dot = g[a][0] * g[b][0] + g[a][1] * g[b][1] + g[a][2] * g[b][2];
          k[static_cast<std::size_t>((a * 3 + p) * 12 + b * 3 + q)] =
              volume * (lambda * g[a][p] * g[b][q] + mu * g[a][q] * g[b][p] + (p == q ? mu * dot : 0.0));
        }
  return volume;
}

at::Tensor as_tensor(const std::vector<double>& v) {
  return at::tensor(at::ArrayRef<double>(v), at::kDouble);
}
at::Tensor as_tensor(const std::vector<std::int64_t>& v) {
  return at::tensor(at::ArrayRef<std::int64_t>(v), at::kLong);
}

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
    const Beam g(a.cells);
    const std::int64_t n = 3 * g.nodes();
    // This rank's nodes: a slab of whole nodes along the beam (uneven when the count does not divide).
    const std::int64_t first = g.nodes() * rank / size, last = g.nodes() * (rank + 1) / size;
    const auto corner = [&](const std::array<std::int64_t, 3>& at) {
      return std::array<double, 3>{static_cast<double>(at[0]) * g.h, static_cast<double>(at[1]) * g.h,
                                   static_cast<double>(at[2]) * g.h};
    };

    MPI_Barrier(MPI_COMM_WORLD);
    const double t_asm = MPI_Wtime();
    std::vector<double> values, load(static_cast<std::size_t>(3 * (last - first)), 0.0);
    std::vector<std::int64_t> rows, cols;
    std::array<double, 144> k{};
    const double weight = 1e-2;  // ρ g, along −z
    for (std::int64_t q = 0; q < g.cubes(); ++q) {
      // The matrix: this rank's share of the cubes. The load: every element touching its nodes.
      const bool mine = q * size / g.cubes() == rank;
      for (const auto& tet : tetrahedra(g, q)) {
        std::array<std::int64_t, 4> node{};
        std::array<std::array<double, 3>, 4> x{};
        bool touches = false;
        for (std::size_t v = 0; v < 4; ++v) {
          node[v] = g.node(tet[v][0], tet[v][1], tet[v][2]);
          x[v] = corner(tet[v]);
          touches |= node[v] >= first && node[v] < last;
        }
        if (!mine && !touches) continue;
        const double volume = element(x, k);
        for (std::size_t v = 0; v < 4; ++v)
          if (node[v] >= first && node[v] < last) load[static_cast<std::size_t>(3 * (node[v] - first) + 2)] -= weight * volume / 4;
        if (!mine) continue;
        for (std::size_t va = 0; va < 4; ++va)
          for (std::size_t vb = 0; vb < 4; ++vb) {
            if (node[va] < 0 || node[vb] < 0) continue;  // a clamped unknown: its row and column are gone
            for (std::size_t p = 0; p < 3; ++p)
              for (std::size_t q2 = 0; q2 < 3; ++q2) {
                rows.push_back(3 * node[va] + static_cast<std::int64_t>(p));
                cols.push_back(3 * node[vb] + static_cast<std::int64_t>(q2));
                values.push_back(k[(va * 3 + p) * 12 + vb * 3 + q2]);
              }
          }
      }
    }
    const auto A = sp::DSparseTensor::from_local(as_tensor(values), as_tensor(rows), as_tensor(cols), {n, n}, mesh,
                                                 {.owned_rows = at::arange(3 * first, 3 * last, at::kLong)});
    const auto b = A.vector(as_tensor(load));
    // The rigid body modes of this rank's nodes, from their coordinates (node order = row order).
    std::vector<double> xyz;
    for (std::int64_t v = first; v < last; ++v) {
      const std::int64_t j = v % g.ny, k3 = (v / g.ny) % g.nz, i = v / (g.ny * g.nz) + 1;
      const auto x = corner({i, j, k3});
      xyz.insert(xyz.end(), x.begin(), x.end());
    }
    const auto modes = sp::rigid_body_modes(as_tensor(xyz).reshape({-1, 3}), 3);
    const double assembly = MPI_Wtime() - t_asm;
    const auto nnz = A.global_nnz();
    if (rank == 0)
      std::printf("elasticity: cantilever %lldx%lldx%lld nodes, %lld unknowns, %lld nonzeros, %d ranks; assembly %.3f s\n",
                  static_cast<long long>(g.nx), static_cast<long long>(g.ny), static_cast<long long>(g.nz),
                  static_cast<long long>(n), static_cast<long long>(nnz), size, assembly);

    const auto solve = [&](const char* what, sp::Preconditioner kind, const sp::AmgOptions& amg) {
      sp::SolveOptions o{.preconditioner = kind, .rtol = a.rtol, .maxiter = 5000};
      o.preconditioner_options.amg = amg;
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      const auto fresh = A.with_values(A.values());  // its own setup, not the other solve's
      auto s = fresh.solve(b, o);
      const double seconds = MPI_Wtime() - t0;
      const double residual = (b - A.matvec(s.x)).norm().item<double>() / b.norm().item<double>();
      if (rank == 0)
        std::printf("  CG + %s: %d iterations, %.3f s (setup %.3f s), true residual %.1e, %s\n", what,
                    s.info.iterations, seconds, s.info.setup_seconds, residual,
                    s.info.converged ? "converged" : "NOT converged");
      if (!s.info.converged || residual > 10 * a.rtol) throw std::runtime_error(std::string(what) + " did not converge");
      return s;
    };
    const auto scalar = solve("AMG (scalar, the defaults)", sp::Preconditioner::amg, {});
    const auto systems = solve("AMG (functions = 3, nodal, rigid body modes)", sp::Preconditioner::amg,
                               {.functions = 3, .nodal = true, .near_null_space = modes});
    const auto aggregation = solve("smoothed aggregation (functions = 3, rigid body modes)",
                                   sp::Preconditioner::smoothed_aggregation, {.functions = 3, .near_null_space = modes});
    const double agree = std::max((scalar.x - systems.x).norm().item<double>(), (aggregation.x - systems.x).norm().item<double>()) /
                         systems.x.norm().item<double>();
    const auto& u = systems.x.local();
    double deflection = u.numel() > 0 ? -u.reshape({-1, 3}).select(1, 2).min().item<double>() : 0.0;
    MPI_Allreduce(MPI_IN_PLACE, &deflection, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("elasticity: iterations %d (systems) and %d (smoothed aggregation) vs %d (scalar), ratios %.2f and "
                  "%.2f; solutions agree to %.1e; largest deflection %.4e\n",
                  systems.info.iterations, aggregation.info.iterations, scalar.info.iterations,
                  static_cast<double>(systems.info.iterations) / scalar.info.iterations,
                  static_cast<double>(aggregation.info.iterations) / scalar.info.iterations, agree, deflection);
    if (agree > 1e-5 || systems.info.iterations >= scalar.info.iterations ||
        aggregation.info.iterations >= scalar.info.iterations)
      status = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elasticity (rank %d): %s\n", rank, e.what());
    status = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
