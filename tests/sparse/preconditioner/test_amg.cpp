// The amg preconditioner (hypre BoomerAMG over the whole distributed matrix): CG, GMRES, FGMRES,
// BiCGStab and MINRES on 2-D/3-D Poisson and anisotropic diffusion with every partition method,
// against a dense one-process solve and against the iteration count of the same AMG on one process;
// setup reuse; options; the faults, the same error on every rank.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "collective_error.hpp"
#include "einshard/sparse.hpp"
#include "einshard/sparse/preconditioner/amg.hpp"
#include "einshard/sparse/preconditioner/factory.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_amg {

namespace es = einshard;
namespace sp = einshard::sparse;

#if defined(EINSHARD_HAS_HYPRE)

namespace {

using es::testing::world_mesh;
es::Mesh self_mesh() { return es::Mesh(MPI_COMM_SELF, {1}, {"x"}); }

using es::testing::relative_error;

struct Problem {
  std::string name;
  es::testing::Coo coo;
  at::Tensor coords;
  int max_iterations;  // what AMG-CG needs at rtol 1e-10, with room (measured: 2-D 9, 3-D 8, anisotropic 9)
};

std::vector<Problem> problems() {
  return {{"poisson2d 24x24", es::testing::poisson2d(24, 24), es::testing::grid_coords(24, 24), 14},
          {"poisson3d 8x8x8", es::testing::poisson3d(8, 8, 8), es::testing::grid_coords3d(8, 8, 8), 14},
          {"anisotropic 24x24 eps 0.01", es::testing::anisotropic2d(24, 24, 0.01), es::testing::grid_coords(24, 24), 16}};
}

sp::DSparseTensor distribute(const Problem& p, const es::Mesh& mesh, sp::PartitionMethod method) {
  const sp::SparseTensor A(p.coo.values, p.coo.rows, p.coo.cols, {p.coo.n, p.coo.n});
  return sp::DSparseTensor::partition(A, mesh, {.method = method, .coords = p.coords});
}

}  // namespace

TEST_CASE("AMG-CG and AMG-GMRES give the one-process solution for every problem and partition",
          "[sparse][amg]") {
  const auto mesh = world_mesh();
  using M = sp::PartitionMethod;
  for (const auto& p : problems()) {
    const auto b = es::testing::random_vector(p.coo.n, 5);
    const auto ref = at::linalg_solve(es::testing::dense(p.coo), b);
    // The same hierarchy on one process: the iteration count the distributed one should keep.
    const auto whole = distribute(p, self_mesh(), M::simple);
    const auto one = whole.solve(whole.scatter(b), {.preconditioner = sp::Preconditioner::amg, .rtol = 1e-10});
    REQUIRE(one.info.converged);
    for (auto method : {M::simple, M::rcb, M::metis})
      for (auto krylov : {sp::Method::cg, sp::Method::gmres}) {
        CAPTURE(p.name, static_cast<int>(method), sp::to_string(krylov));
        const auto D = distribute(p, mesh, method);
        const auto s = D.solve(D.scatter(b), {.method = krylov, .preconditioner = sp::Preconditioner::amg, .rtol = 1e-10});
        CHECK(s.info.converged);
        CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
        const auto true_r = (D.scatter(b) - D.matvec(s.x)).norm().item<double>();
        CHECK(true_r <= 1e-9 * s.info.rhs_norm);
        // Bounded and nearly rank invariant (within 2 up to 8 ranks): hybrid Gauss–Seidel is
        // Jacobi across ranks and the coarsening treats rank boundaries apart, so the count may
        // move a little with the partition, and more when ranks hold a few dozen rows (13-32
        // ranks: 3).
        CHECK(s.info.iterations <= p.max_iterations);
        CHECK(std::abs(s.info.iterations - one.info.iterations) <= (mesh.size() <= 8 ? 2 : 4));
        CHECK(es::testing::same_on_every_rank(s.info.iterations, MPI_COMM_WORLD));
        CHECK(s.info.levels >= 2);
        CHECK(s.info.operator_complexity >= 1.0);
        // 2.2 on one process; Falgout's CLJP pass over the rank boundaries adds coarse points,
        // which on 8 ranks of 72 rows is most of the grid (3.9 there; 2.2-2.3 at 1000² on 8).
        CHECK(s.info.operator_complexity < 4.0);
        CHECK(s.info.setup_seconds > 0.0);
      }
  }
}

TEST_CASE("AMG's defaults follow the matrix, and the options a caller sets win", "[sparse][amg]") {
  using C = sp::AmgCoarsening;
  using I = sp::AmgInterpolation;
  // The rule itself: ≤ 6 stored entries per row on average (a 5-point stencil) or more.
  const auto two_d = sp::AmgOptions{}.resolved(4.99), three_d = sp::AmgOptions{}.resolved(6.94);
  CHECK(two_d == sp::AmgOptions{.coarsening = C::falgout, .interpolation = I::classical, .strong_threshold = 0.25,
                                .max_elements = 0, .smoother = sp::AmgSmoother::l1_gauss_seidel, .aggressive_levels = 0});
  CHECK(three_d == sp::AmgOptions{.coarsening = C::hmis, .interpolation = I::extended_i, .strong_threshold = 0.5,
                                  .max_elements = 4, .smoother = sp::AmgSmoother::l1_gauss_seidel, .aggressive_levels = 1});
  // Nodal coarsening (a system): θ = 0.25 at any width; the other fields as for a scalar matrix.
  const auto nodal = sp::AmgOptions{.functions = 3, .nodal = true}.resolved(41.3);
  CHECK(nodal == sp::AmgOptions{.coarsening = C::hmis, .interpolation = I::extended_i, .strong_threshold = 0.25,
                                .max_elements = 4, .smoother = sp::AmgSmoother::l1_gauss_seidel, .aggressive_levels = 1, .functions = 3, .nodal = true});
  CHECK(sp::AmgOptions{.functions = 3}.resolved(41.3).strong_threshold == 0.5);
  // A near-null space keeps one aggressive level even on a narrow matrix (its fit needs it).
  const sp::AmgOptions fitted{.functions = 2, .nodal = true, .near_null_space = at::zeros({4, 1}, at::kDouble)};
  CHECK(fitted.resolved(4.99).aggressive_levels == 1);
  CHECK(sp::AmgOptions{.functions = 2, .nodal = true}.resolved(4.99).aggressive_levels == 0);
  const auto mine = sp::AmgOptions{.coarsening = C::pmis, .strong_threshold = 0.3, .sweeps = 2}.resolved(4.99);
  CHECK(mine.coarsening == C::pmis);
  CHECK(mine.strong_threshold == 0.3);
  CHECK(mine.sweeps == 2);
  CHECK(mine.interpolation == I::classical);  // unset: still the matrix's default
  CHECK(mine.resolved(6.94) == mine);         // resolving twice changes nothing

  // Through a solve on every rank: the default builds the same hierarchy as its explicit
  // settings (same iterations and complexity), a different explicit choice does not.
  const auto mesh = world_mesh();
  const auto all = problems();
  for (std::size_t k : {std::size_t{0}, std::size_t{1}}) {
    const auto& p = all[k];
    CAPTURE(p.name);
    const auto D = distribute(p, mesh, sp::PartitionMethod::rcb);
    const auto b = D.scatter(es::testing::random_vector(p.coo.n, 21));
    const auto run = [&](const sp::AmgOptions& amg) {
      sp::SolveOptions o{.preconditioner = sp::Preconditioner::amg, .rtol = 1e-10};
      o.preconditioner_options.amg = amg;
      const auto s = D.solve(b, o);
      CHECK(s.info.converged);
      return std::pair{s.info.iterations, s.info.operator_complexity};
    };
    const auto stencil = k == 0 ? two_d : three_d, other = k == 0 ? three_d : two_d;
    const auto by_default = run({});
    CHECK(by_default == run(stencil));
    CHECK(by_default.second != run(other).second);
  }
}

TEST_CASE("AMG preconditions BiCGStab, MINRES, FGMRES and the CG variants too", "[sparse][amg]") {
  const auto mesh = world_mesh();
  const auto p = problems()[0];
  const auto b = es::testing::random_vector(p.coo.n, 8);
  const auto ref = at::linalg_solve(es::testing::dense(p.coo), b);
  const auto D = distribute(p, mesh, sp::PartitionMethod::rcb);
  const auto check = [&](const sp::SolveOptions& o) {
    const auto s = D.solve(D.scatter(b), o);
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
    CHECK(s.info.iterations <= p.max_iterations);
    return s.info.iterations;
  };
  const sp::SolveOptions base{.preconditioner = sp::Preconditioner::amg, .rtol = 1e-10};
  for (auto method : {sp::Method::bicgstab, sp::Method::minres, sp::Method::fgmres}) {
    CAPTURE(sp::to_string(method));
    auto o = base;
    o.method = method;
    check(o);
  }
  auto o = base;
  const int standard = check(o);
  for (auto variant : {sp::CgVariant::single_reduction, sp::CgVariant::pipelined}) {
    CAPTURE(static_cast<int>(variant));
    o.cg_variant = variant;
    CHECK(std::abs(check(o) - standard) <= 1);
  }
}

TEST_CASE("AMG options: every smoother, coarsening and cycle converges to the same solution", "[sparse][amg]") {
  const auto mesh = world_mesh();
  const auto p = problems()[1];
  const auto b = es::testing::random_vector(p.coo.n, 9);
  const auto ref = at::linalg_solve(es::testing::dense(p.coo), b);
  const auto D = distribute(p, mesh, sp::PartitionMethod::metis);
  using C = sp::AmgCoarsening;
  using I = sp::AmgInterpolation;
  using S = sp::AmgSmoother;
  using A = sp::AmgAggressiveInterpolation;
  const std::vector<sp::AmgOptions> variants = {
      {},
      {.coarsening = C::pmis},
      {.coarsening = C::falgout, .interpolation = I::classical},
      {.interpolation = I::extended, .strong_threshold = 0.5},
      {.interpolation = I::standard, .max_elements = 0},
      {.coarsening = C::falgout, .interpolation = I::direct},
      {.interpolation = I::multipass, .aggressive_levels = 1},
      {.aggressive_levels = 1, .aggressive_interpolation = A::two_stage_extended_i},
      {.coarsening = C::pmis, .aggressive_levels = 1, .aggressive_interpolation = A::two_stage_standard},
      {.max_elements = 0, .aggressive_levels = 1, .aggressive_interpolation = A::two_stage_extended},
      {.smoother = S::hybrid_gauss_seidel},
      {.smoother = S::l1_jacobi, .sweeps = 2},
      {.smoother = S::chebyshev},
      {.cycle = sp::AmgCycle::w},
      {.max_levels = 2, .aggressive_levels = 0},  // two levels: the coarse one is only smoothed
      {.cycles = 2},
      {.coarsening = C::falgout, .interpolation = I::classical, .max_elements = 0, .smoother = S::hybrid_gauss_seidel,
       .cf_order = true},  // PETSc's PCHYPRE settings
  };
  int default_iterations = 0;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    CAPTURE(i);
    sp::SolveOptions o{.preconditioner = sp::Preconditioner::amg, .rtol = 1e-10};
    o.preconditioner_options.amg = variants[i];
    const auto s = D.solve(D.scatter(b), o);
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
    if (variants[i].max_levels == 2)
      CHECK(s.info.levels <= 2);  // a two-level method: the coarse level is only smoothed (hypre)
    else
      CHECK(s.info.iterations <= 40);
    if (i == 0) default_iterations = s.info.iterations;
    if (variants[i].cycles == 2) CHECK(s.info.iterations < default_iterations);
  }
}

// docs/sparse.md names these for users who want the 3-D count to stay within 2 as ranks are added
// (measured at 100³, where the default moves by 3: Chebyshev 15-17, PMIS 22 at 1 to 8 ranks;
// symmetric hybrid Gauss–Seidel, 14-16 there, moves by 3 on this problem's 128-row shards at 4
// ranks: it is Jacobi across ranks, so it is not claimed for small shards);
// here the small problem's version of that claim, which the CI can afford, for every partition.
TEST_CASE("AMG's rank-flat 3-D settings keep the one-process iteration count within 2", "[sparse][amg]") {
  const auto p = problems()[1];
  const auto b = es::testing::random_vector(p.coo.n, 13);
  const auto ref = at::linalg_solve(es::testing::dense(p.coo), b);
  const auto whole = distribute(p, self_mesh(), sp::PartitionMethod::simple);
  for (const auto& amg : {sp::AmgOptions{.smoother = sp::AmgSmoother::chebyshev},
                          sp::AmgOptions{.coarsening = sp::AmgCoarsening::pmis}}) {
    sp::SolveOptions o{.preconditioner = sp::Preconditioner::amg, .rtol = 1e-10};
    o.preconditioner_options.amg = amg;
    const auto one = whole.solve(whole.scatter(b), o);
    REQUIRE(one.info.converged);
    for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb}) {
      CAPTURE(static_cast<int>(amg.smoother.value_or(sp::AmgSmoother::l1_gauss_seidel)), amg.coarsening.has_value(), static_cast<int>(method));
      const auto D = distribute(p, world_mesh(), method);
      const auto s = D.solve(D.scatter(b), o);
      CHECK(s.info.converged);
      CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
      CHECK(std::abs(s.info.iterations - one.info.iterations) <= 2);
      CHECK(es::testing::same_on_every_rank(s.info.iterations, MPI_COMM_WORLD));
    }
  }
}

TEST_CASE("AMG setup is reused between solves of one matrix, and only then", "[sparse][amg]") {
  const auto mesh = world_mesh();
  const auto p = problems()[0];
  const auto dense = es::testing::dense(p.coo);
  const auto D = distribute(p, mesh, sp::PartitionMethod::rcb);
  const auto b = es::testing::random_vector(p.coo.n, 11), c = es::testing::random_vector(p.coo.n, 12);
  const sp::SolveOptions o{.preconditioner = sp::Preconditioner::amg, .rtol = 1e-10};
  const auto first = D.solve(D.scatter(b), o);
  CHECK_FALSE(first.info.preconditioner_reused);
  const auto second = D.solve(D.scatter(c), o);
  CHECK(second.info.preconditioner_reused);
  CHECK(second.info.levels == first.info.levels);
  CHECK(second.info.operator_complexity == first.info.operator_complexity);
  CHECK(relative_error(second.x.full_tensor(), at::linalg_solve(dense, c)) < 1e-8);
  CHECK(at::equal(D.solve(D.scatter(b), o).x.local(), first.x.local()));
  auto other = o;
  other.preconditioner_options.amg.strong_threshold = 0.5;
  CHECK_FALSE(D.solve(D.scatter(b), other).info.preconditioner_reused);
  const auto scaled = D * 3.0;
  const auto s = scaled.solve(scaled.scatter(b), o);
  CHECK_FALSE(s.info.preconditioner_reused);
  CHECK(relative_error(s.x.full_tensor(), at::linalg_solve(3.0 * dense, b)) < 1e-8);
}

TEST_CASE("AMG with an empty shard and with from_local ownership", "[sparse][amg]") {
  const auto world = es::testing::world();
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(16, 12);
  const auto n = coo.n;
  const auto b = es::testing::random_vector(n, 13);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  // Rank r owns the rows i with i % (size - 1) == r, the last rank none (one rank: all).
  const int owners = std::max(world.size - 1, 1);
  const auto all = at::arange(n, at::kLong);
  const auto owned = world.rank < owners ? all.masked_select(at::remainder(all, owners) == world.rank)
                                         : at::empty({0}, at::kLong);
  const auto mine = at::isin(coo.rows, owned);
  const auto D = sp::DSparseTensor::from_local(coo.values.masked_select(mine), coo.rows.masked_select(mine),
                                               coo.cols.masked_select(mine), {n, n}, mesh, {.owned_rows = owned});
  for (auto krylov : {sp::Method::cg, sp::Method::gmres}) {
    const auto s = D.solve(D.scatter(b), {.method = krylov, .preconditioner = sp::Preconditioner::amg, .rtol = 1e-10});
    CHECK(s.info.converged);
    CHECK(relative_error(s.x.full_tensor(), ref) < 1e-8);
    CHECK(s.info.iterations <= 30);
  }
}

namespace {

/// Levels and operator complexity of BoomerAMG set up, with `o`'s settings, on the rows [first,
/// first + rows) of `dense` handed over through hypre's IJ interface with each row's
/// sizes given first (as PETSc's PCHYPRE and MFEM hand them over: the diagonal swapped to the
/// front, the other entries in column order).
std::pair<int, double> ij_hierarchy(const at::Tensor& dense, std::int64_t first, std::int64_t rows,
                                    const sp::AmgOptions& o) {
  const auto last = first + rows - 1;
  HYPRE_IJMatrix ij = nullptr;
  HYPRE_IJMatrixCreate(MPI_COMM_WORLD, first, last, first, last, &ij);
  HYPRE_IJMatrixSetObjectType(ij, HYPRE_PARCSR);
  std::vector<HYPRE_Int> diag_sizes, offd_sizes;
  std::vector<std::vector<HYPRE_BigInt>> cols;
  std::vector<std::vector<double>> vals;
  for (std::int64_t i = first; i <= last; ++i) {
    const auto row = dense[i];
    const auto nz = row.nonzero().flatten();
    cols.emplace_back();
    vals.emplace_back();
    HYPRE_Int d = 0, off = 0;
    for (std::int64_t k = 0; k < nz.numel(); ++k) {
      const auto c = nz[k].item<std::int64_t>();
      cols.back().push_back(static_cast<HYPRE_BigInt>(c));
      vals.back().push_back(row[c].item<double>());
      (c >= first && c <= last ? d : off) += 1;
    }
    diag_sizes.push_back(d);
    offd_sizes.push_back(off);
  }
  HYPRE_IJMatrixSetDiagOffdSizes(ij, diag_sizes.data(), offd_sizes.data());
  HYPRE_IJMatrixInitialize(ij);
  for (std::int64_t i = first; i <= last; ++i) {
    const auto& c = cols[static_cast<std::size_t>(i - first)];
    auto count = static_cast<HYPRE_Int>(c.size());
    HYPRE_BigInt row = i;
    HYPRE_IJMatrixSetValues(ij, 1, &count, &row, c.data(), vals[static_cast<std::size_t>(i - first)].data());
  }
  HYPRE_IJMatrixAssemble(ij);
  void* object = nullptr;
  HYPRE_IJMatrixGetObject(ij, &object);
  auto* a = static_cast<HYPRE_ParCSRMatrix>(object);
  HYPRE_IJVector v = nullptr;
  HYPRE_IJVectorCreate(MPI_COMM_WORLD, first, last, &v);
  HYPRE_IJVectorSetObjectType(v, HYPRE_PARCSR);
  HYPRE_IJVectorInitialize(v);
  HYPRE_IJVectorAssemble(v);
  HYPRE_IJVectorGetObject(v, &object);
  auto* x = static_cast<HYPRE_ParVector>(object);
  HYPRE_Solver amg = nullptr;
  HYPRE_BoomerAMGCreate(&amg);
  HYPRE_BoomerAMGSetPrintLevel(amg, 0);
  HYPRE_BoomerAMGSetCoarsenType(amg, sp::detail::hypre_coarsen_type(*o.coarsening));
  HYPRE_BoomerAMGSetInterpType(amg, sp::detail::hypre_interp_type(*o.interpolation));
  HYPRE_BoomerAMGSetPMaxElmts(amg, *o.max_elements);
  HYPRE_BoomerAMGSetStrongThreshold(amg, *o.strong_threshold);
  HYPRE_BoomerAMGSetAggNumLevels(amg, *o.aggressive_levels);
  HYPRE_BoomerAMGSetAggInterpType(amg, sp::detail::hypre_agg_interp_type(o.aggressive_interpolation));
  HYPRE_BoomerAMGSetMaxLevels(amg, o.max_levels);
  HYPRE_BoomerAMGSetMaxIter(amg, 1);
  HYPRE_BoomerAMGSetTol(amg, 0.0);
  HYPRE_BoomerAMGSetup(amg, a, x, x);
  auto* data = reinterpret_cast<hypre_ParAMGData*>(amg);
  const int levels = hypre_ParAMGDataNumLevels(data);
  std::vector<double> nnz(static_cast<std::size_t>(levels));
  for (int l = 0; l < levels; ++l) {
    auto* m = hypre_ParAMGDataAArray(data)[l];
    nnz[static_cast<std::size_t>(l)] = static_cast<double>(hypre_CSRMatrixNumNonzeros(hypre_ParCSRMatrixDiag(m)) +
                                                           hypre_CSRMatrixNumNonzeros(hypre_ParCSRMatrixOffd(m)));
  }
  MPI_Allreduce(MPI_IN_PLACE, nnz.data(), levels, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double total = 0;
  for (const double n : nnz) total += n;
  HYPRE_BoomerAMGDestroy(amg);
  HYPRE_IJVectorDestroy(v);
  HYPRE_IJMatrixDestroy(ij);
  return {levels, total / nnz[0]};
}

}  // namespace

TEST_CASE("AMG hands hypre each row as hypre's preallocated IJ assembly does: the same hierarchy", "[sparse][amg]") {
  // BoomerAMG's coarsening and interpolation truncation break ties by the order of a row's
  // entries, so a matrix handed over in another order gets another hierarchy (and PETSc's
  // PCHYPRE, the anchor, another iteration count on the same settings).
  // Truncating interpolation to 4 entries per row, among the equal weights of a stencil, is where
  // the order tells (without aggressive coarsening, whose multipass interpolation has no ties).
  using C = sp::AmgCoarsening;
  using I = sp::AmgInterpolation;
  const auto mesh = world_mesh();
  const auto all = problems();
  for (const auto& p : {all[0], all[1]}) {
    for (const auto& amg : {sp::AmgOptions{.aggressive_levels = 0}.resolved(7.0),
                            sp::AmgOptions{.coarsening = C::falgout, .interpolation = I::classical,
                                           .strong_threshold = 0.25, .max_elements = 4}
                                .resolved(5.0)}) {
      CAPTURE(p.name, static_cast<int>(*amg.coarsening));
      const auto D = distribute(p, mesh, sp::PartitionMethod::simple);
      sp::SolveOptions o{.preconditioner = sp::Preconditioner::amg, .rtol = 1e-10};
      o.preconditioner_options.amg = amg;
      const auto s = D.solve(D.scatter(es::testing::random_vector(p.coo.n, 31)), o);
      CHECK(s.info.converged);
      // The simple partition keeps the rows' numbers: this rank's rows are one range of them.
      const auto ids = D.scatter(at::arange(p.coo.n, at::kDouble)).local().to(at::kLong);
      const auto rows = ids.numel();
      const auto first = rows > 0 ? ids[0].item<std::int64_t>() : 0;
      REQUIRE(at::equal(ids, at::arange(first, first + rows, at::kLong)));
      const auto [levels, complexity] = ij_hierarchy(es::testing::dense(p.coo), first, rows, amg);
      CHECK(s.info.levels == levels);
      CHECK(s.info.operator_complexity == complexity);
    }
  }
}

TEST_CASE("AMG on a float32 matrix: the hierarchy of its float64 copy, each cycle staged through it",
          "[sparse][amg]") {
  // The path a matrix on a device takes too (values to float64 on the host, r there, z back).
  const auto mesh = world_mesh();
  for (const auto& p : problems()) {
    CAPTURE(p.name);
    const auto D = distribute(p, mesh, sp::PartitionMethod::rcb);
    const auto F = D.to(at::kFloat);
    const auto b = es::testing::random_vector(p.coo.n, 9);
    const auto ref = at::linalg_solve(es::testing::dense(p.coo), b);
    for (auto krylov : {sp::Method::cg, sp::Method::gmres}) {
      CAPTURE(sp::to_string(krylov));
      const sp::SolveOptions o{.method = krylov, .preconditioner = sp::Preconditioner::amg, .rtol = 1e-5};
      const auto single = F.solve(F.scatter(b.to(at::kFloat)), o);
      const auto dbl = D.solve(D.scatter(b), o);
      CHECK(single.info.converged);
      CHECK(single.x.local().scalar_type() == at::kFloat);
      CHECK(std::abs(single.info.iterations - dbl.info.iterations) <= 1);
      CHECK(single.info.levels == dbl.info.levels);
      CHECK(relative_error(single.x.full_tensor().to(at::kDouble), ref) < 1e-4);
    }
  }
}

TEST_CASE("AMG refuses what it cannot do, with the same error on every rank", "[sparse][amg]") {
  const auto comm = es::testing::world().comm;
  const auto mesh = world_mesh();
  const auto p = problems()[0];
  const auto D = distribute(p, mesh, sp::PartitionMethod::simple);
  const auto b = es::testing::random_vector(p.coo.n, 3);
  const sp::SolveOptions o{.preconditioner = sp::Preconditioner::amg};
  SECTION("complex") {
    const auto Z = D.to(at::kComplexDouble);
    const auto message =
        es::testing::collective_error([&] { (void)Z.solve(Z.scatter(b.to(at::kComplexDouble)), o); }, comm);
    CHECK_THAT(message, Catch::Contains("amg") && Catch::Contains("real values") && Catch::Contains("Complex"));
  }
  SECTION("a zero diagonal entry, on the rank that owns it") {
    const auto zeroed = at::where((p.coo.rows == p.coo.cols) & (p.coo.rows == p.coo.n - 1),
                                  at::zeros_like(p.coo.values), p.coo.values);
    const auto Z = sp::DSparseTensor::partition(sp::SparseTensor(zeroed, p.coo.rows, p.coo.cols, {p.coo.n, p.coo.n}), mesh);
    const auto message = es::testing::collective_error([&] { (void)Z.solve(Z.scatter(b), o); }, comm);
    CHECK_THAT(message, Catch::Contains("nonzero diagonal"));
  }
  SECTION("bad options") {
    auto bad = o;
    bad.preconditioner_options.amg.sweeps = 0;
    CHECK_THAT(es::testing::collective_error([&] { (void)D.solve(D.scatter(b), bad); }, comm),
               Catch::Contains("sweeps"));
    bad = o;
    bad.preconditioner_options.amg.strong_threshold = 1.5;
    CHECK_THAT(es::testing::collective_error([&] { (void)D.solve(D.scatter(b), bad); }, comm),
               Catch::Contains("strong_threshold"));
  }
  SECTION("a non-square matrix") {
    const auto message = es::testing::collective_error(
        [&] {
          (void)sp::DSparseTensor::from_local(p.coo.values, p.coo.rows, p.coo.cols, {p.coo.n, p.coo.n + 1}, mesh)
              .solve(D.scatter(b), o);
        },
        comm);
    CHECK_THAT(message, Catch::Contains("square"));
  }
  SECTION("from a rank's local rows alone") {
    const sp::detail::LocalRows rows{D.local(), D.layout()->local_size(), comm};
    CHECK_THROWS_WITH(sp::detail::make_preconditioner(sp::Preconditioner::amg, rows, {}, {}),
                      Catch::Contains("DSparseTensor::solve"));
  }
}

#else

TEST_CASE("Without hypre, the amg preconditioner names the missing library on every rank", "[sparse][amg]") {
  const auto coo = es::testing::poisson2d(6, 6);
  const auto D = sp::DSparseTensor::partition(sp::SparseTensor(coo.values, coo.rows, coo.cols, {coo.n, coo.n}),
                                              es::Mesh(MPI_COMM_WORLD, {es::testing::world().size}, {"x"}));
  const auto message = es::testing::collective_error(
      [&] { (void)D.solve(D.zeros() + 1.0, {.preconditioner = sp::Preconditioner::amg}); }, es::testing::world().comm);
  CHECK_THAT(message, Catch::Contains("hypre"));
}

#endif

}  // namespace test_amg
