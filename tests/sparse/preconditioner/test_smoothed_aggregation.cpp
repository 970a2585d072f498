// Smoothed aggregation (einshard's own AMG): the rank-local planning (strength, aggregates, the
// tentative interpolation) against hand-checked properties; CG, GMRES and mixed-precision CG with
// it against a dense one-process solve on uneven shards with an empty rank; the V-cycle's symmetry;
// the faults, the same error on every rank.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collective_error.hpp"
#include "einshard/sparse.hpp"
#include "einshard/sparse/preconditioner/smoothed_aggregation.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_smoothed_aggregation {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

sp::Csr host_csr(const es::testing::Coo& coo) {
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto t = sp::DSparseTensor::partition(A, es::Mesh(MPI_COMM_SELF, {1}, {"x"}));
  return t.local();
}

/// Rows dealt in uneven contiguous blocks (rank r's share ∝ r + 1; rank 1 none from three ranks
/// on), the matrix made with from_local from its rows' entries.
sp::DSparseTensor uneven(const es::testing::Coo& coo, const es::Mesh& mesh, const es::testing::World& w) {
  std::int64_t total = 0, before = 0;
  const auto weight = [&](int r) { return w.size >= 3 && r == 1 ? 0 : r + 1; };
  for (int r = 0; r < w.size; ++r) total += weight(r);
  for (int r = 0; r < w.rank; ++r) before += weight(r);
  const auto lo = coo.n * before / total, hi = coo.n * (before + weight(w.rank)) / total;
  const auto rows = at::arange(lo, hi, at::kLong);
  const auto mine = at::isin(coo.rows, rows);
  return sp::DSparseTensor::from_local(coo.values.masked_select(mine), coo.rows.masked_select(mine),
                                       coo.cols.masked_select(mine), {coo.n, coo.n}, mesh, {.owned_rows = rows});
}

sp::SolveOptions sa(sp::Method method = sp::Method::cg, sp::AmgOptions amg = {}) {
  sp::SolveOptions o{.method = method, .preconditioner = sp::Preconditioner::smoothed_aggregation, .rtol = 1e-10,
                     .maxiter = 500};
  o.preconditioner_options.amg = std::move(amg);
  return o;
}

}  // namespace

TEST_CASE("aggregation: every node with a strong neighbour in one aggregate, whole neighbourhoods first",
          "[sparse][smoothed_aggregation][unit]") {
  namespace d = sp::detail;
  // A 12 x 9 grid Laplacian: every node has neighbours, so every node is aggregated.
  const auto grid = host_csr(es::testing::poisson2d(12, 9));
  const auto g = d::strong_graph(grid, 108, 1, 0.0);
  REQUIRE(g.nodes() == 108);
  CHECK(g.col.size() == 2 * (11 * 9 + 12 * 8));  // each grid edge both ways, no self loops
  const auto a = d::aggregate(g);
  CHECK(a.count > 108 / 9);  // aggregates of at most a node and its 4 neighbours, some smaller
  CHECK(a.count < 108 / 2);
  std::vector<int> size(static_cast<std::size_t>(a.count), 0);
  for (const auto agg : a.of_node) {
    REQUIRE(agg >= 0);
    REQUIRE(agg < a.count);
    ++size[static_cast<std::size_t>(agg)];
  }
  for (const auto s : size) CHECK(s >= 2);
  // The first aggregate is node 0 and its neighbours 1 and 12.
  CHECK(a.of_node[0] == 0);
  CHECK(a.of_node[1] == 0);
  CHECK(a.of_node[12] == 0);

  // θ drops the weak direction of an anisotropic operator: with ε = 0.01 only the strong axis's
  // couplings stay above θ = 0.25.
  const auto aniso = host_csr(es::testing::anisotropic2d(6, 6, 0.01));
  const auto strong = d::strong_graph(aniso, 36, 1, 0.25);
  CHECK(strong.col.size() == 2 * 5 * 6);
  // A nonsymmetric matrix: an edge strong from one end only (row 0 stores column 3, row 3 not
  // column 0; row 1's coupling to 2 is weak, 2's to 1 strong) is an edge of both nodes' lists,
  // each list sorted, once; the float32 copy of the values gives the same graph.
  {
    const std::vector<std::int64_t> r{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3};
    const std::vector<std::int64_t> c{0, 3, 1, 1, 2, 0, 2, 1, 3, 3, 2};
    const std::vector<double> v{4, -2, -1, 4, -1e-6, -1, 4, -1, -1, 4, -1};
    for (const auto dtype : {at::kDouble, at::kFloat}) {
      const es::testing::Coo one_way{at::tensor(v, at::kDouble).to(dtype), at::tensor(r, at::kLong),
                                     at::tensor(c, at::kLong), 4};
      const auto g = d::strong_graph(host_csr(one_way), 4, 1, 0.25);
      CHECK(g.rowptr == std::vector<std::int64_t>{0, 2, 4, 6, 8});
      CHECK(g.col == std::vector<std::int64_t>{1, 3, 0, 2, 1, 3, 0, 2});
    }
  }
  // A row with nothing but its diagonal (a Dirichlet row) is left out of every aggregate.
  auto coo = es::testing::poisson2d(4, 4);
  const auto off_row_5 = (coo.rows == 5) != (coo.cols == 5);
  coo.values = coo.values.masked_fill(off_row_5, 0.0);
  const auto lone = d::aggregate(d::strong_graph(host_csr(coo), 16, 1, 0.0));
  CHECK(lone.of_node[5] == -1);
  for (std::int64_t i = 0; i < 16; ++i)
    if (i != 5) CHECK(lone.of_node[static_cast<std::size_t>(i)] >= 0);
}

TEST_CASE("aggregation: nodes of several unknowns, the tentative interpolation reproduces the near-null space",
          "[sparse][smoothed_aggregation][unit]") {
  namespace d = sp::detail;
  // Two unknowns per node of a 1-D chain of 7 nodes: the blocks couple neighbouring nodes.
  std::vector<std::int64_t> rows, cols;
  std::vector<double> values;
  for (std::int64_t node = 0; node < 7; ++node)
    for (std::int64_t other = std::max<std::int64_t>(node - 1, 0); other <= std::min<std::int64_t>(node + 1, 6); ++other)
      for (int f = 0; f < 2; ++f)
        for (int h = 0; h < 2; ++h) {
          rows.push_back(2 * node + f);
          cols.push_back(2 * other + h);
          values.push_back(node == other ? (f == h ? 4.0 : 1.0) : -1.0);
        }
  const es::testing::Coo coo{at::tensor(values, at::kDouble), at::tensor(rows, at::kLong), at::tensor(cols, at::kLong), 14};
  const auto g = d::strong_graph(host_csr(coo), 14, 2, 0.0);
  REQUIRE(g.nodes() == 7);
  const auto a = d::aggregate(g);
  // Three modes on two unknowns per node: a one-node aggregate cannot hold the third.
  const auto x = at::arange(14, at::kDouble).div(2, "floor");
  const auto b = at::stack({at::arange(14, at::kLong).remainder(2).eq(0).to(at::kDouble),
                            at::arange(14, at::kLong).remainder(2).eq(1).to(at::kDouble), x * x + 1}, 1);
  const auto t = d::tentative(d::members_of(a, 2, b), 3);
  const std::int64_t m = 3;
  REQUIRE(t.coarse_null_space.size(0) == a.count * m);
  REQUIRE(t.coarse_null_space.size(1) == m);
  const auto T = at::zeros({14, a.count * m}, at::kDouble).index_put_({t.rows, t.cols}, t.values);
  // Orthonormal columns (the dead ones zero) and T B_c = B on every aggregated row.
  const auto gram = T.t().mm(T);
  auto expected = at::eye(a.count * m, at::kDouble);
  for (const auto c : t.dead) expected[c][c] = 0.0;
  CHECK(es::testing::max_abs(gram - expected) < 1e-12);
  CHECK(es::testing::max_abs(T.mm(t.coarse_null_space) - b) < 1e-12);
  // Columns are dead exactly where an aggregate has fewer unknowns than modes.
  std::vector<int> unknowns(static_cast<std::size_t>(a.count), 0);
  for (const auto agg : a.of_node) unknowns[static_cast<std::size_t>(agg)] += 2;
  std::set<std::int64_t> dead(t.dead.begin(), t.dead.end());
  for (std::int64_t k = 0; k < a.count; ++k) CHECK((dead.count(k * m + 2) == 1) == (unknowns[static_cast<std::size_t>(k)] < 3));

  // Nodes broken across a rank's owned rows are reported with the first row that breaks one.
  CHECK(d::broken_node(at::arange(0, 6, at::kLong), 2).empty());
  CHECK_THAT(d::broken_node(at::arange(1, 7, at::kLong), 2), Catch::Contains("owned row 0"));
}

TEST_CASE("smoothed aggregation CG and GMRES give the one-process solution on uneven shards",
          "[sparse][smoothed_aggregation]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(w.comm, {w.size}, {"x"});
  struct Case {
    std::string name;
    es::testing::Coo coo;
    sp::Method method;
    int max_iterations;  // measured at 1-8 ranks: 8-9, 7-8, 7-9, 23-24
  };
  for (const auto& c : {Case{"poisson2d 40x30", es::testing::poisson2d(40, 30), sp::Method::cg, 12},
                        Case{"poisson3d 12x10x9", es::testing::poisson3d(12, 10, 9), sp::Method::cg, 12},
                        Case{"anisotropic 30x30", es::testing::anisotropic2d(30, 30, 0.01), sp::Method::cg, 14},
                        Case{"convection-diffusion 36x30", es::testing::convection_diffusion(36, 30, 0.5),
                             sp::Method::gmres, 30}}) {
    CAPTURE(c.name, w.size);
    const auto D = uneven(c.coo, mesh, w);
    const auto b = es::testing::random_vector(c.coo.n, 17);
    const auto ref = at::linalg_solve(es::testing::dense(c.coo), b);
    const auto s = D.solve(D.scatter(b), sa(c.method));
    CAPTURE(s.info.iterations, s.info.levels, s.info.operator_complexity);
    CHECK(s.info.converged);
    CHECK(s.info.iterations <= c.max_iterations);
    CHECK(s.info.levels >= 2);
    CHECK(s.info.operator_complexity > 1.0);
    CHECK(s.info.operator_complexity < 2.5);  // 1.1-1.4; 2.0-2.3 on the anisotropic grid, its coarse level small
    CHECK(es::testing::relative_error(s.x.full_tensor(), ref) < 1e-8);
    // Without it CG needs several times the iterations: the hierarchy does the work.
    if (c.method == sp::Method::cg) {
      auto plain = sa();
      plain.preconditioner = sp::Preconditioner::jacobi;
      CHECK(3 * s.info.iterations < D.solve(D.scatter(b), plain).info.iterations);
    }
  }
}

TEST_CASE("smoothed aggregation: a symmetric V-cycle, its smoothers and cycles, float32 inside mixed CG",
          "[sparse][smoothed_aggregation]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(w.comm, {w.size}, {"x"});
  const auto coo = es::testing::poisson2d(36, 28);
  const auto D = uneven(coo, mesh, w);
  const auto ref_b = es::testing::random_vector(coo.n, 5);
  const auto ref = at::linalg_solve(es::testing::dense(coo), ref_b);
  const auto b = D.scatter(ref_b);

  // M⁻¹ through the operator a solve builds: <x, M⁻¹ y> = <M⁻¹ x, y>, so CG may use it.
  const sp::detail::SmoothedAggregationOp m(D, {});
  const auto x = D.scatter(es::testing::random_vector(coo.n, 8)).local(), y = D.scatter(es::testing::random_vector(coo.n, 9)).local();
  auto mx = at::empty_like(x), my = at::empty_like(y);
  m.apply(x, mx);
  m.apply(y, my);
  double dots[2] = {at::dot(x, my).item<double>(), at::dot(mx, y).item<double>()};
  MPI_Allreduce(MPI_IN_PLACE, dots, 2, MPI_DOUBLE, MPI_SUM, w.comm);
  CHECK(std::abs(dots[0] - dots[1]) < 1e-12 * std::abs(dots[0]));
  CHECK(dots[0] * dots[1] > 0);

  std::map<std::string, int> iterations;
  for (const auto& [name, amg] : std::vector<std::pair<std::string, sp::AmgOptions>>{
           {"chebyshev", {}},
           {"two sweeps", {.sweeps = 2}},
           {"l1_jacobi", {.smoother = sp::AmgSmoother::l1_jacobi, .sweeps = 2}},
           {"two cycles", {.cycles = 2}},
           {"two levels", {.strong_threshold = 0.0, .max_levels = 2}},
           {"strong threshold 0.2", {.strong_threshold = 0.2}}}) {
    CAPTURE(name);
    const auto s = D.solve(b, sa(sp::Method::cg, amg));
    CHECK(s.info.converged);
    CHECK(es::testing::relative_error(s.x.full_tensor(), ref) < 1e-8);
    iterations[name] = s.info.iterations;
  }
  CHECK(iterations["two cycles"] < iterations["chebyshev"]);
  CHECK(iterations["two sweeps"] <= iterations["chebyshev"]);

  // Mixed precision: the hierarchy of the float32 copy cycles in float32; the float64 answer.
  auto mixed = sa();
  mixed.precision = sp::Precision::mixed;
  mixed.rtol = 1e-9;
  const auto s = D.solve(b, mixed);
  CHECK(s.info.converged);
  CHECK(es::testing::relative_error(s.x.full_tensor(), ref) < 1e-7);
  const auto r = b.local() - D.matvec(s.x).local();
  double rr[2] = {at::dot(r, r).item<double>(), at::dot(b.local(), b.local()).item<double>()};
  MPI_Allreduce(MPI_IN_PLACE, rr, 2, MPI_DOUBLE, MPI_SUM, w.comm);
  CHECK(std::sqrt(rr[0] / rr[1]) < 1e-9);
  // A float32 matrix solved in float32 with it.
  const auto single = D.to(at::kFloat);
  auto f32 = sa();
  f32.rtol = 1e-5;
  const auto sf = single.solve(single.scatter(ref_b.to(at::kFloat)), f32);
  CHECK(sf.info.converged);
  CHECK(es::testing::relative_error(sf.x.full_tensor().to(at::kDouble), ref) < 1e-4);
}

TEST_CASE("smoothed aggregation's faults are the same error on every rank", "[sparse][smoothed_aggregation]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(w.comm, {w.size}, {"x"});
  const auto coo = es::testing::poisson2d(12, 10);
  const auto D = uneven(coo, mesh, w);
  const auto b = D.scatter(es::testing::random_vector(coo.n, 3));
  const auto fails = [&](const sp::AmgOptions& amg) {
    return es::testing::collective_error([&] { (void)D.solve(b, sa(sp::Method::cg, amg)); }, w.comm);
  };
  CHECK_THAT(fails({.smoother = sp::AmgSmoother::hybrid_gauss_seidel}), Catch::Contains("chebyshev or l1_jacobi"));
  CHECK_THAT(fails({.strong_threshold = 1.5}), Catch::Contains("strong_threshold < 1"));
  CHECK_THAT(fails({.sweeps = 0}), Catch::Contains("sweeps ≥ 1"));
  CHECK_THAT(fails({.functions = 7}), Catch::Contains("dividing the matrix's rows"));
  // One rank's near-null space a row longer than its rows: every rank raises.
  const auto n_local = D.layout()->local_size();
  const auto longer = at::ones({n_local + (w.rank == 0 ? 1 : 0), 1}, at::kDouble);
  CHECK_THAT(fails({.near_null_space = longer}), Catch::Contains("near_null_space of shape"));
  // One level allowed on a matrix too large for the dense coarsest solve.
  const auto big = uneven(es::testing::poisson2d(80, 80), mesh, w);
  const auto fault = es::testing::collective_error(
      [&] { (void)big.solve(big.scatter(es::testing::random_vector(6400, 1)), sa(sp::Method::cg, {.max_levels = 1})); },
      w.comm);
  CHECK_THAT(fault, Catch::Contains("coarsest level of at most"));
  // A zero diagonal on one rank's row.
  auto zero = coo;
  zero.values = zero.values.masked_fill((zero.rows == 60) & (zero.cols == 60), 0.0);
  const auto Z = uneven(zero, mesh, w);
  CHECK_THAT(es::testing::collective_error([&] { (void)Z.solve(Z.scatter(es::testing::random_vector(coo.n, 3)), sa()); },
                                           w.comm),
             Catch::Contains("nonzero diagonal"));
  // Complex values.
  const auto C = D.to(at::kComplexDouble);
  CHECK_THAT(es::testing::collective_error([&] { (void)C.solve(C.scatter(es::testing::random_vector(coo.n, 3).to(at::kComplexDouble)), sa()); },
                                           w.comm),
             Catch::Contains("float32 or float64"));
  CHECK(sp::preconditioner_from_string("smoothed_aggregation") == sp::Preconditioner::smoothed_aggregation);
}

TEST_CASE("smoothed aggregation on a scattered partition: nodes cut off on their rank join other ranks' aggregates",
          "[sparse][smoothed_aggregation]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(w.comm, {w.size}, {"x"});
  // A grid numbered at random and cut in contiguous blocks: each rank's nodes are scattered over
  // the grid, as a mesh generator's numbering cut into blocks leaves them, and many have all
  // their neighbours on other ranks.
  const auto grid = es::testing::poisson2d(40, 30);
  at::manual_seed(11);  // the same numbering on every rank
  const auto number = at::randperm(grid.n, at::TensorOptions(at::kLong));
  es::testing::Coo coo{grid.values, number.index({grid.rows}), number.index({grid.cols}), grid.n};
  const auto D = uneven(coo, mesh, w);
  const auto b = es::testing::random_vector(coo.n, 23);
  const auto ref = at::linalg_solve(es::testing::dense(coo), b);
  const auto s = D.solve(D.scatter(b), sa());
  CAPTURE(w.size, s.info.iterations, s.info.operator_complexity);
  CHECK(s.info.converged);
  CHECK(es::testing::relative_error(s.x.full_tensor(), ref) < 1e-8);
  CHECK(s.info.iterations <= 30);  // measured: 10, 10, 10, 15, 24 at 1, 2, 3, 4, 8 ranks
}

}  // namespace test_smoothed_aggregation
