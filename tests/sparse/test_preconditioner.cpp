// The preconditioners of sparse/preconditioner.hpp on row blocks of small matrices, at every world
// size of the suite (1, 2, 3, 4, 8), with uneven and empty blocks: each rank's z = M⁻¹ r against
// the same formula computed by torch on the full matrix, rank invariance of the rank-independent
// ones, PCG iteration counts, and setup faults raising the same error on every rank.
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
#include <string>
#include <tuple>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/shapes.hpp"
#include "einshard/sparse/preconditioner.hpp"
#include "collective_error.hpp"
#include "test_support.hpp"

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
             Catch::StartsWith(from_rank(0)) && Catch::Contains("l1_jacobi") && Catch::Contains("owned row 0 (1 such row"));
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
             Catch::StartsWith(from_rank(0)) && Catch::Contains("non-positive pivot at owned row 0 "));
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
