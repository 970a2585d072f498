// The preconditioners of sparse/preconditioner.hpp on row blocks of small matrices, at every world
// size of the suite (1, 2, 3, 4, 8), with uneven and empty blocks: each rank's z = M⁻¹ r against
// the same formula computed by torch on the full matrix, rank invariance of the rank-independent
// ones, PCG iteration counts, and setup faults raising the same error on every rank. SSOR and
// Neumann also through DSparseTensor::solve with every Krylov method, against a dense solve.
//
// The distributed matvec here is a test stand-in (all-gather x, multiply the dense row block): the
// operators only see the LocalRows/Matvec interface the solvers give them.

#include <ATen/ATen.h>
#include <mpi.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/shapes.hpp"
#include "einshard/sparse.hpp"
#include "einshard/sparse/preconditioner/factory.hpp"
#include "collective_error.hpp"
#include "test_support.hpp"

namespace test_preconditioner {

namespace es = einshard;
namespace sp = einshard::sparse;
using sp::Preconditioner;

namespace {

// A dense matrix's rows [lo, hi) as the LocalRows of one rank: owned columns first, then the
// halo columns in increasing global order.
struct Block {
  at::Tensor a;  // the full matrix (every rank holds it: the reference)
  std::vector<std::int64_t> sizes;
  std::int64_t lo = 0, hi = 0;
  MPI_Comm comm = MPI_COMM_WORLD;
  sp::Csr local;
  sp::detail::Matvec matvec;

  [[nodiscard]] sp::detail::LocalRows rows() const { return {local, hi - lo, comm}; }
  [[nodiscard]] at::Tensor owned(const at::Tensor& global) const { return global.slice(0, lo, hi).contiguous(); }
  [[nodiscard]] std::unique_ptr<sp::detail::PreconditionerOp> make(Preconditioner kind,
                                                                    sp::PreconditionerOptions opts = {}) const {
    return sp::detail::make_preconditioner(kind, rows(), matvec, opts);
  }
};

Block distribute(const at::Tensor& a, std::vector<std::int64_t> sizes, MPI_Comm comm) {
  Block b;
  b.a = a;
  b.sizes = std::move(sizes);
  b.comm = comm;
  const auto rank = static_cast<std::size_t>(es::comm::rank_of(comm));
  for (std::size_t r = 0; r < rank; ++r) b.lo += b.sizes[r];
  b.hi = b.lo + b.sizes[rank];
  const auto n_owned = b.hi - b.lo;
  const auto mine = a.slice(0, b.lo, b.hi);
  const auto idx = (mine != 0).nonzero();
  const auto row = idx.select(1, 0), col = idx.select(1, 1);
  const auto is_halo = (col < b.lo).logical_or(col >= b.hi);
  const auto halo = std::get<0>(at::_unique(col.masked_select(is_halo)));  // sorted
  auto local_col = col - b.lo;
  if (halo.numel() > 0)
    local_col = at::where(is_halo, n_owned + at::searchsorted(halo, col), local_col);
  b.local = sp::detail::coo_to_csr(mine.index({row, col}), row, local_col, n_owned, n_owned + halo.numel());
  const auto block_rows = mine.contiguous();
  const auto sizes_copy = b.sizes;
  b.matvec = [block_rows, sizes_copy, comm](const at::Tensor& x, at::Tensor& y) {
    const auto full = es::comm::all_gather(x, 0, sizes_copy, comm);
    y.copy_(at::mv(block_rows, full));
  };
  return b;
}

std::vector<std::int64_t> even(std::int64_t n, MPI_Comm comm) {
  return es::compute_split_shapes(n, es::comm::size_of(comm));
}

// Rank 0 empty (when there are several ranks), the rest split.
std::vector<std::int64_t> first_empty(std::int64_t n, MPI_Comm comm) {
  const auto p = es::comm::size_of(comm);
  if (p == 1) return {n};
  auto rest = es::compute_split_shapes(n, p - 1);
  rest.insert(rest.begin(), 0);
  return rest;
}

at::Tensor poisson_2d(std::int64_t nx, std::int64_t ny) {
  const auto n = nx * ny;
  auto a = at::zeros({n, n}, at::kDouble);
  auto* p = a.data_ptr<double>();
  for (std::int64_t y = 0; y < ny; ++y)
    for (std::int64_t x = 0; x < nx; ++x) {
      const auto i = y * nx + x;
      p[i * n + i] = 4;
      if (x > 0) p[i * n + i - 1] = -1;
      if (x + 1 < nx) p[i * n + i + 1] = -1;
      if (y > 0) p[i * n + i - nx] = -1;
      if (y + 1 < ny) p[i * n + i + nx] = -1;
    }
  return a;
}

// S A S with S = diag(1 .. 100, log-spaced, shuffled by a fixed permutation): SPD, badly scaled,
// so that diagonal scaling matters.
at::Tensor badly_scaled(const at::Tensor& a) {
  const auto n = a.size(0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  const auto s = at::logspace(0, 2, n, 10.0, at::kDouble).index_select(0, at::randperm(n, gen, at::kLong));
  return s.unsqueeze(1) * a * s.unsqueeze(0);
}

at::Tensor tridiagonal(std::int64_t n) {
  auto a = at::zeros({n, n}, at::kDouble);
  for (std::int64_t i = 0; i < n; ++i) {
    a[i][i] = 2.5;
    if (i > 0) a[i][i - 1] = -1;
    if (i + 1 < n) a[i][i + 1] = -1;
  }
  return a;
}

double all_dot(const at::Tensor& x, const at::Tensor& y, MPI_Comm comm) {
  double d = x.numel() > 0 ? at::dot(x, y).item<double>() : 0.0;
  MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_SUM, comm);
  return d;
}

// Textbook PCG on the block's rows; returns the iterations to ‖r‖ ≤ rtol ‖b‖ (maxit + 1 if never).
int pcg(const Block& blk, const sp::detail::PreconditionerOp& m, const at::Tensor& b, at::Tensor& x,
        double rtol = 1e-8, int maxit = 2000) {
  x = at::zeros_like(b);
  auto r = b.clone(), z = at::empty_like(b), q = at::empty_like(b);
  m.apply(r, z);
  auto p = z.clone();
  double rz = all_dot(r, z, blk.comm);
  const double stop = rtol * std::sqrt(all_dot(b, b, blk.comm));
  for (int it = 1; it <= maxit; ++it) {
    blk.matvec(p, q);
    const double alpha = rz / all_dot(p, q, blk.comm);
    x.add_(p, alpha);
    r.sub_(q, alpha);
    if (std::sqrt(all_dot(r, r, blk.comm)) <= stop) return it;
    m.apply(r, z);
    const double rz_next = all_dot(r, z, blk.comm);
    p.mul_(rz_next / rz).add_(z);
    rz = rz_next;
  }
  return maxit + 1;
}

at::Tensor apply(const sp::detail::PreconditionerOp& m, const at::Tensor& r) {
  auto z = at::empty_like(r);
  m.apply(r, z);
  return z;
}

using es::testing::collective_error;

// How comm::raise_if_any names the rank that found a fault (nothing on one rank).
std::string from_rank(int r) {
  return es::testing::world().size > 1 ? "rank " + std::to_string(r) + ": " : std::string();
}

// The rank that owns row 0 under `sizes`: rank 0, except past n ranks, where the split rule gives
// every row to the last rank.
int owner_of_first_row(const std::vector<std::int64_t>& sizes) {
  return static_cast<int>(std::find_if(sizes.begin(), sizes.end(), [](std::int64_t s) { return s > 0; }) - sizes.begin());
}

}  // namespace

TEST_CASE("jacobi: 1/a_ii with the sign kept, rank-invariant", "[sparse][preconditioner]") {
  const auto comm = es::testing::world().comm;
  // Mixed signs on the diagonal: every other row negated (and an unsymmetric tweak).
  auto a = poisson_2d(7, 5);
  const auto n = a.size(0);
  const auto sign = at::where(at::arange(n, at::kLong).remainder(2) == 0, 1.0, -1.0).to(at::kDouble);
  a = sign.unsqueeze(1) * a;
  a.diagonal().mul_(at::linspace(1, 3, n, at::kDouble));
  for (const auto& sizes : {even(n, comm), first_empty(n, comm)}) {
    const auto blk = distribute(a, sizes, comm);
    const auto m = blk.make(Preconditioner::jacobi);
    CHECK(m->name() == "jacobi");
    const auto r = at::randn({n}, at::kDouble);
    MPI_Bcast(r.data_ptr(), static_cast<int>(n), MPI_DOUBLE, 0, comm);
    CHECK(at::allclose(apply(*m, blk.owned(r)), blk.owned(r / a.diagonal()), 1e-15, 0));
  }
}

TEST_CASE("jacobi: uniform exactly when M⁻¹ is one positive constant on every rank", "[sparse][preconditioner]") {
  const auto comm = es::testing::world().comm;
  const auto a = poisson_2d(7, 5);
  const auto n = a.size(0);
  auto one_off = a.clone();
  one_off[n - 1][n - 1] = 4.5;  // on the last rank only
  for (const auto& sizes : {even(n, comm), first_empty(n, comm)}) {
    CHECK(distribute(a, sizes, comm).make(Preconditioner::jacobi)->uniform());
    CHECK(distribute(0.3 * a, sizes, comm).make(Preconditioner::jacobi)->uniform());
    CHECK_FALSE(distribute(-a, sizes, comm).make(Preconditioner::jacobi)->uniform());
    CHECK_FALSE(distribute(one_off, sizes, comm).make(Preconditioner::jacobi)->uniform());
    // The boundary rows' l1 norms are smaller than the interior's.
    CHECK_FALSE(distribute(a, sizes, comm).make(Preconditioner::l1_jacobi)->uniform());
    CHECK_FALSE(distribute(a, sizes, comm).make(Preconditioner::chebyshev)->uniform());
  }
}

TEST_CASE("jacobi on a negative-definite matrix: PCG converges as for -A", "[sparse][preconditioner]") {
  const auto comm = es::testing::world().comm;
  const auto a = badly_scaled(poisson_2d(12, 10));
  const auto n = a.size(0);
  const auto b_full = at::ones({n}, at::kDouble);
  const auto pos = distribute(a, even(n, comm), comm);
  const auto neg = distribute(-a, even(n, comm), comm);
  at::Tensor x_pos, x_neg;
  const int it_pos = pcg(pos, *pos.make(Preconditioner::jacobi), pos.owned(b_full), x_pos);
  const int it_neg = pcg(neg, *neg.make(Preconditioner::jacobi), neg.owned(b_full), x_neg);
  CHECK(it_pos <= 2000);
  CHECK(it_neg == it_pos);
  CHECK(at::allclose(x_neg, -x_pos, 1e-10, 1e-12));
}

TEST_CASE("jacobi: a zero diagonal on one rank raises the same error on every rank",
          "[sparse][preconditioner]") {
  const auto world = es::testing::world();
  auto a = poisson_2d(6, 4);
  const auto n = a.size(0);
  a[n - 1][n - 1] = 0;  // on the last rank
  const auto sizes = even(n, world.comm);
  const auto blk = distribute(a, sizes, world.comm);
  const auto last_row = "owned row " + std::to_string(sizes.back() - 1) + " (1 such row";
  for (const auto kind : {Preconditioner::jacobi, Preconditioner::chebyshev}) {
    const auto message = collective_error([&] { (void)blk.make(kind); }, world.comm);
    CHECK_THAT(message, Catch::StartsWith(from_rank(world.size - 1)) &&
                            Catch::Contains("nonzero diagonal") && Catch::Contains(last_row));
  }
}

TEST_CASE("l1_jacobi: 1 / the l1 norm of the whole row, halo columns included",
          "[sparse][preconditioner]") {
  const auto comm = es::testing::world().comm;
  auto a = badly_scaled(poisson_2d(6, 6));
  a[3][20] = 0.5;  // an unsymmetric far entry (a halo column for most splits)
  const auto n = a.size(0);
  for (const auto& sizes : {even(n, comm), first_empty(n, comm)}) {
    const auto blk = distribute(a, sizes, comm);
    const auto m = blk.make(Preconditioner::l1_jacobi);
    const auto r = at::linspace(-1, 2, n, at::kDouble);
    CHECK(at::allclose(apply(*m, blk.owned(r)), blk.owned(r / a.abs().sum(1)), 1e-15, 0));
  }
  // An all-zero row cannot be scaled.
  auto z = poisson_2d(4, 4);
  z[0].zero_();
  const auto blk = distribute(z, even(16, comm), comm);
  CHECK_THAT(collective_error([&] { (void)blk.make(Preconditioner::l1_jacobi); }, comm),
             Catch::StartsWith(from_rank(owner_of_first_row(even(16, comm)))) && Catch::Contains("l1_jacobi") &&
                 Catch::Contains("owned row 0 (1 such row"));
}

TEST_CASE("block_jacobi: ILU(0)/IC(0) of a tridiagonal block is its exact inverse",
          "[sparse][preconditioner]") {
  const auto comm = es::testing::world().comm;
  const auto a = tridiagonal(23);
  for (const auto& sizes : {even(23, comm), first_empty(23, comm)}) {
    const auto blk = distribute(a, sizes, comm);
    const auto r = at::cos(at::arange(23, at::kDouble));
    const auto block = a.slice(0, blk.lo, blk.hi).slice(1, blk.lo, blk.hi);
    const auto expected = blk.hi > blk.lo ? at::linalg_solve(block, blk.owned(r)) : blk.owned(r);
    for (const bool ic0 : {false, true}) {
      const auto m = blk.make(Preconditioner::block_jacobi, {.ic0 = ic0});
      CHECK(m->name() == (ic0 ? "block_jacobi(ic0)" : "block_jacobi(ilu0)"));
      CHECK(at::allclose(apply(*m, blk.owned(r)), expected, 1e-13, 1e-14));
    }
  }
}

TEST_CASE("block_jacobi: a failed pivot on one rank raises the same error on every rank",
          "[sparse][preconditioner]") {
  const auto world = es::testing::world();
  // -Poisson: ILU(0) is fine, IC(0) fails at once on every nonempty rank.
  const auto neg = distribute(-poisson_2d(5, 5), even(25, world.comm), world.comm);
  CHECK(collective_error([&] { (void)neg.make(Preconditioner::block_jacobi); }, world.comm).empty());
  CHECK_THAT(collective_error([&] { (void)neg.make(Preconditioner::block_jacobi, {.ic0 = true}); },
                              world.comm),
             Catch::StartsWith(from_rank(owner_of_first_row(even(25, world.comm)))) &&
                 Catch::Contains("non-positive pivot at owned row 0 "));
  // A zero pivot on the last rank only: its last row's diagonal cancels.
  auto a = poisson_2d(5, 5);
  a[24][24] = 0;
  const auto blk = distribute(a, even(25, world.comm), world.comm);
  CHECK_THAT(collective_error([&] { (void)blk.make(Preconditioner::block_jacobi); }, world.comm),
             Catch::StartsWith(from_rank(world.size - 1)) && Catch::Contains("zero pivot"));
}

TEST_CASE("chebyshev: a fixed symmetric operator, rank-invariant, with a sound λmax estimate",
          "[sparse][preconditioner]") {
  const auto comm = es::testing::world().comm;
  const auto a = badly_scaled(poisson_2d(9, 8));
  const auto n = a.size(0);
  const auto d_inv_a = a / a.diagonal().unsqueeze(1);
  const double lmax = at::real(at::linalg_eigvals(d_inv_a)).max().item<double>();
  // The reference: the same operator on one process holding every row.
  const auto whole = distribute(a, {n}, MPI_COMM_SELF);
  const auto m1 = whole.make(Preconditioner::chebyshev);
  const auto* cheb1 = dynamic_cast<const sp::detail::ChebyshevOp*>(m1.get());
  REQUIRE(cheb1 != nullptr);
  // Ritz values never exceed λmax; 10 Lanczos steps get within the 10% margin.
  CHECK(cheb1->lambda_max() <= lmax * (1 + 1e-12));
  CHECK(cheb1->lambda_max() >= lmax / 1.1);
  CHECK(cheb1->bounds().second == Approx(1.1 * cheb1->lambda_max()));
  CHECK(cheb1->bounds().first == Approx(cheb1->lambda_max() / 30));
  const auto r1 = at::sin(at::arange(n, at::kDouble)), r2 = at::cos(at::arange(n, at::kDouble) * 0.3);
  const auto z1 = apply(*m1, r1), z2 = apply(*m1, r2);
  CHECK(at::dot(r1, z2).item<double>() == Approx(at::dot(r2, z1).item<double>()).epsilon(1e-12));
  CHECK(at::dot(r1, z1).item<double>() > 0);
  for (const auto& sizes : {even(n, comm), first_empty(n, comm)}) {
    const auto blk = distribute(a, sizes, comm);
    const auto m = blk.make(Preconditioner::chebyshev);
    CHECK(m->name() == "chebyshev(3)");
    CHECK(dynamic_cast<const sp::detail::ChebyshevOp&>(*m).lambda_max() ==
          Approx(cheb1->lambda_max()).epsilon(1e-10));
    CHECK(at::allclose(apply(*m, blk.owned(r1)), blk.owned(z1), 1e-9, 1e-12));
  }
  // Bad options raise everywhere.
  const auto blk = distribute(a, even(n, comm), comm);
  CHECK_THAT(collective_error([&] { (void)blk.make(Preconditioner::chebyshev, {.chebyshev_degree = 0}); }, comm),
             Catch::Contains("chebyshev_degree"));
}

TEST_CASE("every preconditioner cuts PCG iterations on a badly scaled Poisson problem",
          "[sparse][preconditioner]") {
  const auto comm = es::testing::world().comm;
  const auto a = badly_scaled(poisson_2d(16, 16));
  const auto n = a.size(0);
  const auto b_full = at::ones({n}, at::kDouble);
  for (const auto& sizes : {even(n, comm), first_empty(n, comm)}) {
    const auto blk = distribute(a, sizes, comm);
    std::map<std::string, int> iterations;
    for (const auto& [label, kind, opts] :
         std::vector<std::tuple<std::string, Preconditioner, sp::PreconditionerOptions>>{
             {"none", Preconditioner::none, {}},
             {"jacobi", Preconditioner::jacobi, {}},
             {"l1_jacobi", Preconditioner::l1_jacobi, {}},
             {"ilu0", Preconditioner::block_jacobi, {}},
             {"ic0", Preconditioner::block_jacobi, {.ic0 = true}},
             {"chebyshev", Preconditioner::chebyshev, {}}}) {
      at::Tensor x;
      const auto m = blk.make(kind, opts);
      iterations[label] = pcg(blk, *m, blk.owned(b_full), x);
      // The answer is right (true residual), whatever the preconditioner.
      auto ax = at::empty_like(x);
      blk.matvec(x, ax);
      const auto res = blk.owned(b_full) - ax;
      CHECK(std::sqrt(all_dot(res, res, comm)) <= 1e-7 * std::sqrt(static_cast<double>(n)));
    }
    INFO("none " << iterations["none"] << ", jacobi " << iterations["jacobi"] << ", l1 "
                 << iterations["l1_jacobi"] << ", ilu0 " << iterations["ilu0"] << ", ic0 "
                 << iterations["ic0"] << ", chebyshev " << iterations["chebyshev"]);
    CHECK(iterations["jacobi"] < iterations["none"] / 2);
    CHECK(iterations["l1_jacobi"] < iterations["none"] / 2);
    CHECK(iterations["ilu0"] < iterations["jacobi"]);
    CHECK(std::abs(iterations["ic0"] - iterations["ilu0"]) <= 1);  // the same M for symmetric A
    CHECK(iterations["chebyshev"] < iterations["jacobi"]);
  }
}

namespace {

// The per-rank SSOR of the block rows [lo, hi) built densely: M = (D/ω + L)(D/ω)⁻¹(D/ω + U) / (2 − ω)
// of the owned×owned block, z = M⁻¹ r by a dense solve.
at::Tensor dense_ssor(const Block& blk, const at::Tensor& r_owned, double omega) {
  if (blk.hi == blk.lo) return r_owned.clone();
  const auto b = blk.a.slice(0, blk.lo, blk.hi).slice(1, blk.lo, blk.hi);
  const auto dw = at::diag(b.diagonal() / omega);
  const auto m = (dw + at::tril(b, -1)).matmul(at::linalg_inv(dw)).matmul(dw + at::triu(b, 1)) / (2 - omega);
  return at::linalg_solve(m, r_owned);
}

// The truncated Neumann series on the full matrix, summed term by term (not by Horner's rule):
// z = Σ_{k<d} (I − S A)^k S r, S = D⁻¹/‖D⁻¹A‖_∞ or I/‖A‖_∞.
at::Tensor dense_neumann(const at::Tensor& a, const at::Tensor& r, int degree, bool jacobi) {
  const auto n = a.size(0);
  const auto s = jacobi ? a.diagonal().reciprocal() : at::ones({n}, a.options());
  const auto tau = (s.abs().unsqueeze(1) * a.abs()).sum(1).max();
  const auto sa = (s / tau).unsqueeze(1) * a;
  auto term = (s / tau) * r;
  auto z = term.clone();
  for (int k = 1; k < degree; ++k) {
    term = term - at::mv(sa, term);
    z = z + term;
  }
  return z;
}

// A badly scaled Poisson matrix with one far unsymmetric entry (L ≠ Uᵀ: both sweeps matter).
at::Tensor unsymmetric_scaled(std::int64_t nx, std::int64_t ny) {
  auto a = badly_scaled(poisson_2d(nx, ny));
  a[2][nx * ny - 3] = 0.7;
  a[nx * ny - 5][1] = -0.4;
  return a;
}

// Poisson plus an imaginary skew part on the x-neighbours: Hermitian positive definite
// (the skew part's norm, 0.4, is below Poisson's smallest eigenvalue on a 6×5 grid, 0.47).
at::Tensor hermitian_poisson(std::int64_t nx, std::int64_t ny) {
  auto a = poisson_2d(nx, ny).to(at::kComplexDouble);
  const auto n = nx * ny;
  for (std::int64_t i = 0; i + 1 < n; ++i)
    if ((i + 1) % nx != 0) {
      a[i][i + 1] = c10::complex<double>(-1, 0.2);
      a[i + 1][i] = c10::complex<double>(-1, -0.2);
    }
  return a;
}

// The same r on every rank.
at::Tensor shared_vector(std::int64_t n, at::ScalarType dtype, MPI_Comm comm) {
  auto r = at::randn({n}, at::TensorOptions(dtype));
  MPI_Bcast(r.data_ptr(), static_cast<int>(r.nbytes()), MPI_BYTE, 0, comm);
  return r;
}

// Uneven blocks: rank r gets r + 1 shares of the rows (the last rank the most).
std::vector<std::int64_t> growing(std::int64_t n, MPI_Comm comm) {
  const auto p = es::comm::size_of(comm);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(p));
  const std::int64_t shares = p * (p + 1) / 2;
  std::int64_t given = 0;
  for (int r = 0; r < p; ++r) {
    sizes[static_cast<std::size_t>(r)] = n * (r + 1) / shares;
    given += sizes[static_cast<std::size_t>(r)];
  }
  sizes.back() += n - given;
  return sizes;
}

/// f(a, blk, r) for both test matrices (unsymmetric and scaled; Hermitian) over even, first-empty
/// and growing splits of their rows, r one right-hand side shared by every rank.
template <class F>
void for_each_split(F&& f) {
  const auto comm = es::testing::world().comm;
  for (const auto& a : {unsymmetric_scaled(7, 5), hermitian_poisson(6, 5)}) {
    const auto r = shared_vector(a.size(0), a.scalar_type(), comm);
    for (const auto& sizes : {even(a.size(0), comm), first_empty(a.size(0), comm), growing(a.size(0), comm)})
      f(a, distribute(a, sizes, comm), r);
  }
}

}  // namespace

TEST_CASE("ssor: each rank's z equals the dense SSOR of its owned block", "[sparse][preconditioner][ssor]") {
  for_each_split([](const at::Tensor& a, const Block& blk, const at::Tensor& r) {
    for (const double omega : {1.0, 1.4, 0.6}) {
      CAPTURE(a.scalar_type(), omega);
      const auto m = blk.make(Preconditioner::ssor, {.ssor_omega = omega});
      CHECK(m->name().rfind("ssor(", 0) == 0);
      CHECK(at::allclose(apply(*m, blk.owned(r)), dense_ssor(blk, blk.owned(r), omega), 1e-12, 1e-13));
      // In place (z the same tensor as r), as a Krylov method may call it.
      auto in_place = blk.owned(r).clone();
      m->apply(in_place, in_place);
      CHECK(at::allclose(in_place, apply(*m, blk.owned(r)), 0, 0));
    }
  });
  // On one process the whole matrix is one block: symmetric (Hermitian) and positive for HPD A.
  const auto h = hermitian_poisson(6, 5);
  const auto whole = distribute(h, {h.size(0)}, MPI_COMM_SELF);
  const auto m = whole.make(Preconditioner::ssor, {.ssor_omega = 1.3});
  const auto r1 = shared_vector(h.size(0), h.scalar_type(), MPI_COMM_SELF);
  const auto r2 = at::cos(at::arange(h.size(0), at::kDouble)).to(h.scalar_type());
  const auto z1 = apply(*m, r1), z2 = apply(*m, r2);
  CHECK(std::abs(at::vdot(r1, z2).item<c10::complex<double>>() - std::conj(at::vdot(r2, z1).item<c10::complex<double>>())) < 1e-12);
  CHECK(at::real(at::vdot(r1, z1)).item<double>() > 0);
}

TEST_CASE("neumann: z equals the dense truncated series, at every world size", "[sparse][preconditioner][neumann]") {
  for_each_split([](const at::Tensor& a, const Block& blk, const at::Tensor& r) {
    for (const int degree : {1, 2, 4})
      for (const bool jacobi : {true, false}) {
        CAPTURE(a.scalar_type(), degree, jacobi);
        const auto m = blk.make(Preconditioner::neumann, {.neumann_degree = degree, .neumann_jacobi = jacobi});
        CHECK(m->name() == "neumann(" + std::to_string(degree) + (jacobi ? ", jacobi)" : ")"));
        const auto expected = blk.owned(dense_neumann(a, r, degree, jacobi));
        CHECK(at::allclose(apply(*m, blk.owned(r)), expected, 1e-12, 1e-14));
        auto in_place = blk.owned(r).clone();
        m->apply(in_place, in_place);
        CHECK(at::allclose(in_place, expected, 1e-12, 1e-14));
        // One term is a diagonal, which the Krylov methods fuse.
        CHECK(m->diagonal().defined() == (degree == 1));
      }
  });
}

TEST_CASE("ssor and neumann: bad options and matrices raise the same error on every rank",
          "[sparse][preconditioner][ssor][neumann]") {
  const auto world = es::testing::world();
  const auto a = poisson_2d(6, 4);
  const auto n = a.size(0);
  for (const auto& sizes : {even(n, world.comm), first_empty(n, world.comm)}) {
    const auto blk = distribute(a, sizes, world.comm);
    for (const double omega : {0.0, 2.0, -0.5, 2.5, std::nan("")})
      CHECK_THAT(collective_error([&] { (void)blk.make(Preconditioner::ssor, {.ssor_omega = omega}); }, world.comm),
                 Catch::Contains("expected 0 < ssor_omega < 2"));
    for (const int degree : {0, -3})
      CHECK_THAT(collective_error([&] { (void)blk.make(Preconditioner::neumann, {.neumann_degree = degree}); }, world.comm),
                 Catch::Contains("expected neumann_degree ≥ 1, found " + std::to_string(degree)));
  }
  // A zero diagonal on the last rank: SSOR and Jacobi-scaled Neumann cannot scale by it; the
  // unscaled series can.
  auto z = a.clone();
  z[n - 1][n - 1] = 0;
  const auto sizes = even(n, world.comm);
  const auto blk = distribute(z, sizes, world.comm);
  const auto last_row = "owned row " + std::to_string(sizes.back() - 1) + " (1 such row";
  CHECK_THAT(collective_error([&] { (void)blk.make(Preconditioner::ssor); }, world.comm),
             Catch::StartsWith(from_rank(world.size - 1)) && Catch::Contains("ssor preconditioner setup") &&
                 Catch::Contains("nonzero diagonal") && Catch::Contains(last_row));
  CHECK_THAT(collective_error([&] { (void)blk.make(Preconditioner::neumann); }, world.comm),
             Catch::StartsWith(from_rank(world.size - 1)) && Catch::Contains("neumann preconditioner setup") &&
                 Catch::Contains(last_row));
  CHECK(collective_error([&] { (void)blk.make(Preconditioner::neumann, {.neumann_jacobi = false}); }, world.comm).empty());
  // A zero matrix has no ∞-norm to scale by; a NaN on one rank poisons τ on every rank.
  const auto zero = distribute(at::zeros({n, n}, at::kDouble), sizes, world.comm);
  CHECK_THAT(collective_error([&] { (void)zero.make(Preconditioner::neumann, {.neumann_jacobi = false}); }, world.comm),
             Catch::Contains("expected a nonzero finite ∞-norm of A, found 0"));
  auto nan = a.clone();
  nan[n - 1][n - 2] = std::nan("");
  const auto poisoned = distribute(nan, sizes, world.comm);
  CHECK_THAT(collective_error([&] { (void)poisoned.make(Preconditioner::neumann); }, world.comm),
             Catch::Contains("expected a nonzero finite ∞-norm of D⁻¹A, found inf"));
}

TEST_CASE("ssor and neumann cut PCG iterations on 2-D Poisson, plain and badly scaled",
          "[sparse][preconditioner][ssor][neumann]") {
  const auto comm = es::testing::world().comm;
  for (const bool scaled : {false, true}) {
    // Plain on 32² (on 16² CG needs so few iterations that 8 ranks' blocks leave SSOR no gain);
    // the badly scaled one on 16², where no preconditioner already takes a thousand.
    const auto a = scaled ? badly_scaled(poisson_2d(16, 16)) : poisson_2d(32, 32);
    const auto n = a.size(0);
    const auto b_full = at::ones({n}, at::kDouble);
    // The badly scaled one on one split only: the unscaled series takes ~900 iterations there.
    std::vector<std::vector<std::int64_t>> splits{first_empty(n, comm)};
    if (!scaled) splits.push_back(even(n, comm));
    for (const auto& sizes : splits) {
      const auto blk = distribute(a, sizes, comm);
      std::map<std::string, int> iterations;
      for (const auto& [label, kind, opts] :
           std::vector<std::tuple<std::string, Preconditioner, sp::PreconditionerOptions>>{
               {"none", Preconditioner::none, {}},
               {"jacobi", Preconditioner::jacobi, {}},
               {"ssor", Preconditioner::ssor, {}},
               {"ssor1.5", Preconditioner::ssor, {.ssor_omega = 1.5}},
               {"neumann2", Preconditioner::neumann, {}},
               {"neumann3", Preconditioner::neumann, {.neumann_degree = 3}},
               {"neumann2_unscaled", Preconditioner::neumann, {.neumann_jacobi = false}}}) {
        if (scaled && label == "none") continue;  // ~1000 iterations; the test above counts them
        at::Tensor x;
        iterations[label] = pcg(blk, *blk.make(kind, opts), blk.owned(b_full), x, 1e-8, 8000);
        auto ax = at::empty_like(x);
        blk.matvec(x, ax);
        const auto res = blk.owned(b_full) - ax;
        // The true residual; the scaled matrix's entries reach 4e4, so it drifts further from
        // the recursive one.
        CHECK(std::sqrt(all_dot(res, res, comm)) <= (scaled ? 1e-6 : 1e-7) * std::sqrt(static_cast<double>(n)));
      }
      std::ostringstream counts;
      for (const auto& [label, count] : iterations) counts << label << " " << count << ", ";
      INFO(counts.str());
      // Per-rank SSOR drops the coupling between the ranks' blocks, so its gain shrinks as the
      // blocks do (8 ranks: 4 grid lines each), as block Jacobi's; with one grid line per rank
      // (32 ranks) it is gone (79 iterations against Jacobi's 59), and only a bound is left.
      std::int64_t thinnest = n;
      for (auto rows : sizes)
        if (rows > 0) thinnest = std::min(thinnest, rows);
      if (thinnest >= 2 * (scaled ? 16 : 32)) {
        CHECK(iterations["ssor"] < iterations["jacobi"]);
        CHECK(iterations["ssor1.5"] < iterations["jacobi"]);
      } else {
        CHECK(iterations["ssor"] < 2 * iterations["jacobi"]);
        CHECK(iterations["ssor1.5"] < 2 * iterations["jacobi"]);
      }
      if (!scaled) {
        CHECK(iterations["jacobi"] == iterations["none"]);  // a constant diagonal
        // Both scalings of the series are one operator here, and each term helps.
        CHECK(iterations["neumann2"] < iterations["jacobi"]);
        CHECK(iterations["neumann3"] < iterations["neumann2"]);
        CHECK(iterations["neumann2_unscaled"] == iterations["neumann2"]);
      } else {
        // τ = ‖D⁻¹A‖_∞ is a loose bound on λ_max(D⁻¹A) < 2 when neighbouring rows' scales
        // differ (here by up to 100x), so the series adds little to its Jacobi scaling; without
        // that scaling it is barely better than no preconditioner.
        CHECK(iterations["neumann2"] <= iterations["jacobi"]);
        CHECK(iterations["neumann3"] <= iterations["neumann2"]);
        CHECK(iterations["neumann2_unscaled"] > 4 * iterations["neumann2"]);
      }
    }
  }
}

namespace {

// The dense matrix's rows [lo, hi) of `sizes` as a DSparseTensor (from_local: uneven, maybe empty).
sp::DSparseTensor from_rows(const at::Tensor& a, const std::vector<std::int64_t>& sizes) {
  const auto rank = static_cast<std::size_t>(es::testing::world().rank);
  std::int64_t lo = 0;
  for (std::size_t r = 0; r < rank; ++r) lo += sizes[r];
  const auto hi = lo + sizes[rank];
  const auto idx = (a.slice(0, lo, hi) != 0).nonzero();
  const auto row = idx.select(1, 0) + lo, col = idx.select(1, 1);
  const es::Mesh mesh(MPI_COMM_WORLD, {es::testing::world().size}, {"x"});
  return sp::DSparseTensor::from_local(a.index({row, col}), row, col, {a.size(0), a.size(1)}, mesh,
                                       {.owned_rows = at::arange(lo, hi, at::kLong)});
}

// 2-D convection–diffusion (central differences of c ∂x): nonsymmetric.
at::Tensor convection_diffusion(std::int64_t nx, std::int64_t ny, double c) {
  auto a = poisson_2d(nx, ny);
  const auto n = nx * ny;
  for (std::int64_t i = 0; i + 1 < n; ++i)
    if ((i + 1) % nx != 0) {
      a[i][i + 1] += c;
      a[i + 1][i] -= c;
    }
  return a;
}

}  // namespace

TEST_CASE("ssor and neumann in CG, MINRES, BiCGStab, GMRES and FGMRES: the dense solution",
          "[sparse][preconditioner][ssor][neumann]") {
  const auto comm = es::testing::world().comm;
  struct Case {
    at::Tensor a;
    std::vector<sp::Method> methods;
  };
  for (const auto& [a, methods] :
       {Case{badly_scaled(poisson_2d(12, 10)), {sp::Method::cg, sp::Method::minres, sp::Method::gmres}},
        Case{hermitian_poisson(9, 7), {sp::Method::cg, sp::Method::bicgstab}},
        Case{convection_diffusion(12, 10, 0.8), {sp::Method::bicgstab, sp::Method::gmres, sp::Method::fgmres}}}) {
    const auto n = a.size(0);
    const auto b = at::sin(at::arange(n, at::kDouble) * 0.7).to(a.scalar_type());
    const auto x_ref = at::linalg_solve(a, b);
    // Uneven blocks with rank 0 empty (the operators' own tests cover the other splits).
    const auto D = from_rows(a, first_empty(n, comm));
    const auto db = D.scatter(b);
    for (const auto method : methods) {
      // The defaults in every method, the other settings in the first (CI time).
      std::vector<std::pair<Preconditioner, sp::PreconditionerOptions>> kinds{{Preconditioner::ssor, {}},
                                                                              {Preconditioner::neumann, {}}};
      if (method == methods.front()) {
        kinds.emplace_back(Preconditioner::ssor, sp::PreconditionerOptions{.ssor_omega = 1.3});
        kinds.emplace_back(Preconditioner::neumann, sp::PreconditionerOptions{.neumann_degree = 3, .neumann_jacobi = false});
      }
      for (const auto& [kind, popts] : kinds) {
        CAPTURE(sp::to_string(method), sp::to_string(kind), popts.ssor_omega, popts.neumann_degree, a.scalar_type());
        // A full Krylov space (restart ≥ n): the unscaled series on the badly scaled matrix is a
        // poor preconditioner, on which restarted GMRES stagnates (the test is of M, not of GMRES).
        sp::SolveOptions o{.method = method, .preconditioner = kind, .rtol = 1e-11, .maxiter = 3000, .restart = 200};
        o.preconditioner_options = popts;
        const auto s = D.solve(db, o);
        CHECK(s.info.converged);
        CHECK(es::testing::same_on_every_rank(s.info.iterations, comm));
        const auto x = s.x.full_tensor();
        CHECK((x - x_ref).abs().max().item<double>() < 1e-8 * x_ref.abs().max().item<double>());
      }
    }
  }
}

TEST_CASE("ssor and neumann through solve: setups reused with the same options only, bad ω the same error everywhere",
          "[sparse][preconditioner][ssor][neumann]") {
  const auto comm = es::testing::world().comm;
  const auto a = poisson_2d(10, 9);
  const auto D = from_rows(a, first_empty(a.size(0), comm));
  const auto db = D.scatter(at::ones({a.size(0)}, at::kDouble));
  for (const auto kind : {Preconditioner::ssor, Preconditioner::neumann}) {
    sp::SolveOptions o{.method = sp::Method::cg, .preconditioner = kind};
    CHECK_FALSE(D.solve(db, o).info.preconditioner_reused);
    CHECK(D.solve(db, o).info.preconditioner_reused);
    auto other = o;
    if (kind == Preconditioner::ssor)
      other.preconditioner_options.ssor_omega = 1.2;
    else
      other.preconditioner_options.neumann_degree = 3;
    CHECK_FALSE(D.solve(db, other).info.preconditioner_reused);
    CHECK(D.solve(db, other).info.preconditioner_reused);
  }
  sp::SolveOptions bad{.method = sp::Method::gmres, .preconditioner = Preconditioner::ssor};
  bad.preconditioner_options.ssor_omega = 2.0;
  CHECK_THAT(collective_error([&] { (void)D.solve(db, bad); }, comm), Catch::Contains("expected 0 < ssor_omega < 2, found 2"));
}

TEST_CASE("preconditioner_from_string: every kind's name and torch-sla's spellings", "[sparse][preconditioner]") {
  for (const auto kind : {Preconditioner::none, Preconditioner::jacobi, Preconditioner::l1_jacobi, Preconditioner::block_jacobi,
                          Preconditioner::chebyshev, Preconditioner::amg, Preconditioner::ssor, Preconditioner::neumann})
    CHECK(sp::preconditioner_from_string(sp::to_string(kind)) == kind);
  CHECK(sp::preconditioner_from_string("polynomial") == Preconditioner::neumann);
  CHECK(sp::preconditioner_from_string("jacobi_l1") == Preconditioner::l1_jacobi);
  CHECK(sp::preconditioner_from_string("pyamg") == Preconditioner::amg);
  CHECK_THROWS_WITH(sp::preconditioner_from_string("sor"), Catch::Contains("found \"sor\""));
}

}  // namespace test_preconditioner
