// The two kernel paths (native loops, generic ATen operations) against each other and against
// dense references: kernels_for, the CSR products, the fused vector updates, the distributed
// products with their halo, every Krylov method with every device preconditioner, and the faults
// of tensors on other devices. The generic path is forced on CPU tensors here
// (detail::force_generic_kernels); the whole suite runs once more under
// EINSHARD_SPARSE_KERNELS=generic (tests/CMakeLists.txt: sparse.generic.*).

#include <catch2/catch.hpp>

#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "collective_error.hpp"
#include "einshard/sparse.hpp"
#include "einshard/sparse/krylov/common.hpp"
#include "einshard/sparse/krylov/gram_schmidt.hpp"
#include "einshard/sparse/preconditioner/factory.hpp"
#include "operations_support.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_kernels {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

using es::testing::max_abs;
using es::testing::random_vector;
using es::testing::relative_error;
using es::testing::world_mesh;

/// Forces the generic kernels (or not) for its lifetime.
class Kernels {
 public:
  explicit Kernels(bool generic) : before_(sp::detail::force_generic_kernels()) {
    sp::detail::force_generic_kernels() = generic;
  }
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;
  ~Kernels() { sp::detail::force_generic_kernels() = before_; }

 private:
  bool before_;
};

bool environment_generic() {
  const char* v = std::getenv("EINSHARD_SPARSE_KERNELS");
  return v != nullptr && std::string_view(v) == "generic";
}

/// A 7 x 5 CSR with an empty row, duplicates summed, of `dtype`.
sp::Csr small_csr(at::ScalarType dtype) {
  const auto rows = at::tensor({0, 0, 1, 1, 3, 3, 4, 5, 6, 6, 6}, at::kLong);
  const auto cols = at::tensor({0, 3, 1, 1, 4, 0, 2, 3, 0, 4, 2}, at::kLong);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto values = at::randn({rows.numel()}, gen, dtype);
  return sp::detail::coo_to_csr(values, rows, cols, 7, 5);
}

at::Tensor dense_of(const sp::Csr& a) {
  const auto [v, r, c] = sp::detail::csr_to_coo(a);
  return at::zeros({a.rows, a.cols}, v.options()).index_put_({r, c}, v, /*accumulate=*/true);
}

at::Tensor random_like(std::vector<std::int64_t> shape, at::ScalarType dtype, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, dtype);
}

double gap(const at::Tensor& a, const at::Tensor& b) { return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>(); }

sp::DSparseTensor poisson(std::int64_t nx, std::int64_t ny, const es::Mesh& mesh) {
  const auto coo = es::testing::poisson2d(nx, ny);
  return sp::DSparseTensor::partition(sp::SparseTensor(coo.values, coo.rows, coo.cols, {coo.n, coo.n}), mesh);
}

}  // namespace

TEST_CASE("kernels_for names the generic kernels under EINSHARD_SPARSE_KERNELS=generic or when forced",
          "[sparse][kernels][unit]") {
  const auto t = at::ones({3}, at::kDouble);
  CHECK(sp::kernels_for(t) == (environment_generic() ? "generic" : "native"));
  {
    const Kernels forced(true);
    CHECK(sp::kernels_for(t) == "generic");
  }
  CHECK(sp::kernels_for(t) == (environment_generic() ? "generic" : "native"));
  // Any device but the CPU takes the generic kernels (the meta device stands for one here).
  CHECK(sp::kernels_for(at::empty({3}, at::TensorOptions().device(at::kMeta))) == "generic");
}

TEST_CASE("COO to CSR: in order, shuffled with duplicates and long rows, the dense sum and its gradient",
          "[sparse][kernels][unit]") {
  const std::int64_t rows = 9, cols = 70;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  // Row 2 holds 150 entries on 70 columns (sorted with std::sort), the others a few (insertion
  // sort); row 5 none; many duplicates everywhere.
  const auto r = at::cat({at::randint(0, 5, {40}, gen, at::kLong), at::full({150}, 2, at::kLong),
                          at::randint(6, rows, {30}, gen, at::kLong)});
  const auto c = at::randint(0, cols, {r.numel()}, gen, at::kLong);
  const auto perm = at::randperm(r.numel(), gen, at::kLong);
  const auto row = r.index_select(0, perm), col = c.index_select(0, perm);
  for (auto dtype : {at::kDouble, at::kComplexDouble}) {
    CAPTURE(c10::toString(dtype));
    auto values = at::randn({row.numel()}, gen, dtype).requires_grad_(true);
    const auto dense = at::zeros({rows, cols}, dtype).index_put_({row, col}, values, /*accumulate=*/true);
    const auto a = sp::detail::coo_to_csr(values, row, col, rows, cols);
    CHECK(gap(dense_of(a), dense.detach()) < 1e-12);
    // Each row's columns strictly increasing: sorted and summed.
    const auto rp = a.rowptr.to(at::kLong), cl = a.col.to(at::kLong);
    for (std::int64_t i = 0; i < rows; ++i)
      for (auto k = rp[i].item<std::int64_t>() + 1; k < rp[i + 1].item<std::int64_t>(); ++k)
        CHECK(cl[k].item<std::int64_t>() > cl[k - 1].item<std::int64_t>());
    CHECK(a.nnz() == dense.detach().ne(0).sum().item<std::int64_t>());
    // The gradient reaches every entry, duplicates included: d(sum w * A) / d values = w[row, col].
    const auto w = at::randn({rows, cols}, gen, at::kDouble).to(dtype);
    const auto [av, ar, ac] = sp::detail::csr_to_coo(a);
    at::real(av * w.index({ar, ac})).sum().backward();
    const auto g = values.grad().clone();
    values.mutable_grad().zero_();
    at::real(dense * w).sum().backward();
    CHECK(gap(g, values.grad()) < 1e-12);
    // Entries already in CSR order pass through as they are.
    const auto b = sp::detail::coo_to_csr(av.detach(), ar, ac, rows, cols);
    CHECK(gap(b.values, av.detach()) == 0.0);
    CHECK(b.col.to(at::kLong).equal(cl));
    CHECK(b.rowptr.to(at::kLong).equal(rp));
  }
  // Rows in order, columns within a row shuffled with duplicates (a product's output): no
  // counting pass; summed in a typed loop without gradients, by index_add_ with them.
  const auto [grouped, order] = row.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0);
  const auto grouped_col = col.index_select(0, order);
  for (auto dtype : {at::kFloat, at::kComplexDouble, at::kDouble}) {
    for (bool grad : {false, true}) {
      if (grad && dtype != at::kDouble) continue;
      CAPTURE(c10::toString(dtype), grad);
      auto values = at::randn({row.numel()}, gen, dtype).requires_grad_(grad);
      const auto dense = at::zeros({rows, cols}, dtype).index_put_({grouped, grouped_col}, values.detach(), true);
      const auto a = sp::detail::coo_to_csr(values, grouped, grouped_col, rows, cols);
      CHECK(gap(dense_of(a).detach(), dense) < (dtype == at::kFloat ? 1e-5 : 1e-12));
      CHECK(a.nnz() == dense.ne(0).sum().item<std::int64_t>());
      CHECK(a.values.requires_grad() == grad);
      if (grad) {  // d(sum A) / d values = 1 for every entry, duplicates included
        a.values.sum().backward();
        CHECK(gap(values.grad(), at::ones_like(values)) == 0.0);
      }
    }
  }
  CHECK_THROWS_WITH(sp::detail::coo_to_csr(at::ones({2}, at::kDouble), at::tensor({0, 9}, at::kLong),
                                           at::tensor({0, 1}, at::kLong), rows, cols),
                    "SparseTensor: expected row indices in [0, 9), found 9");
  CHECK_THROWS_WITH(sp::detail::coo_to_csr(at::ones({2}, at::kDouble), at::tensor({0, 1}, at::kLong),
                                           at::tensor({-1, 1}, at::kLong), rows, cols),
                    "SparseTensor: expected column indices in [0, 70), found -1");
}

TEST_CASE("generic CSR kernels equal the native ones and a dense product", "[sparse][kernels][unit]") {
  for (auto dtype : {at::kDouble, at::kFloat, at::kComplexDouble}) {
    CAPTURE(c10::toString(dtype));
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
    const auto a = small_csr(dtype);
    const auto A = dense_of(a);
    const auto x = random_like({5}, dtype, 1), y = random_like({7}, dtype, 2);
    const auto X = random_like({5, 3}, dtype, 4);
    CHECK(gap(sp::detail::generic_spmv(a, x), at::mv(A, x)) < tol);
    CHECK(gap(sp::detail::generic_spmv(a, x), sp::detail::spmv(a, x)) < tol);
    CHECK(gap(sp::detail::generic_spmv(a, X), at::mm(A, X)) < tol);
    CHECK(gap(sp::detail::generic_spmv_transpose(a, y), at::mv(A.t(), y)) < tol);
    CHECK(gap(sp::detail::generic_spmv_transpose(a, y, true), at::mv(A.conj().t(), y)) < tol);
    CHECK(gap(sp::detail::generic_spmv_transpose(a, y, true), sp::detail::spmv_transpose(a, y, true)) < tol);
    CHECK(gap(sp::detail::generic_diagonal(a), sp::detail::diagonal(a)) < tol);
    CHECK(gap(sp::detail::generic_diagonal(a, 1), sp::detail::diagonal(a, 1)) < tol);
    const auto U = random_like({7, 2}, dtype, 5), V = random_like({5, 2}, dtype, 6);
    CHECK(gap(sp::detail::generic_sampled_product(a, U, V), sp::detail::sampled_product(a, U, V)) < tol);
    CHECK(gap(sp::detail::generic_sampled_product(a, y, x), sp::detail::sampled_product(a, y, x)) < tol);
    auto yn = at::empty({7}, a.values.options()), yg = at::empty({7}, a.values.options());
    const auto dn = sp::detail::spmv_dot(a, x, yn, y), dg = sp::detail::generic_spmv_dot(a, x, yg, y);
    CHECK(gap(yn, yg) < tol);
    CHECK(std::abs(dn - dg) < 10 * tol);
  }
}

TEST_CASE("CSR products over rows of every length from 0 to 10 equal a dense product", "[sparse][kernels][unit]") {
  // Rows of 0 to 10 entries twice over (23 rows: pairs of rows and an odd last one), each row's
  // columns scattered over 12: the unrolled lengths (up to 7) and the loop past them.
  std::vector<std::int64_t> r, c;
  for (std::int64_t i = 0; i < 23; ++i)
    for (std::int64_t k = 0; k < i % 11; ++k) {
      r.push_back(i);
      c.push_back((5 * k + i) % 12);
    }
  const auto rows = at::tensor(r, at::kLong), cols = at::tensor(c, at::kLong);
  for (auto dtype : {at::kDouble, at::kFloat, at::kComplexDouble}) {
    CAPTURE(c10::toString(dtype));
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
    const auto a = sp::detail::coo_to_csr(random_like({rows.numel()}, dtype, 7), rows, cols, 23, 12);
    const auto A = dense_of(a);
    const auto x = random_like({12}, dtype, 8), w = random_like({23}, dtype, 9);
    const auto ref = at::mv(A, x);
    const auto ref_dot = sp::detail::host_complex(at::vdot(w, ref).reshape({1}))[0];
    CHECK(gap(sp::detail::spmv(a, x), ref) < tol);
    auto y = at::empty({23}, a.values.options());
    CHECK(std::abs(sp::detail::spmv_dot(a, x, y, w) - ref_dot) < 10 * tol);
    CHECK(gap(y, ref) < tol);
    // The halo product's interior half over all rows (no boundary rows), with and without <w, y>.
    const auto none = at::empty({0}, at::kLong);
    auto h = at::empty({23}, a.values.options());
    CHECK(std::abs(sp::detail::spmv_halo(a, none, none, 12, x, x, h, w, false) - ref_dot) < 10 * tol);
    CHECK(gap(h, ref) < tol);
    h.zero_();
    (void)sp::detail::spmv_halo(a, none, none, 12, x, x, h, {}, false);
    CHECK(gap(h, ref) < tol);
  }
}

TEST_CASE("Block CG's vector passes equal torch on every column count, dtype and instruction set",
          "[sparse][kernels][unit]") {
  // Column counts that use each window (8, 4, 2, 1) and several of them; a stopped column (α =
  // β = 0, inactive); a diagonal preconditioner and none.
  const std::int64_t n = 37;
  for (const auto dtype : {at::kDouble, at::kFloat, at::kComplexDouble}) {
    const double tol = dtype == at::kFloat ? 1e-4 : 1e-12;
    for (const std::int64_t k : {1, 3, 8, 13, 32}) {
      const auto r0 = random_like({n, k}, dtype, 21), q = random_like({n, k}, dtype, 22);
      const auto x0 = random_like({n, k}, dtype, 23), p0 = random_like({n, k}, dtype, 24);
      const auto s0 = random_like({n, k}, dtype, 25), w = random_like({n, k}, dtype, 26);
      const auto u0 = random_like({n, k}, dtype, 27);
      const auto d = (random_like({n}, dtype, 28).abs() + 0.5).to(dtype);
      std::vector<double> alpha(static_cast<std::size_t>(k)), beta(alpha.size());
      std::vector<char> active(alpha.size(), 1);
      for (std::int64_t j = 0; j < k; ++j) {
        alpha[static_cast<std::size_t>(j)] = 0.3 + 0.1 * static_cast<double>(j);
        beta[static_cast<std::size_t>(j)] = 0.7 - 0.02 * static_cast<double>(j);
      }
      active.back() = 0;
      alpha.back() = beta.back() = 0.0;
      const auto col = [&](const std::vector<double>& v) { return at::tensor(v, at::kDouble).to(dtype).unsqueeze(0); };
      const auto a = col(alpha), b = col(beta), on = col(std::vector<double>(active.begin(), active.end()));
      const auto re_sums = [](const at::Tensor& u, const at::Tensor& v) {
        return at::real(at::sum(u.conj() * v, 0)).to(at::kDouble);
      };
      const auto vec_of = [](const std::vector<double>& v, std::size_t from, std::size_t count) {
        return at::tensor(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(from),
                                              v.begin() + static_cast<std::ptrdiff_t>(from + count)),
                          at::kDouble);
      };
      const auto uk = static_cast<std::size_t>(k);
      for (const bool portable : {false, true}) {
        CAPTURE(c10::toString(dtype), k, portable);
        sp::detail::force_portable_kernels() = portable;
        CHECK(gap(vec_of(sp::detail::block_dots(r0, q), 0, uk), re_sums(r0, q)) < tol * n);
        for (const bool diagonal : {false, true}) {
          const auto dd = diagonal ? d : at::Tensor();
          const auto dcol = diagonal ? d.unsqueeze(1) : at::ones({n, 1}, dtype);
          auto r = r0.clone();
          const auto sums = sp::detail::block_cg_update(r, q, alpha, dd);
          const auto r_ref = r0 - a * q;
          CHECK(gap(r, r_ref) < tol);
          CHECK(gap(vec_of(sums, 0, uk), re_sums(r_ref, dcol * r_ref)) < tol * n);
          CHECK(gap(vec_of(sums, uk, uk), re_sums(r_ref, r_ref)) < tol * n);
          auto x = x0.clone(), pp = p0.clone();
          sp::detail::block_cg_direction(x, pp, r_ref, dd, alpha, beta, active);
          CHECK(gap(x, x0 + a * p0) < tol);
          CHECK(gap(pp, on * (dcol * r_ref + b * p0)) < tol);
          for (const bool identity : {false, true}) {
            auto x2 = x0.clone(), r2 = r0.clone(), p2 = p0.clone(), s2 = s0.clone(), u2 = u0.clone();
            const auto cg = sp::detail::block_cgcg_update(x2, r2, p2, s2, u2, w, alpha, beta, dd, identity && !diagonal);
            const auto p_ref = u0 + b * p0, s_ref = w + b * s0, r2_ref = r0 - a * s_ref;
            CHECK(gap(p2, p_ref) < tol);
            CHECK(gap(s2, s_ref) < tol);
            CHECK(gap(x2, x0 + a * p_ref) < tol);
            CHECK(gap(r2, r2_ref) < tol);
            CHECK(gap(vec_of(cg, uk, uk), re_sums(r2_ref, r2_ref)) < tol * n);
            if (diagonal || identity) {
              const auto u_ref = dcol * r2_ref;
              CHECK(gap(u2, u_ref) < tol);
              CHECK(gap(vec_of(cg, 0, uk), re_sums(r2_ref, u_ref)) < tol * n);
            } else {
              CHECK(at::equal(u2, u0));  // a general preconditioner: u is the caller's
            }
          }
        }
        sp::detail::force_portable_kernels() = false;
      }
    }
  }
}

TEST_CASE("Products over diagonal runs find the runs and equal a dense product", "[sparse][kernels][unit]") {
  // Stretches of rows with one offset pattern each: 5 points (unrolled), 9 (a run-time count), 7
  // (unrolled) cut by a row that needs the halo, 3; rows near the ends lose the entries that fall
  // outside and break the runs; the 4 rows between the halo row and the 3-point stretch are too
  // few for a run and stay with the CSR loops. Run lengths leave remainders past the vector lanes.
  const std::int64_t n = 300;
  const auto pattern = [](std::int64_t i) -> std::vector<std::int64_t> {
    if (i < 100) return {-5, -1, 0, 1, 5};
    if (i == 100) return {0};
    if (i < 150) return {-7, -2, 0, 2, 4, 7, 9, 11, 13};
    if (i < 230) return {-20, -10, -1, 0, 1, 10, 20};
    return {-1, 0, 1};
  };
  std::vector<std::int64_t> r, c;
  for (std::int64_t i = 0; i < n; ++i)
    for (const auto o : pattern(i))
      if (i + o >= 0 && i + o < n) {
        r.push_back(i);
        c.push_back(i + o);
      }
  const auto rows = at::tensor(r, at::kLong), cols = at::tensor(c, at::kLong);
  const auto boundary = at::tensor(std::vector<std::int64_t>{225}, at::kLong);  // reads x only: no ghosts here
  const auto base = sp::detail::coo_to_csr(random_like({rows.numel()}, at::kDouble, 3), rows, cols, n, n);
  const auto runs_found = sp::detail::find_diagonal_runs(base.rowptr, base.col, n, boundary);
  std::vector<std::int64_t> got;  // begin, end, points of each run
  for (const auto& run : runs_found.runs) got.insert(got.end(), {run.begin, run.end, run.points});
  CHECK(got == std::vector<std::int64_t>{5, 100, 5, 101, 150, 9, 150, 225, 7, 230, 299, 3});
  // A 2-D 5-point matrix on a grid whose lines have fewer interior rows than a run has none; one
  // line longer and the interior of each of the 20 lines is a run.
  for (const std::int64_t width : {9, 10}) {
    const auto small = es::testing::poisson2d(width, 20);
    const auto rows_n = width * 20;
    const auto small_csr = sp::detail::coo_to_csr(small.values, small.rows, small.cols, rows_n, rows_n);
    const auto found = sp::detail::find_diagonal_runs(small_csr.rowptr, small_csr.col, rows_n, at::empty({0}, at::kLong));
    CHECK(found.runs.size() == (width == 9 ? 0U : 20U));
  }

  // float64, float32, and float32 values applied to float64 vectors (Precision::single_values).
  for (const auto& [values_type, vector_type] : {std::pair{at::kDouble, at::kDouble}, std::pair{at::kFloat, at::kFloat},
                                                 std::pair{at::kFloat, at::kDouble}}) {
    auto a = base;
    a.values = base.values.to(values_type);
    auto runs = runs_found;
    sp::detail::fill_diagonal_runs(runs, a.rowptr, a.values);
    REQUIRE(runs.active());
    const auto A = dense_of(a).to(at::kDouble);
    const auto x = random_like({n}, vector_type, 8), w = random_like({n}, vector_type, 9);
    const auto ref = at::mv(A, x.to(at::kDouble));
    const double ref_dot = at::dot(w.to(at::kDouble), ref).item<double>();
    const double tol = vector_type == at::kFloat ? 1e-5 : 1e-12;
    const auto starts = sp::detail::ghost_starts(a, boundary, n);
    for (const bool portable : {false, true}) {
      for (const bool dotted : {false, true}) {
        CAPTURE(c10::toString(values_type), c10::toString(vector_type), portable, dotted);
        auto y = at::full({n}, std::numeric_limits<double>::quiet_NaN(), vector_type);
        sp::detail::force_portable_kernels() = portable;
        const auto wd = dotted ? w : at::Tensor();
        auto dot = sp::detail::spmv_halo(a, boundary, starts, n, x, x, y, wd, false, nullptr, &runs);
        dot += sp::detail::spmv_halo(a, boundary, starts, n, x, x, y, wd, true, nullptr, &runs);
        sp::detail::force_portable_kernels() = false;
        CHECK(gap(y.to(at::kDouble), ref) < tol);
        if (dotted) CHECK(std::abs(dot.real() - ref_dot) < tol * (1 + std::abs(ref_dot)));
      }
    }
    // y = A x + 0.5 y (LSQR's form) takes the CSR loops with runs given.
    auto y = random_like({n}, vector_type, 10);
    const auto y_ref = ref + 0.5 * y.to(at::kDouble);
    const double half = 0.5;
    auto norm2 = sp::detail::spmv_halo(a, boundary, starts, n, x, x, y, {}, false, &half, &runs);
    norm2 += sp::detail::spmv_halo(a, boundary, starts, n, x, x, y, {}, true, &half, &runs);
    CHECK(gap(y.to(at::kDouble), y_ref) < tol);
    CHECK(std::abs(norm2.real() - at::dot(y_ref, y_ref).item<double>()) < tol * at::dot(y_ref, y_ref).item<double>());
  }
  // Complex values form the same runs but keep the CSR loops.
  auto runs = runs_found;
  sp::detail::fill_diagonal_runs(runs, base.rowptr, base.values.to(at::kComplexDouble));
  CHECK_FALSE(runs.active());
}

TEST_CASE("CG's fused update in float32 and float64 with each instruction set equals torch's operations",
          "[sparse][kernels][unit]") {
  // Lengths that leave a remainder past the vector lanes (and none at all).
  for (auto dtype : {at::kDouble, at::kFloat}) {
    for (const std::int64_t n : {std::int64_t{0}, std::int64_t{3}, std::int64_t{37}}) {
      for (const bool diagonal : {false, true}) {
        for (const bool portable : {false, true}) {
          CAPTURE(c10::toString(dtype), n, diagonal, portable);
          const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
          auto x = random_like({n}, dtype, 11), r = random_like({n}, dtype, 12);
          const auto p = random_like({n}, dtype, 13), q = random_like({n}, dtype, 14);
          const auto d = diagonal ? random_like({n}, dtype, 15) : at::Tensor();
          auto z = at::zeros({n}, dtype);
          const auto x_ref = x + 0.7 * p, r_ref = r - 0.7 * q;
          const auto z_ref = diagonal ? d * r_ref : r_ref;
          sp::detail::force_portable_kernels() = portable;
          const auto dots = sp::detail::cg_update(x, r, p, q, 0.7, d, z);
          sp::detail::force_portable_kernels() = false;
          const double rr = at::dot(r_ref.to(at::kDouble), r_ref.to(at::kDouble)).item<double>();
          const double rz = at::dot(r_ref.to(at::kDouble), z_ref.to(at::kDouble)).item<double>();
          CHECK(gap(x, x_ref) < tol);
          CHECK(gap(r, r_ref) < tol);
          if (diagonal) CHECK(gap(z, z_ref) < tol);
          CHECK(std::abs(dots[1].real() - rr) < tol * (1 + rr));
          CHECK(std::abs(dots[0].real() - rz) < tol * (1 + std::abs(rz)));
        }
      }
    }
  }
}

TEST_CASE("generic vector updates equal the native fused kernels", "[sparse][kernels][unit]") {
  for (auto dtype : {at::kDouble, at::kComplexDouble, at::kFloat})
  for (const bool portable : {false, true}) {
    CAPTURE(c10::toString(dtype), portable);
    sp::detail::force_portable_kernels() = portable;
    // float32: the native passes sum in double lanes, the generic ones in float32.
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
    const std::int64_t n = 37;
    std::vector<at::Tensor> v;
    for (std::uint64_t s = 0; s < 10; ++s) v.push_back(random_like({n}, dtype, 10 + s));
    const auto d = random_like({n}, dtype, 30);
    const auto copies = [&] {
      std::vector<at::Tensor> c;
      for (const auto& t : v) c.push_back(t.clone());
      return c;
    };
    const auto same = [&](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(gap(a[i], b[i]) < tol);
    };
    const auto close = [&](auto a, auto b) {
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) < 100 * tol * (1 + std::abs(a[i])));
    };
    for (bool diagonal : {false, true}) {
      CAPTURE(diagonal);
      const auto dd = diagonal ? d : at::Tensor();
      auto n1 = copies(), g1 = copies();
      const auto on = sp::detail::cg_update(n1[0], n1[1], n1[2], n1[3], 0.7, dd, n1[4]);
      const auto og = [&] {
        const Kernels forced(true);
        return sp::detail::cg_update(g1[0], g1[1], g1[2], g1[3], 0.7, dd, g1[4]);
      }();
      close(on, og);
      same(diagonal ? n1 : std::vector<at::Tensor>(n1.begin(), n1.begin() + 4),
           diagonal ? g1 : std::vector<at::Tensor>(g1.begin(), g1.begin() + 4));
      for (bool identity : {false, true}) {
        CAPTURE(identity);
        auto n2 = copies(), g2 = copies();
        close(sp::detail::cgcg_update(n2[0], n2[1], n2[2], n2[3], n2[4], n2[5], 0.3, 0.6, dd, identity),
              [&] {
                const Kernels forced(true);
                return sp::detail::cgcg_update(g2[0], g2[1], g2[2], g2[3], g2[4], g2[5], 0.3, 0.6, dd, identity);
              }());
        same(n2, g2);
        auto n3 = copies(), g3 = copies();
        close(sp::detail::pipecg_update(n3[0], n3[1], n3[2], n3[3], n3[4], n3[5], n3[6], n3[7], n3[8], n3[9], 0.3,
                                        0.6, dd, identity),
              [&] {
                const Kernels forced(true);
                return sp::detail::pipecg_update(g3[0], g3[1], g3[2], g3[3], g3[4], g3[5], g3[6], g3[7], g3[8], g3[9],
                                                 0.3, 0.6, dd, identity);
              }());
        same(n3, g3);
      }
    }
    auto n4 = copies(), g4 = copies();
    const auto a4 = sp::detail::axpby_norm(0.4, n4[0], -1.5, n4[1]);
    const auto b4 = [&] {
      const Kernels forced(true);
      return sp::detail::axpby_norm(0.4, g4[0], -1.5, g4[1]);
    }();
    CHECK(std::abs(a4 - b4) < 100 * tol * a4);
    same(n4, g4);
    sp::detail::force_portable_kernels() = false;
  }
  // The block kernels, one column stopped.
  const std::int64_t n = 23, k = 5;
  std::vector<at::Tensor> b;
  for (std::uint64_t s = 0; s < 6; ++s) b.push_back(random_like({n, k}, at::kDouble, 40 + s));
  const auto d = random_like({n}, at::kDouble, 50).abs() + 0.5;
  const std::vector<double> alpha{0.1, 0.2, 0.0, 0.4, 0.5}, beta{0.9, 0.8, 0.0, 0.6, 0.5};
  const std::vector<char> active{1, 1, 0, 1, 1};
  const auto run = [&](bool generic) {
    const Kernels forced(generic);
    std::vector<at::Tensor> c;
    for (const auto& t : b) c.push_back(t.clone());
    std::vector<double> out = sp::detail::block_dots(c[0], c[1]);
    for (auto v : sp::detail::block_cg_update(c[1], c[3], alpha, d)) out.push_back(v);
    sp::detail::block_cg_direction(c[0], c[2], c[4], d, alpha, beta, active);
    for (auto v : sp::detail::block_cgcg_update(c[0], c[1], c[2], c[3], c[4], c[5], alpha, beta, d, false))
      out.push_back(v);
    for (auto v : sp::detail::block_cgcg_update(c[0], c[1], c[2], c[3], c[4], c[5], alpha, beta, {}, true))
      out.push_back(v);
    return std::make_pair(out, c);
  };
  const auto [native_dots, native_blocks] = run(false);
  const auto [generic_dots, generic_blocks] = run(true);
  REQUIRE(native_dots.size() == generic_dots.size());
  for (std::size_t i = 0; i < native_dots.size(); ++i)
    CHECK(std::abs(native_dots[i] - generic_dots[i]) < 1e-10 * (1 + std::abs(native_dots[i])));
  for (std::size_t i = 0; i < native_blocks.size(); ++i) CHECK(gap(native_blocks[i], generic_blocks[i]) < 1e-12);
}

TEST_CASE("Gram–Schmidt sweeps over a basis in the solve's dtype or a reduced one equal torch's products",
          "[sparse][kernels][unit]") {
  const std::int64_t n = 9000, rows = 6;  // two whole tiles of 4096 and a partial one
  for (const auto dtype : {at::kDouble, at::kComplexDouble, at::kFloat}) {
    for (const bool reduced : {false, true}) {
      const auto basis = random_like({rows + 1, n}, dtype, 60).to(sp::detail::basis_dtype(dtype, reduced));
      const auto w0 = random_like({n}, dtype, 61);
      const auto coef_t = random_like({rows}, dtype, 62);
      const auto coef = sp::detail::host_complex(coef_t);
      // The reference in the solve's dtype from the stored (rounded) basis.
      const auto v = basis.narrow(0, 0, rows).to(dtype);
      const auto updated = w0 - at::mv(v.t(), coef_t);
      const auto ref = sp::detail::host_complex(at::cat({at::mv(v.conj(), updated), at::vdot(updated, updated).reshape({1})}));
      const double tol = dtype == at::kFloat ? 1e-4 : 1e-11;  // relative to the values (w's about 10)
      const auto near = [&](std::complex<double> a, std::complex<double> b) { return std::abs(a - b) <= tol * (1 + std::abs(b)); };
      // Native with each instruction set (AVX2 where the CPU has it, and portable), and generic.
      for (const int path : {0, 1, 2}) {
        const bool generic = path == 2;
        CAPTURE(c10::toString(dtype), reduced, path);
        const Kernels forced(generic);
        sp::detail::force_portable_kernels() = path == 1;
        auto w = w0.clone();
        std::vector<std::complex<double>> dots(static_cast<std::size_t>(rows + 1));
        sp::detail::gram_schmidt_sweep(basis, rows, w, coef.data(), dots.data());
        CHECK(gap(w, updated) < 10 * tol);
        for (std::size_t i = 0; i < dots.size(); ++i) CHECK(near(dots[i], ref[i]));
        // Dots alone, then an update alone (coefficients only), of a fresh w.
        auto u = w0.clone();
        std::vector<std::complex<double>> first(static_cast<std::size_t>(rows + 1));
        sp::detail::gram_schmidt_sweep(basis, rows, u, nullptr, first.data());
        CHECK(at::equal(u, w0));
        CHECK(near(first[rows], sp::detail::host_complex(at::vdot(w0, w0).reshape({1}))[0]));
        sp::detail::gram_schmidt_sweep(basis, rows, u, coef.data(), nullptr);
        sp::detail::force_portable_kernels() = false;
        CHECK(gap(u, updated) < 10 * tol);
      }
    }
  }
}

TEST_CASE("generic distributed products equal the native ones, with the halo and gradients", "[sparse][kernels]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 11, ny = 7;  // 77 rows: uneven shards, the last empty at 8 ranks
  const auto coo = es::testing::unsymmetric_with_duplicates(nx * ny);
  const auto dense = es::testing::dense(coo);
  const auto x = random_vector(coo.n, 3), X = at::stack({x, random_vector(coo.n, 4), random_vector(coo.n, 5)}, 1);
  const auto share = es::testing::my_share(coo);
  for (bool generic : {false, true}) {
    CAPTURE(generic);
    const Kernels forced(generic);
    const auto values = share.values.clone().requires_grad_(true);
    const auto D = es::testing::assemble(share, values, mesh);
    CHECK(relative_error(D.matvec(D.scatter(x)).full_tensor(), at::mv(dense, x)) < 1e-13);
    CHECK(relative_error(D.rmatvec(D.scatter(x)).full_tensor(), at::mv(dense.t(), x)) < 1e-13);
    const auto Y = D.apply_block(D.scatter(X).local());
    CHECK(relative_error(sp::DVector(D.layout(), Y).full_tensor(), at::mm(dense, X)) < 1e-13);
    // The solvers' product with its fused dot and the update form.
    const auto xl = D.scatter(x).local();
    auto y = at::empty_like(xl);
    const auto dot = D.apply(xl, y, xl);
    double total = dot.real();
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(std::abs(total - at::dot(x, at::mv(dense, x)).item<double>()) < 1e-10);
    // Gradients through the halo in values and x.
    const auto xg = D.scatter(x).local().clone().requires_grad_(true);
    const auto w = random_vector(coo.n, 9);
    const auto loss = (D.matvec(sp::DVector(D.layout(), xg)).local() * D.scatter(w).local()).sum();
    loss.backward();
    const auto grad_x = sp::DVector(D.layout(), xg.grad()).full_tensor();
    CHECK(relative_error(grad_x, at::mv(dense.t(), w)) < 1e-13);
    const auto expect_values = w.index_select(0, share.rows) * x.index_select(0, share.cols);
    CHECK(relative_error(values.grad(), expect_values) < 1e-13);
  }
}

TEST_CASE("every Krylov method with every device preconditioner on the generic kernels", "[sparse][kernels]") {
  const auto mesh = world_mesh();
  const std::int64_t nx = 13, ny = 9;
  const auto ref_dense = es::testing::dense(es::testing::poisson2d(nx, ny));
  const auto b = random_vector(nx * ny, 21);
  const auto ref = at::linalg_solve(ref_dense, b);
  using P = sp::Preconditioner;
  using M = sp::Method;
  struct Run {
    M method;
    sp::CgVariant variant;
  };
  const std::vector<Run> runs{{M::cg, sp::CgVariant::standard}, {M::cg, sp::CgVariant::single_reduction},
                              {M::cg, sp::CgVariant::pipelined}, {M::minres, {}}, {M::gmres, {}},
                              {M::fgmres, {}}, {M::bicgstab, {}}};
  const auto native = poisson(nx, ny, mesh);
  const auto generic = [&] {
    const Kernels forced(true);
    return poisson(nx, ny, mesh);
  }();
  for (const auto& r : runs)
    for (auto pc : {P::none, P::jacobi, P::l1_jacobi, P::chebyshev, P::neumann}) {
      CAPTURE(sp::to_string(r.method), static_cast<int>(r.variant), sp::to_string(pc));
      const sp::SolveOptions o{.method = r.method, .preconditioner = pc, .rtol = 1e-10, .cg_variant = r.variant};
      const auto sn = native.solve(native.scatter(b), o);
      const Kernels forced(true);
      const auto sg = generic.solve(generic.scatter(b), o);
      CHECK(sg.info.converged);
      CHECK(relative_error(sg.x.full_tensor(), ref) < 1e-8);
      CHECK(relative_error(sg.x.full_tensor(), sn.x.full_tensor()) < 1e-8);
      CHECK(std::abs(sg.info.iterations - sn.info.iterations) <= 2);
    }
  // Block methods: three right-hand sides, one of them zero.
  const auto B = at::stack({b, random_vector(nx * ny, 22), at::zeros({nx * ny}, at::kDouble)}, 1);
  const auto refB = at::linalg_solve(ref_dense, B);
  for (auto m : {M::cg, M::minres, M::gmres, M::bicgstab})
    for (auto pc : {P::none, P::jacobi, P::chebyshev}) {
      CAPTURE(sp::to_string(m), sp::to_string(pc));
      const Kernels forced(true);
      const auto s = generic.solve(generic.scatter(B), {.method = m, .preconditioner = pc, .rtol = 1e-10});
      CHECK(s.info.converged);
      CHECK(relative_error(s.x.full_tensor(), refB) < 1e-8);
    }
  // Least squares on a rectangular matrix, through the generic adjoint product.
  const Kernels forced(true);
  const auto R = es::testing::rectangular_13x9(mesh);
  const auto Rd = es::testing::rectangular_13x9_dense();
  const auto c = random_vector(13, 23);
  const auto lsq = std::get<0>(at::linalg_lstsq(Rd, c.unsqueeze(1))).squeeze(1);
  CHECK(relative_error(R.lsqr(R.scatter(c), {.atol = 1e-12, .btol = 1e-12}).x.full_tensor(), lsq) < 1e-8);
  CHECK(relative_error(R.lsmr(R.scatter(c), {.atol = 1e-12, .btol = 1e-12}).x.full_tensor(), lsq) < 1e-8);
}

TEST_CASE("the methods with passes of their own on the generic kernels equal dense references", "[sparse][kernels]") {
  // Block BiCGStab and MINRES, LSQR and LSMR, eigsh, logdet, connected components, Newton, save
  // and load onto a device, and a Matrix Market read onto one: each has arithmetic or bookkeeping
  // besides the products, which on the generic kernels is ATen operations with explicit host copies.
  const auto mesh = world_mesh();
  const std::int64_t nx = 13, ny = 9, n = nx * ny;
  const auto coo = es::testing::poisson2d(nx, ny);
  const auto A = es::testing::dense(coo);
  const Kernels forced(true);
  const auto D = poisson(nx, ny, mesh);
  REQUIRE(sp::kernels_for(D.values()) == "generic");
  using P = sp::Preconditioner;
  const auto B = at::stack({random_vector(n, 31), random_vector(n, 32), at::zeros({n}, at::kDouble)}, 1);
  const auto refB = at::linalg_solve(A, B);
  for (auto m : {sp::Method::bicgstab, sp::Method::minres})
    for (auto pc : {P::none, P::jacobi, P::neumann}) {  // neumann: a general M, its own pass
      CAPTURE(sp::to_string(m), sp::to_string(pc));
      const auto s = D.solve(D.scatter(B), {.method = m, .preconditioner = pc, .rtol = 1e-10});
      CHECK(s.info.converged);
      CHECK(relative_error(s.x.full_tensor(), refB) < 1e-8);
    }
  // Damped least squares: min ‖A x − c‖² + damp² ‖x‖², the dense normal equations' solution.
  const auto R = es::testing::rectangular_13x9(mesh);
  const auto Rd = es::testing::rectangular_13x9_dense();
  const auto c = random_vector(13, 33);
  const double damp = 0.5;
  const auto damped = at::linalg_solve(at::mm(Rd.t(), Rd) + damp * damp * at::eye(9, at::kDouble), at::mv(Rd.t(), c));
  const sp::LeastSquaresOptions lo{.damp = damp, .atol = 1e-12, .btol = 1e-12};
  CHECK(relative_error(R.lsqr(R.scatter(c), lo).x.full_tensor(), damped) < 1e-8);
  CHECK(relative_error(R.lsmr(R.scatter(c), lo).x.full_tensor(), damped) < 1e-8);
  // eigsh: the largest algebraic and the smallest magnitude (block CG inside) against eigh.
  const auto spectrum = at::linalg_eigvalsh(A);
  const auto la = D.eigsh({.k = 3, .which = sp::Which::largest_algebraic, .tol = 1e-9});
  CHECK(la.converged);
  CHECK(max_abs(la.eigenvalues - spectrum.flip(0).narrow(0, 0, 3)) < 1e-7);
  const auto sm = D.eigsh({.k = 2, .which = sp::Which::smallest_magnitude, .tol = 1e-9});
  CHECK(sm.converged);
  CHECK(max_abs(sm.eigenvalues - spectrum.narrow(0, 0, 2)) < 1e-7);
  // logdet: the native kernels' estimate from the same probes, near the exact value.
  const sp::LogdetOptions lg{.probes = 16, .lanczos_steps = 25, .seed = 5};
  const double exact = std::get<1>(at::linalg_slogdet(A)).item<double>();
  const double generic_estimate = D.logdet(lg).item<double>();
  const double native_estimate = [&] {
    const Kernels native(false);
    return poisson(nx, ny, mesh).logdet(lg).item<double>();
  }();
  CHECK(std::abs(generic_estimate - native_estimate) < 1e-9 * std::abs(exact));
  CHECK(std::abs(generic_estimate - exact) < 0.05 * std::abs(exact));
  // Connected components: rows i and i + 1 joined unless i + 1 is a multiple of 5 (labels i / 5).
  {
    const auto share = es::testing::my_share(es::testing::Coo{at::ones({n - 1}, at::kDouble), at::arange(n - 1),
                                                              at::arange(1, n), n});
    const auto keep = (at::remainder(share.cols, 5) != 0).nonzero().flatten();
    const auto G = sp::DSparseTensor::from_local(share.values.index_select(0, keep), share.rows.index_select(0, keep),
                                                 share.cols.index_select(0, keep), {n, n}, mesh);
    const auto comp = G.connected_components();
    CHECK(comp.count == (n + 4) / 5);
    CHECK(at::equal(comp.labels.full_tensor(), at::div(at::arange(n), 5, "floor")));
  }
  // Newton on A u + u³ = b against a dense Newton iteration.
  const auto b = random_vector(n, 34);
  const auto g = [b_local = D.scatter(b).local()](const at::Tensor& u) { return u.pow(3) - b_local; };
  const auto dg = [](const at::Tensor& u) { return 3 * u.square(); };
  const auto newton = D.nonlinear_solve(g, dg, D.zeros(), {.rtol = 1e-11, .linear_rtol = 1e-12, .preconditioner = P::jacobi});
  CHECK(newton.info.converged);
  auto u = at::zeros({n}, at::kDouble);
  for (int it = 0; it < 30; ++it)
    u -= at::linalg_solve(A + at::diag(3 * u.square()), at::mv(A, u) + u.pow(3) - b);
  CHECK(relative_error(newton.u.full_tensor(), u) < 1e-8);
  // Save from the generic matrix, load with the device option; a Matrix Market read likewise.
  long id = static_cast<long>(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const auto dir = std::filesystem::temp_directory_path() / ("einshard_generic_" + std::to_string(id));
  if (es::testing::world().rank == 0) {
    std::filesystem::create_directories(dir);
    sp::write_matrix_market((dir / "a.mtx").string(), sp::SparseTensor(coo.values, coo.rows, coo.cols, {n, n}));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  D.save((dir / "saved").string());
  const auto x = random_vector(n, 35);
  const auto loaded = sp::DSparseTensor::load((dir / "saved").string(), mesh, {.device = at::kCPU});
  const auto read = sp::read_matrix_market((dir / "a.mtx").string(), mesh, {}, {.device = at::kCPU});
  for (const auto* M : {&loaded, &read}) {
    CHECK(sp::kernels_for(M->values()) == "generic");
    CHECK(relative_error(M->matvec(M->scatter(x)).full_tensor(), at::mv(A, x)) < 1e-13);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (es::testing::world().rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("tensors on another device: the same error on every rank", "[sparse][kernels][faults]") {
  const auto mesh = world_mesh();
  const auto coo = es::testing::my_share(es::testing::poisson2d(5, 4));
  // Rank 0 passes values without data (the meta device stands for a device this rank alone uses).
  const bool odd_one = es::testing::world().rank == 0;
  const auto values = odd_one ? at::empty({coo.values.numel()}, coo.values.options().device(at::kMeta)) : coo.values;
  const auto message = es::testing::collective_error(
      [&] { (void)sp::DSparseTensor::from_local(values, coo.rows, coo.cols, {20, 20}, mesh); }, MPI_COMM_WORLD);
  CHECK_THAT(message, Catch::Contains("DSparseTensor::from_local"));
  CHECK_THAT(message, Catch::Contains("meta"));
  // The host-only preconditioners name the device ones.
  const sp::Csr meta{2, 2, at::zeros({3}, at::kLong), at::zeros({0}, at::kInt),
                     at::empty({0}, at::TensorOptions(at::kDouble).device(at::kMeta))};
  const sp::detail::LocalRows rows{meta, 2, MPI_COMM_SELF};
  for (auto pc : {sp::Preconditioner::block_jacobi, sp::Preconditioner::ssor}) {
    CAPTURE(sp::to_string(pc));
    CHECK_THROWS_WITH(sp::detail::make_preconditioner(pc, rows, {}, {}),
                      Catch::Contains("runs on the host only") && Catch::Contains("found a matrix on meta") &&
                          Catch::Contains("jacobi, l1_jacobi, chebyshev, neumann, smoothed_aggregation or amg"));
  }
}

}  // namespace test_kernels
