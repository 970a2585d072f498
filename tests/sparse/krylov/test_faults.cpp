// Faults injected on one rank of the distributed sparse part -- assembly, SpMV, every solver with
// every preconditioner -- end the same way on every rank: the same es::Error, or the same
// SolveInfo (reason and iteration), and no rank is left waiting.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/sparse.hpp>

#include "fault_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace test_faults {

namespace es = einshard;
namespace sp = einshard::sparse;
namespace et = einshard::testing;
using et::Coo;

namespace {

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double infinity = std::numeric_limits<double>::infinity();

/// This rank's rows of the simple partition, with `fault` applied to its values on the faulty rank.
Coo my_rows(const Coo& a, bool faulty, const std::function<at::Tensor(at::Tensor)>& fault = {}) {
  const auto w = et::world();
  const auto first = sp::detail::block_first(a.n, w.size, w.rank), last = sp::detail::block_first(a.n, w.size, w.rank + 1);
  const auto keep = ((a.rows >= first) & (a.rows < last)).nonzero().flatten();
  Coo mine{a.values.index_select(0, keep), a.rows.index_select(0, keep), a.cols.index_select(0, keep), a.n};
  if (faulty && fault) mine.values = fault(mine.values.clone());
  return mine;
}

std::string solve_outcome(const sp::DSparseTensor& D, const sp::DVector& b, const sp::SolveOptions& o) {
  sp::SolveInfo info;
  auto outcome = et::outcome_of([&] { info = D.solve(b, o).info; });
  if (outcome.empty())
    outcome = std::string(sp::to_string(info.reason)) + " after " + std::to_string(info.iterations) +
              (info.converged ? " (converged)" : " (not converged)");
  return outcome;
}

}  // namespace

TEST_CASE("faults in assembly raise the same error on every rank", "[sparse][faults]") {
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const bool me = w.rank == et::faulty_rank();
  const auto a = et::poisson2d(6, 5);
  const auto mine = my_rows(a, false);
  auto assemble = [&](const at::Tensor& v, const at::Tensor& r, const at::Tensor& c) {
    (void)sp::DSparseTensor::from_local(v, r, c, {a.n, a.n}, mesh);
  };
  if (w.size > 1)
    et::expect_error_everywhere([&] { assemble(me ? mine.values.to(at::kFloat) : mine.values, mine.rows, mine.cols); },
                                "different dtypes");
  et::expect_error_everywhere([&] { assemble(me ? mine.values.view({-1, 1}) : mine.values, mine.rows, mine.cols); },
                              "1-D of one length");
  // Integer values on one rank: the first rank's fault wins, which with other ranks is rank 0's
  // view (the dtypes differ), alone the faulty rank's own.
  et::expect_error_everywhere([&] { assemble(me ? mine.values.to(at::kLong) : mine.values, mine.rows, mine.cols); },
                              w.size > 1 ? "different dtypes" : "floating point or complex");
  // A tensor on another device (meta: no data at all) is refused before anything reads it.
  const auto meta = at::TensorOptions().device(at::kMeta);
  et::expect_error_everywhere(
      [&] { assemble(mine.values, me ? at::empty_like(mine.rows, meta) : mine.rows, mine.cols); }, "must hold data");
  // Values without data on one rank: the other ranks see values on another kind of device.
  et::expect_error_everywhere(
      [&] { assemble(me ? at::empty_like(mine.values, meta) : mine.values, mine.rows, mine.cols); },
      w.size > 1 && et::faulty_rank() != 0 ? "different kinds of device" : "must hold data");
  // Still usable afterwards.
  const auto D = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {a.n, a.n}, mesh);
  CHECK(D.global_nnz() == a.values.numel());
}

TEST_CASE("a NaN on one rank reaches exactly the rows it touches in SpMV", "[sparse][faults]") {
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const auto a = et::poisson2d(6, 5);
  const auto mine = my_rows(a, false);
  const auto D = sp::DSparseTensor::from_local(mine.values, mine.rows, mine.cols, {a.n, a.n}, mesh);
  const auto A = et::dense(a);
  // x has a NaN in the faulty rank's first owned entry (if it owns any): rows with a stored entry in
  // that column become NaN, no others (the sparse product never multiplies a structural zero).
  auto x = D.scatter(at::ones({a.n}, at::kDouble));
  std::int64_t column = -1;
  if (w.rank == et::faulty_rank() && x.local_size() > 0) {
    x.local()[0] = not_a_number;
    column = D.layout()->owned()[0].item<std::int64_t>();
  }
  MPI_Allreduce(MPI_IN_PLACE, &column, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (column < 0) return;
  const auto touched = A.select(1, column) != 0;
  CHECK(at::equal(at::isnan(D.matvec(x).full_tensor()), touched));
  CHECK(at::equal(at::isnan(D.rmatvec(x).full_tensor()), A.select(0, column) != 0));
}

TEST_CASE("faults on one rank end every solver the same way on every rank", "[sparse][faults]") {
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const bool me = w.rank == et::faulty_rank();
  const auto a = et::poisson2d(6, 5);
  using P = sp::Preconditioner;
  using M = sp::Method;
  struct Fault {
    const char* name;
    std::function<at::Tensor(at::Tensor)> values;  // applied to the faulty rank's matrix values
    bool nan_in_b = false, nan_in_x0 = false;
  };
  const std::vector<Fault> faults{
      {"NaN in b", {}, true, false},
      {"NaN in x0", {}, false, true},
      {"NaN in the matrix", [](at::Tensor v) { return v.numel() ? v.index_fill_(0, at::zeros({1}, at::kLong), not_a_number) : v; }},
      {"Inf on the diagonal", [](at::Tensor v) { return v.numel() ? v.index_fill_(0, at::zeros({1}, at::kLong), infinity) : v; }},
  };
  std::vector<P> preconditioners{P::none, P::jacobi, P::l1_jacobi, P::block_jacobi, P::chebyshev};
#if defined(EINSHARD_HAS_HYPRE)
  preconditioners.push_back(P::amg);  // hypre's setup and V-cycles see the fault too
#endif
  for (const auto& f : faults) {
    const auto rows = my_rows(a, me, f.values);
    const auto D = sp::DSparseTensor::from_local(rows.values, rows.rows, rows.cols, {a.n, a.n}, mesh);
    auto b = D.scatter(at::ones({a.n}, at::kDouble));
    auto x0 = D.zeros();
    if (me && b.local_size() > 0) {
      if (f.nan_in_b) b.local()[0] = not_a_number;
      if (f.nan_in_x0) x0.local()[0] = not_a_number;
    }
    // Every method, and CG in each of its reduction schemes (the pipelined one overlaps its
    // all-reduce with the product, so a NaN travels by another path).
    struct Solver {
      M method;
      sp::CgVariant variant = sp::CgVariant::standard;
    };
    for (const Solver s : {Solver{M::cg}, Solver{M::cg, sp::CgVariant::single_reduction},
                           Solver{M::cg, sp::CgVariant::pipelined}, Solver{M::bicgstab}, Solver{M::gmres},
                           Solver{M::minres}, Solver{M::fgmres}})
      for (auto pc : preconditioners) {
        if (pc == P::chebyshev && s.method != M::cg) continue;
        INFO(f.name << ", " << sp::to_string(s.method) << " (CG variant " << static_cast<int>(s.variant) << "), "
                    << sp::to_string(pc));
        const auto o = et::same_on_every_rank(solve_outcome(
            D, b,
            {.method = s.method, .preconditioner = pc, .rtol = 1e-10, .maxiter = 60, .x0 = x0, .cg_variant = s.variant}));
        // A fault that reaches the iteration never passes for convergence.
        CHECK(o.find("(converged)") == std::string::npos);
      }
  }
}

TEST_CASE("faults on one rank end LSQR, LSMR and block solves the same way on every rank", "[sparse][faults]") {
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const bool me = w.rank == et::faulty_rank();
  const auto a = et::poisson2d(6, 5);
  using M = sp::Method;
  const auto nan_first = [](at::Tensor v) { return v.numel() ? v.index_fill_(0, at::zeros({1}, at::kLong), not_a_number) : v; };
  for (const bool matrix_fault : {false, true}) {
    const auto rows = my_rows(a, me && matrix_fault, nan_first);
    const auto D = sp::DSparseTensor::from_local(rows.values, rows.rows, rows.cols, {a.n, a.n}, mesh);
    INFO((matrix_fault ? "NaN in the matrix" : "NaN in b") << " on rank " << et::faulty_rank());
    // LSQR and LSMR: the same stop code and iteration on every rank, never a solution.
    auto b = D.scatter(at::ones({a.n}, at::kDouble));
    if (!matrix_fault && me && b.local_size() > 0) b.local()[0] = not_a_number;
    for (const auto method : {&sp::DSparseTensor::lsqr, &sp::DSparseTensor::lsmr}) {
      sp::LeastSquaresResult r;
      auto outcome = et::outcome_of([&] { r = (D.*method)(b, {.atol = 1e-10, .btol = 1e-10, .maxiter = 60}); });
      if (outcome.empty())
        outcome = "istop " + std::to_string(r.istop) + ", " + sp::to_string(r.info.reason) + " after " +
                  std::to_string(r.info.iterations) + (r.info.converged ? " (converged)" : " (not converged)");
      const auto o = et::same_on_every_rank(outcome);
      CHECK(o.find("(converged)") == std::string::npos);
    }
    // A block of three right-hand sides whose middle column carries the fault on one rank (or a
    // faulty matrix under all three): every method's per-column outcome agrees on every rank, the
    // faulty column never passes for converged, and with a sound matrix the others still converge.
    auto B = at::ones({a.n, 3}, at::kDouble);
    B.select(1, 2).mul_(2.0);
    auto Bd = D.scatter(B);
    if (!matrix_fault && me && Bd.local_size() > 0) Bd.local()[0][1] = not_a_number;
    for (const auto method : {M::cg, M::bicgstab, M::gmres, M::fgmres, M::minres}) {
      INFO(sp::to_string(method));
      std::vector<sp::SolveInfo> columns;
      auto outcome = et::outcome_of([&] { columns = D.solve(Bd, {.method = method, .rtol = 1e-10, .maxiter = 80}).info.columns; });
      for (std::size_t j = 0; j < columns.size(); ++j)
        outcome += "column " + std::to_string(j) + ": " + sp::to_string(columns[j].reason) + " after " +
                   std::to_string(columns[j].iterations) + (columns[j].converged ? " (converged); " : " (not converged); ");
      const auto o = et::same_on_every_rank(outcome);
      if (columns.size() == 3) {
        CHECK_FALSE(columns[1].converged);
        if (!matrix_fault) {
          CHECK(columns[0].converged);
          CHECK(columns[2].converged);
        }
      } else {
        CHECK_FALSE(o.empty());  // an error, the same everywhere
      }
    }
  }
}

}  // namespace test_faults
