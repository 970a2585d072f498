// DSparseTensor: assembly, halo SpMV and transposed SpMV, vectors, and the block product A X (both
// instruction sets, any k and shard), against the same product done on one process, for every
// partition method and world size (ctest: 1, 2, 3, 4, 8 ranks).

#include <catch2/catch.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "einshard/sparse.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_dsparse {

namespace es = einshard;
namespace sp = einshard::sparse;
using einshard::testing::Coo;

namespace {

using es::testing::max_abs;
using es::testing::my_share;
using es::testing::sum_over_ranks;
using es::testing::world_mesh;

/// The same seeded vector on every rank.
at::Tensor global_vector(std::int64_t n, std::uint64_t seed, at::ScalarType dtype = at::kDouble) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({n}, gen, at::kDouble).to(dtype);
}

/// Rows of a global COO that the simple partition gives this rank.
Coo my_rows(const Coo& a, int rank, int size) {
  const auto first = sp::detail::block_first(a.n, size, rank), last = sp::detail::block_first(a.n, size, rank + 1);
  const auto keep = ((a.rows >= first) & (a.rows < last)).nonzero().flatten();
  return {a.values.index_select(0, keep), a.rows.index_select(0, keep), a.cols.index_select(0, keep), a.n};
}

/// Spans of owned rows that are not contiguous on at least one rank (collective).
bool any_rank_non_contiguous(const sp::DSparseTensor& d) {
  int non = d.layout()->contiguous() ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &non, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return non != 0;
}

}  // namespace

TEST_CASE("from_local assembles each rank's rows; matvec equals the one-process product", "[sparse][dsparse]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  for (auto [nx, ny] : {std::pair<std::int64_t, std::int64_t>{7, 5}, {16, 16}, {3, 1}}) {
    const auto mine = my_rows(es::testing::poisson2d(nx, ny), w.rank, w.size);
    const auto D = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {nx * ny, nx * ny}, mesh);
    const auto A = es::testing::dense(es::testing::poisson2d(nx, ny));
    const auto x = global_vector(nx * ny, 11);
    const auto y = D.matvec(D.scatter(x)).full_tensor();
    CHECK(max_abs(y - A.mv(x)) < 1e-12);
    CHECK(D.global_nnz() == es::testing::poisson2d(nx, ny).values.numel());
    CHECK(D.shape() == std::array<std::int64_t, 2>{nx * ny, nx * ny});
    CHECK(D.num_partitions() == w.size);
    // A rank talks to its grid neighbours only: at most two for row blocks of a 2-D grid... unless
    // blocks are thinner than a grid row, then up to the blocks spanning nx rows on each side.
    CHECK(D.halo().recv_ranks.size() <= static_cast<std::size_t>(w.size - 1));
  }
}

TEST_CASE("a grid's lines taken as diagonal runs: products and solves equal the one-process ones, uneven and empty shards",
          "[sparse][dsparse]") {
  // Lines of 70 points: each line's interior (68 rows) is a run of the 5-point matrix. Rank 0 owns
  // nothing past one rank; the others take shares growing with their number, so shards end mid-line
  // and cut runs in two.
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  const std::int64_t nx = 70, ny = 9, n = nx * ny;
  const auto first_of = [&](int r) -> std::int64_t {
    if (w.size == 1) return r == 0 ? 0 : n;
    const std::int64_t t = (w.size - 1) * w.size / 2;  // 1 + 2 + ... + (size - 1)
    return r == 0 ? 0 : n * ((r - 1) * r / 2) / t;
  };
  const auto owned = at::arange(first_of(w.rank), first_of(w.rank + 1), at::kLong);
  const auto coo = es::testing::poisson2d(nx, ny);
  const auto mine = es::testing::poisson2d_rows(nx, ny, first_of(w.rank), first_of(w.rank + 1));
  const auto A = es::testing::dense(coo);
  const auto x = global_vector(n, 7);
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    CAPTURE(c10::toString(dtype));
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
    const auto D = sp::DSparseTensor::from_local(mine.values.to(dtype), mine.rows, mine.cols, {n, n}, mesh,
                                                 {.owned_rows = owned});
    const auto y = D.matvec(D.scatter(x.to(dtype))).full_tensor().to(at::kDouble);
    CHECK(max_abs(y - A.mv(x)) < tol * (1 + max_abs(A.mv(x))));
    // Every line's interior is a run on one rank (the first and last lines have their own four
    // points); a rank owning three full lines has one without ghosts; complex values keep CSR.
    if (w.size == 1) CHECK(D.diagonal_run_rows() == ny * (nx - 2));
    if (owned.numel() >= 3 * nx) CHECK(D.diagonal_run_rows() >= nx - 2);
    CHECK(D.to(at::kComplexDouble).diagonal_run_rows() == 0);
    // An in-place change of the values (an optimizer's step) reaches the copies the products keep
    // (the runs; the generic kernels' split): products and transposed products.
    {
      auto E = D.with_values(D.values().clone());
      (void)E.matvec(E.scatter(x.to(dtype)));
      (void)E.rmatvec(E.scatter(x.to(dtype)));
      const auto blk = at::stack({x, 2.0 * x}, 1);
      const auto xb = E.scatter(blk.to(dtype)).local().contiguous();
      auto yb = at::empty_like(xb);
      (void)E.apply_block(xb, yb, {});
      {
        const at::NoGradGuard no_grad;
        E.values().mul_(2.0);
      }
      const auto y2 = E.matvec(E.scatter(x.to(dtype))).full_tensor().to(at::kDouble);
      CHECK(max_abs(y2 - 2.0 * A.mv(x)) < 2 * tol * (1 + max_abs(A.mv(x))));
      const auto z2 = E.rmatvec(E.scatter(x.to(dtype))).full_tensor().to(at::kDouble);
      CHECK(max_abs(z2 - 2.0 * A.t().mv(x)) < 2 * tol * (1 + max_abs(A.mv(x))));
      (void)E.apply_block(xb, yb, {});
      const auto want = E.scatter((2.0 * A.mm(blk)).to(dtype)).local().to(at::kDouble);
      CHECK(max_abs(yb.to(at::kDouble) - want) < 4 * tol * (1 + max_abs(want)));
    }
    if (dtype == at::kDouble) {
      const auto b = global_vector(n, 8);
      const auto s = D.solve(D.scatter(b), {.preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-11});
      CHECK(s.info.converged);
      const auto reference = at::linalg_solve(A, b.unsqueeze(1)).squeeze(1);
      CHECK(max_abs(s.x.full_tensor() - reference) < 1e-8 * (1 + max_abs(reference)));
    }
  }
}

TEST_CASE("every partition method gives the one-process product, in global order", "[sparse][dsparse][partition]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  const std::int64_t nx = 12, ny = 9;
  const auto coo = es::testing::poisson2d(nx, ny);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto x = global_vector(coo.n, 3);
  const auto expected = es::testing::dense(coo).mv(x);
  using M = sp::PartitionMethod;
  for (auto method : {M::simple, M::rcb, M::hilbert, M::slicing, M::metis}) {
    CAPTURE(static_cast<int>(method));
    const auto D = sp::DSparseTensor::partition(A, mesh, {.method = method, .coords = es::testing::grid_coords(nx, ny)});
    const auto xd = D.scatter(x);
    CHECK(max_abs(xd.full_tensor() - x) == 0.0);
    CHECK(max_abs(D.matvec(xd).full_tensor() - expected) < 1e-12);
    CHECK(max_abs((D * xd).full_tensor() - expected) < 1e-12);
    if (method == M::rcb && w.size == 4) CHECK(any_rank_non_contiguous(D));  // RCB on a 12x9 grid
  }
}

TEST_CASE("rmatvec is A^T x on an unsymmetric matrix with duplicates", "[sparse][dsparse]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  for (std::int64_t n : {29, 64}) {
    const auto coo = es::testing::unsymmetric_with_duplicates(n);
    const auto mine = my_rows(coo, w.rank, w.size);
    const auto D = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {n, n}, mesh);
    const auto A = es::testing::dense(coo);
    const auto x = global_vector(n, 5);
    CHECK(max_abs(D.matvec(D.scatter(x)).full_tensor() - A.mv(x)) < 1e-12);
    CHECK(max_abs(D.rmatvec(D.scatter(x)).full_tensor() - A.t().mv(x)) < 1e-12);
    // Also through RCB (non-contiguous ownership) on a 1-D coordinate that is scrambled.
    const sp::SparseTensor G(coo.values, coo.rows, coo.cols, {n, n});
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    const auto coords = at::rand({n, 2}, gen, at::kDouble);
    const auto R = sp::DSparseTensor::partition(G, mesh, {.method = sp::PartitionMethod::rcb, .coords = coords});
    CHECK(max_abs(R.rmatvec(R.scatter(x)).full_tensor() - A.t().mv(x)) < 1e-12);
    CHECK(max_abs(R.matvec(R.scatter(x)).full_tensor() - A.mv(x)) < 1e-12);
  }
}

TEST_CASE("from_local sends entries of rows owned elsewhere to their owner and sums them", "[sparse][dsparse]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  // Each rank contributes a share of EVERY entry of the matrix (like finite elements sharing nodes).
  const auto coo = es::testing::unsymmetric_with_duplicates(23);
  const auto share = coo.values / static_cast<double>(w.size);
  const auto D = sp::DSparseTensor::from_local(share, coo.rows, coo.cols, {coo.n, coo.n}, mesh);
  const auto x = global_vector(coo.n, 8);
  CHECK(max_abs(D.matvec(D.scatter(x)).full_tensor() - es::testing::dense(coo).mv(x)) < 1e-12);
}

TEST_CASE("empty ranks and ranks without neighbours", "[sparse][dsparse]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  SECTION("N = 9: with 4 ranks the simple partition leaves the last one empty") {
    const auto mine = my_rows(es::testing::poisson2d(3, 3), w.rank, w.size);
    const auto D = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {9, 9}, mesh);
    if (w.size == 4 && w.rank == 3) CHECK(D.layout()->local_size() == 0);
    const auto x = global_vector(9, 1);
    CHECK(max_abs(D.matvec(D.scatter(x)).full_tensor() - es::testing::dense(es::testing::poisson2d(3, 3)).mv(x)) < 1e-12);
    const auto s = D.solve(D.scatter(at::ones({9}, at::kDouble)), {.rtol = 1e-12});
    CHECK(s.info.converged);
  }
  SECTION("a block-diagonal matrix: no rank has a neighbour") {
    const std::int64_t n = 4L * w.size;
    const auto i = at::arange(w.rank * 4L, w.rank * 4L + 4, at::kLong);
    const auto D = sp::DSparseTensor::from_local(at::full({4}, 2.0, at::kDouble), i, i, {n, n}, mesh);
    CHECK(D.halo().recv_ranks.empty());
    CHECK(D.halo().send_ranks.empty());
    const auto x = global_vector(n, 2);
    CHECK(max_abs(D.matvec(D.scatter(x)).full_tensor() - 2.0 * x) == 0.0);
  }
}

TEST_CASE("user-given ownership: any set of rows per rank", "[sparse][dsparse]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  const std::int64_t nx = 10, ny = 7, n = nx * ny;
  // Round-robin ownership: row i belongs to rank i % size (maximally non-contiguous).
  const auto owned = at::arange(w.rank, n, w.size, at::kLong);
  const auto coo = es::testing::poisson2d(nx, ny);
  // Each rank passes a slice of the entries that has nothing to do with what it owns.
  const auto m = coo.values.numel();
  const auto part = at::arange(sp::detail::block_first(m, w.size, w.rank), sp::detail::block_first(m, w.size, w.rank + 1), at::kLong);
  const auto D = sp::DSparseTensor::from_local(coo.values.index_select(0, part), coo.rows.index_select(0, part),
                                               coo.cols.index_select(0, part), {n, n}, mesh, {.owned_rows = owned});
  CHECK(at::equal(D.layout()->owned(), owned));
  const auto x = global_vector(n, 4);
  CHECK(max_abs(D.matvec(D.scatter(x)).full_tensor() - es::testing::dense(coo).mv(x)) < 1e-12);
  CHECK(max_abs(D.rmatvec(D.scatter(x)).full_tensor() - es::testing::dense(coo).t().mv(x)) < 1e-12);
}

TEST_CASE("halo products whose neighbours take runs of rows and gathered rows, square and rectangular",
          "[sparse][dsparse][halo]") {
  // The exchange sends a neighbour's rows straight from x when they are one run of owned rows and
  // gathers them otherwise; the reverse adds a run in place. Ownership here mixes both for most
  // neighbour pairs: blocks of rows (the last rank empty from 3 ranks on, so shards are uneven),
  // with every fifth row of the first half dealt round-robin, so a row can go to several
  // neighbours; the second half's neighbours need runs.
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  const int holders = w.size >= 3 ? w.size - 1 : w.size;
  const auto owner = [&](std::int64_t i, std::int64_t count) {
    if (i % 5 == 0 && 2 * i < count) return static_cast<int>((i / 5) % holders);
    return static_cast<int>(std::min<std::int64_t>(i * holders / count, holders - 1));
  };
  const auto mine = [&](std::int64_t count) {
    std::vector<std::int64_t> v;
    for (std::int64_t i = 0; i < count; ++i)
      if (owner(i, count) == w.rank) v.push_back(i);
    return at::tensor(v, at::kLong).view({static_cast<std::int64_t>(v.size())});
  };
  for (const auto dtype : {at::kDouble, at::kComplexDouble})
    for (const auto& [m, n] : {std::pair<std::int64_t, std::int64_t>{40, 40}, {47, 31}}) {
      // A band around the diagonal of the m x n rectangle, and one far column per row of the first half.
      auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
      const auto ii = at::arange(m, at::kLong).unsqueeze(1), jj = at::arange(n, at::kLong).unsqueeze(0);
      const auto mask = ((ii * n / m - jj).abs() <= 2) | ((jj == (ii * 7 + 3) % n) & (2 * ii < m));
      auto dense = at::randn({m, n}, gen, at::kDouble).to(dtype);
      if (dtype == at::kComplexDouble) dense = dense + at::randn({m, n}, gen, at::kDouble).to(dtype) * c10::complex<double>(0, 1);
      dense = dense * mask.to(dtype);
      const auto nz = mask.nonzero();
      const auto rows = nz.select(1, 0).contiguous(), cols = nz.select(1, 1).contiguous();
      const auto vals = dense.index({rows, cols});
      // Each rank passes a slice of the entries unrelated to what it owns.
      const auto part = (rows % w.size == w.rank).nonzero().flatten();
      const auto D = sp::DSparseTensor::from_local(vals.index_select(0, part), rows.index_select(0, part),
                                                   cols.index_select(0, part), {m, n}, mesh,
                                                   {.owned_rows = mine(m), .owned_cols = mine(n)});
      if (w.size >= 3 && w.rank == w.size - 1) CHECK(D.layout()->local_size() == 0);
      // Which kinds of neighbour occur (over all ranks): both from 4 ranks on (at 3 the two holders
      // are each other's only neighbour; the plain partitions of the other tests send runs).
      const auto& plan = D.halo();
      const auto sent = plan.send_rows.to(at::kLong);
      int kinds[2] = {0, 0};  // {gathered, run}
      for (std::size_t i = 0; i + 1 < plan.send_offsets.size(); ++i) {
        const auto r = sent.slice(0, plan.send_offsets[i], plan.send_offsets[i + 1]);
        const bool run = r.numel() == 1 || (r.slice(0, 1) - r.slice(0, 0, -1) == 1).all().item<bool>();
        kinds[run ? 1 : 0] = 1;
      }
      MPI_Allreduce(MPI_IN_PLACE, kinds, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      // Past 8 ranks a holder has 4 rows or fewer and the round-robin rows alone rarely make a
      // gathered neighbour: the products below still cover whatever kinds occur.
      if (w.size >= 2 && w.size <= 8) CHECK(kinds[0] == 1);
      if (w.size >= 4) CHECK(kinds[1] == 1);
      const auto x = global_vector(n, 3).to(dtype), y = global_vector(m, 4).to(dtype);
      CHECK(max_abs(D.matvec(D.scatter(x)).full_tensor() - dense.mv(x)) < 1e-12);
      CHECK(max_abs(D.rmatvec(D.scatter(y)).full_tensor() - dense.t().mv(y)) < 1e-12);
      // The adjoint (conjugated) product on owned slices, into an output holding garbage.
      const auto yl = D.scatter(y).local().contiguous();
      auto xl = at::full({D.domain_layout()->local_size()}, 7.0, at::kDouble).to(dtype);
      D.apply_adjoint(yl, xl);
      CHECK(max_abs(xl - dense.conj().t().mv(y).index_select(0, D.domain_layout()->owned())) < 1e-12);
      // A block of 3 columns: whole rows travel, one message per neighbour.
      const auto X = at::randn({n, 3}, gen, at::kDouble).to(dtype);
      const auto Y = D.apply_block(X.index_select(0, D.domain_layout()->owned()).contiguous());
      CHECK(max_abs(Y - dense.mm(X).index_select(0, D.layout()->owned())) < 1e-12);
      // Twice in a row: the exchange's buffers are reused.
      CHECK(max_abs(D.matvec(D.scatter(x)).full_tensor() - dense.mv(x)) < 1e-12);
      CHECK(max_abs(D.rmatvec(D.scatter(y)).full_tensor() - dense.t().mv(y)) < 1e-12);
    }
}

TEST_CASE("matvec and rmatvec are differentiable in x and in the stored values", "[sparse][dsparse][autograd]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  const auto coo = es::testing::unsymmetric_with_duplicates(31);
  const auto mine = my_rows(coo, w.rank, w.size);
  const auto D0 = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {coo.n, coo.n}, mesh);
  const auto values = D0.values().detach().clone().requires_grad_(true);
  const auto D = D0.with_values(values);
  const auto x = global_vector(coo.n, 6);
  const auto c = global_vector(coo.n, 12);

  for (bool transpose : {false, true}) {
    CAPTURE(transpose);
    auto xd = D.scatter(x);
    xd.set_local(xd.local().detach().requires_grad_(true));
    const auto y = transpose ? D.rmatvec(xd) : D.matvec(xd);
    const auto loss = sp::dot(D.scatter(c), y);  // <c, A x>, replicated
    loss.backward();

    // One process: the same loss on the dense matrix.
    const auto A = es::testing::dense(coo).requires_grad_(true);
    const auto xr = x.clone().requires_grad_(true);
    const auto ref = at::dot(c, (transpose ? A.t() : A).mv(xr));
    ref.backward();
    CHECK(std::abs(loss.item<double>() - ref.item<double>()) < 1e-10);
    CHECK(max_abs(D.layout()->gather(xd.local().grad()) - xr.grad()) < 1e-12);
    // d loss / d value_k = dA/d(entry at row_k, col_k): gather the dense gradient at the pattern.
    const auto& L = D.local();
    const auto [v, r, cl] = sp::detail::csr_to_coo(L);
    const auto grow = D.layout()->owned().index_select(0, r);
    const auto gcol = at::cat({D.layout()->owned(), D.halo().ghosts}).index_select(0, cl);
    CHECK(max_abs(values.grad() - A.grad().index({grow, gcol})) < 1e-12);
    values.grad().zero_();
  }
}

TEST_CASE("DVector arithmetic, dot and norm keep the partition", "[sparse][dvector]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::poisson2d(9, 4);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto D = sp::DSparseTensor::partition(A, mesh, {.method = sp::PartitionMethod::rcb, .coords = es::testing::grid_coords(9, 4)});
  const auto a = global_vector(coo.n, 1), b = global_vector(coo.n, 2);
  const auto da = D.scatter(a), db = D.scatter(b);
  CHECK(max_abs((da + db).full_tensor() - (a + b)) < 1e-15);
  CHECK(max_abs((da - 2.0 * db).full_tensor() - (a - 2.0 * b)) < 1e-15);
  CHECK(max_abs((da * db).full_tensor() - a * b) < 1e-15);
  CHECK(std::abs(sp::dot(da, db).item<double>() - at::dot(a, b).item<double>()) < 1e-12);
  CHECK(std::abs(da.norm().item<double>() - a.norm().item<double>()) < 1e-12);
  auto c = da.clone();
  c.axpy(3.0, db);
  CHECK(max_abs(c.full_tensor() - (a + 3.0 * b)) < 1e-14);
  // A vector of another partition is refused (same error on every rank).
  const auto S = sp::DSparseTensor::partition(A, mesh);
  const auto ds = S.scatter(a);
  if (es::testing::world().size > 1) {
    const bool differ = !D.layout()->same_as(*S.layout());
    if (differ) CHECK_THROWS_WITH(da + ds, Catch::Contains("different partitions (rank ") && Catch::Contains(" owns "));
  }
}

TEST_CASE("bad input raises the same error on every rank", "[sparse][dsparse][errors]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  const auto mine = my_rows(es::testing::poisson2d(6, 6), w.rank, w.size);
  // The faulty rank: the last one with rows (from 13 ranks up the simple partition of 36 rows
  // leaves the last ones empty, and an empty rank has no entry to spoil).
  const auto last = sp::detail::block_owner(35, 36, w.size);
  SECTION("mismatched lengths on one rank") {
    const auto v = w.rank == last ? mine.values.narrow(0, 0, mine.values.numel() - 1) : mine.values;
    CHECK_THROWS_WITH(sp::DSparseTensor::from_local(v, mine.rows, mine.cols, {36, 36}, mesh),
                      Catch::Contains("1-D of one length"));
  }
  SECTION("a column index out of range on one rank") {
    auto cols = mine.cols.clone();
    if (w.rank == last) cols[0] = 36;
    CHECK_THROWS_WITH(sp::DSparseTensor::from_local(mine.values, mine.rows, cols, {36, 36}, mesh),
                      Catch::Contains("column index 36 is out of range [0, 36)"));
  }
  SECTION("ranks disagree on the shape") {
    const std::int64_t n = w.rank == last && w.size > 1 ? 37 : 36;
    if (w.size == 1) return;
    CHECK_THROWS_WITH(sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {n, n}, mesh),
                      Catch::Contains("disagree on the global shape"));
  }
  SECTION("ownership that misses a row") {
    const std::int64_t n = 36;
    const auto owned = w.rank == 0 ? at::arange(1, sp::detail::block_first(n, w.size, 1), at::kLong)
                                   : at::arange(sp::detail::block_first(n, w.size, w.rank),
                                                sp::detail::block_first(n, w.size, w.rank + 1), at::kLong);
    CHECK_THROWS_WITH(sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {n, n}, mesh, {.owned_rows = owned}),
                      Catch::Contains("row 0 is owned by no rank"));
  }
  SECTION("a non-square matrix to a square-only solver") {
    const auto R = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {36, 40}, mesh);
    CHECK_THROWS_WITH(R.solve(R.zeros()), Catch::Contains("cg needs a square matrix"));
  }
  SECTION("a vector of the wrong length") {
    const auto D = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {36, 36}, mesh);
    CHECK_THROWS_WITH(D.scatter(at::ones({35}, at::kDouble)), Catch::Contains("length 36"));
  }
}

TEST_CASE("reductions and value operations equal the one-process ones", "[sparse][dsparse][reductions]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::unsymmetric_with_duplicates(27);
  const auto A = es::testing::dense(coo);
  const sp::SparseTensor G(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb}) {
    const auto D = sp::DSparseTensor::partition(G, mesh, {.method = method, .coords = at::rand({coo.n, 2}, gen, at::kDouble)});
    const auto stored = G.values();
    CHECK(D.global_nnz() == G.nnz());
    CHECK(std::abs(D.sum().item<double>() - stored.sum().item<double>()) < 1e-12);
    CHECK(std::abs(D.mean().item<double>() - stored.mean().item<double>()) < 1e-12);
    CHECK(D.max() == stored.max().item<double>());
    CHECK(D.min() == stored.min().item<double>());
    CHECK(std::abs(D.norm() - stored.norm().item<double>()) < 1e-12);
    CHECK(std::abs(D.norm("1") - A.abs().sum(0).max().item<double>()) < 1e-12);
    CHECK(std::abs(D.norm("inf") - A.abs().sum(1).max().item<double>()) < 1e-12);
    CHECK(max_abs(D.sum(1).full_tensor() - A.sum(1)) < 1e-12);
    CHECK(max_abs(D.sum(0).full_tensor() - A.sum(0)) < 1e-12);
    CHECK_THROWS_WITH(D.norm("2"), Catch::Contains("ord must be"));

    const auto x = global_vector(coo.n, 13);
    const auto dense_of = [&](const sp::DSparseTensor& M) {
      // The dense matrix of M, column by column through products with unit vectors' sums:
      // comparing M x with the dense reference is enough and cheaper.
      return M.matvec(M.scatter(x)).full_tensor();
    };
    const auto pattern = (A != 0).to(at::kDouble);
    CHECK(max_abs(dense_of(D + 1.5) - (A + 1.5 * pattern).mv(x)) < 1e-12);
    CHECK(max_abs(dense_of(2.0 * D - D) - A.mv(x)) < 1e-12);
    CHECK(max_abs(dense_of(D * D) - (A * A).mv(x)) < 1e-12);
    CHECK(max_abs(dense_of(-D.abs()) - (-A.abs()).mv(x)) < 1e-12);
    CHECK(max_abs(dense_of(D.square().sqrt()) - A.abs().mv(x)) < 1e-12);
    CHECK(max_abs(dense_of(D.to(at::kFloat)).to(at::kDouble) - A.mv(x)) < 1e-5);
    const auto S = sp::DSparseTensor::partition(G, mesh, {.method = sp::PartitionMethod::slicing, .coords = at::rand({coo.n, 2}, gen, at::kDouble)});
    CHECK_THROWS_WITH(D + S, Catch::Contains("different structures"));
  }
}

TEST_CASE("the block product A X equals the dense product, both instruction sets, any k and shard",
          "[sparse][multi_rhs][spmm]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  // Long-range couplings (every rank has ghosts and boundary rows), duplicates, and an uneven
  // ownership: rank r owns [n r² / P², n (r+1)² / P²), and rank 1 owns nothing from 3 ranks up.
  const auto coo = es::testing::unsymmetric_with_duplicates(290);  // several row tiles of the block product
  const auto n = coo.n;
  std::vector<std::int64_t> bound(static_cast<std::size_t>(w.size) + 1);
  for (int r = 0; r <= w.size; ++r) bound[static_cast<std::size_t>(r)] = n * r * r / (w.size * w.size);
  if (w.size >= 3) bound[2] = bound[1];
  const auto owned = at::arange(bound[static_cast<std::size_t>(w.rank)], bound[static_cast<std::size_t>(w.rank) + 1], at::kLong);
  if (w.size >= 3 && w.rank == 1) REQUIRE(owned.numel() == 0);
  const auto mine = my_share(coo);  // the entries handed in need not be the owned rows'
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  const auto imag = at::randn({n}, gen, at::kDouble);
  const auto modes = sp::detail::avx2_kernels_available() ? std::vector<bool>{false, true} : std::vector<bool>{true};
  for (const auto dtype : {at::kDouble, at::kFloat, at::kComplexDouble}) {
    const bool complex = dtype == at::kComplexDouble;
    // Complex: values with an imaginary part per row (each duplicate half of it).
    const auto values = complex ? at::complex(mine.values, 0.5 * imag.index_select(0, mine.rows)) : mine.values.to(dtype);
    const auto D = sp::DSparseTensor::from_local(values, mine.rows, mine.cols, {n, n}, mesh, {.owned_rows = owned});
    const auto all_values = complex ? at::complex(coo.values, 0.5 * imag.index_select(0, coo.rows)) : coo.values;
    const auto dense = at::zeros({n, n}, all_values.options()).index_put_({coo.rows, coo.cols}, all_values, true);
    for (const std::int64_t k : {1, 3, 4, 8, 12, 16, 19, 24, 32}) {
      auto X = at::randn({n, k}, gen, at::kDouble), Wt = at::randn({n, k}, gen, at::kDouble);
      if (complex) {
        X = at::complex(X, at::randn({n, k}, gen, at::kDouble));
        Wt = at::complex(Wt, at::randn({n, k}, gen, at::kDouble));
      }
      const auto ref = dense.matmul(X);
      const auto ref_dots = at::real((Wt.conj() * ref).sum(0));
      const auto dot_scale = (Wt.abs() * ref.abs()).sum(0).max().item<double>();  // the dots' rounding scale
      const auto x = D.scatter(X.to(dtype)).local().contiguous();
      const auto wt = D.scatter(Wt.to(dtype)).local().contiguous();
      const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
      for (const bool portable : modes) {
        CAPTURE(c10::toString(dtype), k, portable);
        sp::detail::force_portable_kernels() = portable;
        auto y = at::empty_like(x);
        const auto dots = D.apply_block(x, y, wt);
        auto y2 = at::empty_like(x);
        CHECK(D.apply_block(x, y2, {}).empty());
        sp::detail::force_portable_kernels() = false;
        CHECK(at::equal(y, y2));
        const auto full = sp::DVector(D.layout(), y).full_tensor().to(ref.scalar_type());
        CHECK((full - ref).abs().max().item<double>() <= tol * ref.abs().max().item<double>());
        REQUIRE(dots.size() == static_cast<std::size_t>(k));
        const auto summed = sum_over_ranks(at::tensor(dots, at::kDouble));
        CHECK((summed - ref_dots).abs().max().item<double>() <= tol * dot_scale);
      }
    }
  }
}

TEST_CASE("held_bytes counts a rank's CSR, halo and layout once each, and the ghost buffer after a product",
          "[sparse][dsparse]") {
  const auto w = es::testing::world();
  const auto mesh = world_mesh();
  for (auto [nx, ny] : {std::pair<std::int64_t, std::int64_t>{40, 30}, {3, 1}}) {
    INFO(nx << " x " << ny);
    const auto mine = my_rows(es::testing::poisson2d(nx, ny), w.rank, w.size);
    const auto D = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {nx * ny, nx * ny}, mesh);
    const auto& csr = D.local();
    const auto csr_bytes = static_cast<std::int64_t>(csr.rowptr.nbytes() + csr.col.nbytes() + csr.values.nbytes());
    const auto& h = D.halo();
    const auto rows = D.layout()->local_size();
    // Everything else is a few entries per row, ghost and sent row: index tensors of 8 bytes, and
    // the directory's share (at most a block of rows).
    // The generic kernels keep the CSR split in two (interior, boundary): a second copy; the
    // native ones the values of the diagonal runs (at most a second copy of the values).
    const char* kernels = std::getenv("EINSHARD_SPARSE_KERNELS");
    const bool split = kernels != nullptr && std::string(kernels) == "generic";
    const auto bound = (split ? 2 * csr_bytes : csr_bytes + static_cast<std::int64_t>(csr.values.nbytes())) +
                       8 * (6 * rows + 6 * h.ghost_count() + 6 * h.send_count() + nx * ny / w.size + 2) +
                       64 * static_cast<std::int64_t>(h.recv_ranks.size() + h.send_ranks.size() + 4);
    const auto before = D.held_bytes();
    CHECK(before >= csr_bytes);
    CHECK(before <= bound);
    (void)D.matvec(D.scatter(global_vector(nx * ny, 5)));
    const auto after = D.held_bytes();
    CHECK(after >= before + 8 * h.ghost_count());  // the ghost values, double
    CHECK(after <= bound + 8 * (2 * h.ghost_count() + 2 * h.send_count()));
  }
}

TEST_CASE("A product whose sends are gathered from scattered rows equals the dense one for 4-, 8- and 16-byte values",
          "[sparse][dsparse]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(w.comm, {w.size}, {"x"});
  const std::int64_t nx = 17, ny = 5, n = nx * ny;
  const auto coo = es::testing::poisson2d(nx, ny);
  // Each rank owns a strip of grid columns: the rows it sends (its strip's edge columns) are one
  // per grid line in its local numbering, scattered, so the halo packs them.
  const auto owner = [&](const at::Tensor& rows) { return at::floor_divide(rows.remainder(nx) * w.size, nx); };
  const auto all = at::arange(n, at::kLong);
  const auto owned = all.index_select(0, (owner(all) == w.rank).nonzero().flatten());
  const auto keep = (owner(coo.rows) == w.rank).nonzero().flatten();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto xr = at::randn({n}, gen, at::kDouble), xi = at::randn({n}, gen, at::kDouble);
  for (const auto dtype : {at::kFloat, at::kDouble, at::kComplexFloat, at::kComplexDouble}) {
    CAPTURE(c10::toString(dtype));
    const bool complex = at::isComplexType(dtype);
    const auto x = complex ? at::complex(xr, xi) : xr;
    const auto D = sp::DSparseTensor::from_local(coo.values.index_select(0, keep).to(dtype), coo.rows.index_select(0, keep),
                                                 coo.cols.index_select(0, keep), {n, n}, mesh, {.owned_rows = owned});
    const auto ref = es::testing::dense(coo).to(x.scalar_type()).mv(x);
    const auto y = D.matvec(D.scatter(x.to(dtype))).full_tensor().to(x.scalar_type());
    const double tol = dtype == at::kFloat || dtype == at::kComplexFloat ? 1e-5 : 1e-12;
    CHECK(max_abs(y - ref) < tol * (1 + max_abs(ref)));
  }
}

}  // namespace test_dsparse
