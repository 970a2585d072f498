// StencilOperator: products against torch on the whole grid (every stencil, every boundary, constant
// and variable coefficients, grids split along one or two dimensions with uneven and empty blocks),
// its diagonal and its assembled matrix against the dense reference, solves by every Krylov method
// and by Jacobi, Chebyshev and AMG against a dense solve, and bad input raised on every rank.

#include <catch2/catch.hpp>

#include <mpi.h>

#include <string>
#include <vector>

#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "test_support.hpp"

namespace test_stencil_operator {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::world;
constexpr auto& relative_error = es::testing::rel;

/// x read through the boundary `b` at offset `o` along `dim` of the grid tensor `x` (Dirichlet:
/// zero outside), written from the definition of each condition, independently of the operator.
at::Tensor shifted(const at::Tensor& x, std::int64_t dim, int o, sp::StencilBoundary b) {
  const auto n = x.size(dim);
  auto idx = at::arange(n, at::kLong) + o;
  auto valid = (idx >= 0) & (idx < n);
  if (b == sp::StencilBoundary::periodic) idx = at::remainder(idx, n);
  if (b == sp::StencilBoundary::neumann) idx = at::where(idx < 0, -1 - idx, at::where(idx >= n, 2 * n - 1 - idx, idx));
  auto out = x.index_select(dim, idx.clamp(0, n - 1));
  if (b == sp::StencilBoundary::dirichlet) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
    shape[static_cast<std::size_t>(dim)] = n;
    out = out * valid.to(x.scalar_type()).reshape(shape);
  }
  return out;
}

/// y = A x on the whole grid in torch.
at::Tensor reference(const sp::Stencil& s, const at::Tensor& x, const std::vector<sp::StencilBoundary>& b,
                     const std::vector<at::Tensor>& coefficients = {}) {
  auto y = at::zeros_like(x);
  for (int p = 0; p < s.points(); ++p) {
    auto v = x;
    for (int d = 0; d < s.ndim(); ++d)
      v = shifted(v, d, s.offsets()[static_cast<std::size_t>(p)][static_cast<std::size_t>(d)],
                  b.size() == 1 ? b[0] : b[static_cast<std::size_t>(d)]);
    y += coefficients.empty() ? v * s.coefficients()[static_cast<std::size_t>(p)] : v * coefficients[static_cast<std::size_t>(p)];
  }
  return y;
}

/// The dense matrix of `reference`: the images of all unit vectors at once, as a trailing batch
/// axis that `shifted` leaves alone (one reference product instead of one per column).
at::Tensor dense(const sp::Stencil& s, const std::vector<std::int64_t>& shape, const std::vector<sp::StencilBoundary>& b,
                 const std::vector<at::Tensor>& coefficients = {}) {
  std::int64_t n = 1;
  for (const auto e : shape) n *= e;
  auto batched = shape;
  batched.push_back(n);
  std::vector<at::Tensor> columns;
  for (const auto& c : coefficients) columns.push_back(c.unsqueeze(-1));
  return reference(s, at::eye(n, at::kDouble).reshape(batched), b, columns).reshape({n, n});
}

at::Tensor random_grid(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
  std::int64_t n = 1;
  for (const auto e : shape) n *= e;
  return es::testing::random_vector(n, seed).reshape(shape);
}

/// The meshes a grid of `dims` dimensions is split over at this world size: one axis over all
/// ranks (dimension 0, default blocks), and where the world is 4, a 2 × 2 mesh cutting dimensions
/// 0 and 1 with uneven given blocks.
struct Split {
  es::Mesh mesh;
  sp::StencilOptions options;
  std::string name;
};
std::vector<Split> splits(const std::vector<std::int64_t>& shape) {
  const int p = world().size;
  std::vector<Split> out{{es::Mesh(MPI_COMM_WORLD, {p}, {"x"}), {}, "slabs"}};
  if (p == 4 && shape.size() >= 2) {
    sp::StencilOptions o;
    o.axes.assign(shape.size(), "");
    o.axes[0] = "x";
    o.axes[1] = "y";
    o.splits.assign(shape.size(), {});
    o.splits[0] = {shape[0] - 1, 1};
    o.splits[1] = {1, shape[1] - 1};
    out.push_back({es::Mesh(MPI_COMM_WORLD, {2, 2}, {"x", "y"}), o, "2x2 boxes"});
  }
  if (p == 3 && shape.size() >= 2) {  // dimension 1 split, 0 whole: no face is a run of rows
    sp::StencilOptions o;
    o.axes.assign(shape.size(), "");
    o.axes[1] = "x";
    out.push_back({es::Mesh(MPI_COMM_WORLD, {3}, {"x"}), o, "columns"});
  }
  return out;
}

struct Case {
  sp::Stencil stencil;
  std::vector<std::int64_t> shape;
};

}  // namespace

TEST_CASE("StencilOperator: products, diagonal and assembly match torch on the whole grid", "[sparse][stencil]") {
  using B = sp::StencilBoundary;
  const std::vector<Case> cases{{sp::Stencil::laplacian5(), {7, 5}},
                                {sp::Stencil::laplacian9(), {3, 6}},  // 4 ranks: one owns no row
                                {sp::Stencil::laplacian7(), {5, 4, 3}},
                                {sp::Stencil::laplacian27(), {4, 3, 5}},
                                {sp::Stencil({{-2}, {0}, {1}}, {-0.5, 3.0, -1.25}), {9}}};
  const std::vector<std::vector<B>> boundaries{{B::dirichlet}, {B::neumann}, {B::periodic}};
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const auto& [stencil, shape] = cases[c];
    auto bounds = boundaries;
    if (shape.size() >= 2) {
      std::vector<B> mixed(shape.size(), B::dirichlet);
      mixed[0] = B::periodic;
      mixed[1] = B::neumann;
      bounds.push_back(mixed);
    }
    for (const auto& split : splits(shape))
      for (const auto& b : bounds)
        for (const bool variable : {false, true}) {
          CAPTURE(c, split.name, sp::to_string(b[0]), b.size(), variable);
          auto options = split.options;
          options.boundary = b;
          std::vector<at::Tensor> coefficients;
          if (variable)
            for (int s = 0; s < stencil.points(); ++s) coefficients.push_back(random_grid(shape, 900 + s));
          options.coefficients = coefficients;
          const sp::StencilOperator A(stencil, shape, split.mesh, options);
          const auto X = random_grid(shape, 17);
          const auto want = reference(stencil, X, b, coefficients);
          const auto y = A.matvec(A.scatter(X));
          CHECK(relative_error(y.full_tensor().reshape(shape), want) < 1e-14);
          // The fused dot of the solvers' product.
          auto yl = at::empty_like(y.local());
          const auto w = A.scatter(random_grid(shape, 18));
          const double dot = A.apply(A.scatter(X).local(), yl, w.local()).real();
          double global_dot = 0;
          MPI_Allreduce(&dot, &global_dot, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
          CHECK(std::abs(global_dot - at::dot(w.full_tensor(), want.reshape(-1)).item<double>()) <
                1e-12 * (1 + std::abs(global_dot)));
          // Several columns at once.
          const auto Xk = at::stack({X.reshape(-1), random_grid(shape, 19).reshape(-1)}, 1);
          const auto Yk = A.matvec(A.scatter(Xk)).full_tensor();
          CHECK(relative_error(Yk.select(1, 0), want.reshape(-1)) < 1e-14);
          CHECK(relative_error(Yk.select(1, 1), reference(stencil, Xk.select(1, 1).reshape(shape), b, coefficients).reshape(-1)) < 1e-14);
          // ... and the block product's dots, per column.
          const auto Wk = A.scatter(at::stack({random_grid(shape, 21).reshape(-1), random_grid(shape, 22).reshape(-1)}, 1));
          auto ylk = at::empty_like(Wk.local());
          auto dk = A.apply_block(A.scatter(Xk).local(), ylk, Wk.local());
          REQUIRE(dk.size() == 2);
          MPI_Allreduce(MPI_IN_PLACE, dk.data(), 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
          for (std::int64_t j = 0; j < 2; ++j)
            CHECK(std::abs(dk[static_cast<std::size_t>(j)] - at::dot(Wk.full_tensor().select(1, j), Yk.select(1, j)).item<double>()) <
                  1e-12 * (1 + std::abs(dk[static_cast<std::size_t>(j)])));
          // The diagonal and the assembled matrix: the dense reference's.
          const auto M = dense(stencil, shape, b, coefficients);
          CHECK(relative_error(A.diagonal().full_tensor(), M.diagonal()) < 1e-15);
          const auto D = A.assemble();
          CHECK(relative_error(D.full_tensor(), M) < 1e-15);
        }
  }
  // float32.
  const auto mesh = es::Mesh(MPI_COMM_WORLD, {world().size}, {"x"});
  const sp::StencilOperator F(sp::Stencil::laplacian5(), {6, 5}, mesh, {.dtype = at::kFloat});
  const auto X = random_grid({6, 5}, 20);
  const auto y = F.matvec(F.scatter(X)).full_tensor();
  CHECK(y.scalar_type() == at::kFloat);
  CHECK(relative_error(y.to(at::kDouble).reshape({6, 5}), reference(sp::Stencil::laplacian5(), X, {sp::StencilBoundary::dirichlet})) < 1e-6);
}

TEST_CASE("StencilOperator: Krylov methods and preconditioners solve as the dense matrix", "[sparse][stencil]") {
  using B = sp::StencilBoundary;
  const std::vector<std::int64_t> shape{9, 7};
  for (const auto& split : splits(shape)) {
    // Dirichlet, and periodic × Neumann with a shifted diagonal (both are singular without it).
    for (const bool shifted_periodic : {false, true}) {
      CAPTURE(split.name, shifted_periodic);
      auto options = split.options;
      const auto stencil = shifted_periodic ? sp::Stencil({{0, 0}, {-1, 0}, {1, 0}, {0, -1}, {0, 1}}, {4.5, -1, -1, -1, -1})
                                            : sp::Stencil::laplacian5();
      options.boundary = shifted_periodic ? std::vector<B>{B::periodic, B::neumann} : std::vector<B>{B::dirichlet};
      const sp::StencilOperator A(stencil, shape, split.mesh, options);
      const auto M = dense(stencil, shape, options.boundary);
      const auto rhs = es::testing::random_vector(63, 31);
      const auto want = at::linalg_solve(M, rhs);
      const auto b = A.scatter(rhs);
      for (auto m : {sp::Method::cg, sp::Method::gmres, sp::Method::minres, sp::Method::bicgstab})
        for (auto pc : {sp::Preconditioner::none, sp::Preconditioner::jacobi, sp::Preconditioner::chebyshev,
                        sp::Preconditioner::amg}) {
          if (m == sp::Method::minres && pc != sp::Preconditioner::none) continue;
          CAPTURE(sp::to_string(m), sp::to_string(pc));
          const auto s = A.solve(b, {.method = m, .preconditioner = pc, .rtol = 1e-11});
          CHECK(s.info.converged);
          CHECK(relative_error(s.x.full_tensor(), want) < 1e-8);
        }
      // CG's iterates are the assembled matrix's.
      const auto s = A.solve(b, {.method = sp::Method::cg, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-10});
      const auto sd = A.assemble().solve(b, {.method = sp::Method::cg, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-10});
      CHECK(std::abs(s.info.iterations - sd.info.iterations) <= 1);
      // Several right-hand sides (block CG and block GMRES).
      const auto Bk = at::stack({rhs, es::testing::random_vector(63, 32)}, 1);
      for (auto m : {sp::Method::cg, sp::Method::gmres}) {
        const auto X = A.solve(A.scatter(Bk), {.method = m, .rtol = 1e-11});
        CHECK(X.info.converged);
        CHECK(relative_error(X.x.full_tensor(), at::linalg_solve(M, Bk)) < 1e-8);
      }
    }
  }
}

TEST_CASE("StencilOperator: bad input raises the same error on every rank", "[sparse][stencil][errors]") {
  const int p = world().size, me = world().rank;
  const auto mesh = es::Mesh(MPI_COMM_WORLD, {p}, {"x"});
  const auto lap = sp::Stencil::laplacian5();
  CHECK_THROWS_WITH(sp::Stencil({{0, 0}, {1}}, {1, 2}), Catch::Contains("2 dimensions"));
  CHECK_THROWS_WITH(sp::Stencil({{0}, {0}}, {1, 2}), Catch::Contains("same offset"));
  CHECK_THROWS_WITH(sp::Stencil({{0}}, {1, 2}), Catch::Contains("one coefficient per point"));
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {4, 4, 4}, mesh), Catch::Contains("2-D grid"));
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {4, 0}, mesh), Catch::Contains("positive extents"));
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {4, 4}, mesh, {.axes = {"x", "x"}}), Catch::Contains("splits two"));
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {4, 4}, mesh, {.axes = {"z", ""}}), Catch::Contains("no axis"));
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {4, 4}, mesh, {.boundary = {sp::StencilBoundary::periodic}, .dtype = at::kInt}),
                    Catch::Contains("float64 or float32"));
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {4, 4}, mesh, {.splits = {{5}, {}}}), Catch::Contains("summing to 4"));
  CHECK_THROWS_WITH(sp::StencilOperator(sp::Stencil({{-3}, {0}}, {1, 1}), {2}, mesh, {.boundary = {sp::StencilBoundary::periodic}}),
                    Catch::Contains("shorter than the stencil's reach"));
  if (p > 1)  // the mesh's other ranks duplicate the whole grid
    CHECK_THROWS_WITH(sp::StencilOperator(lap, {4, 4}, mesh, {.axes = {"", ""}}), Catch::Contains("every axis"));
  // A coefficient tensor of the wrong shape on the last rank only.
  std::vector<at::Tensor> c(5, at::ones({6, 5}, at::kDouble));
  if (me == p - 1) c[2] = at::ones({2, 2}, at::kDouble);
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {6, 5}, mesh, {.coefficients = c}), Catch::Contains("coefficient tensor 2"));
  CHECK_THROWS_WITH(sp::StencilOperator(lap, {6, 5}, mesh, {.coefficients = {c[0]}}), Catch::Contains("one coefficient tensor per"));
  const sp::StencilOperator A(lap, {6, 5}, mesh);
  CHECK_THROWS_WITH(A.scatter(at::zeros({5, 6}, at::kDouble)), Catch::Contains("expected the grid"));
  const sp::StencilOperator other(lap, {5, 7}, mesh);
  const auto wrong = other.scatter(at::zeros({5, 7}, at::kDouble));
  CHECK_THROWS_WITH(A.matvec(wrong), Catch::Contains("StencilOperator::matvec"));
  CHECK_THROWS_WITH(A.solve(wrong), Catch::Contains("StencilOperator::solve"));
  const auto b = A.scatter(at::ones({6, 5}, at::kDouble));
  CHECK_THROWS_WITH(A.lsqr(b), Catch::Contains("adjoint"));
  CHECK_THROWS_WITH(A.solve(b, {.method = sp::Method::lsmr}), Catch::Contains("adjoint"));
  // The same grid partitioned otherwise (a 2-D split at 4 ranks) is another partition.
  if (p == 4) {
    const sp::StencilOperator boxes(lap, {6, 5}, es::Mesh(MPI_COMM_WORLD, {2, 2}, {"x", "y"}), {.axes = {"x", "y"}});
    CHECK_THROWS_WITH(boxes.matvec(b), Catch::Contains("partition"));
  }
}

}  // namespace test_stencil_operator
