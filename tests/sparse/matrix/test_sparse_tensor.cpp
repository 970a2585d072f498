// sparse::SparseTensor on one process: every operation against the same computation on the dense
// matrix with torch, including gradients of the products.

#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "einshard/sparse.hpp"

namespace test_sparse_tensor {

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

struct Coo {
  at::Tensor values, row, col;
  std::int64_t rows, cols;
};

/// A random unsymmetric (rows, cols) COO with repeated (row, col) pairs, each entry listed twice
/// for a third of them, so assembly must sum duplicates.
Coo random_coo(std::int64_t rows, std::int64_t cols, std::int64_t count, at::ScalarType dtype,
               std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto row = at::randint(rows, {count}, gen, at::kLong);
  auto col = at::randint(cols, {count}, gen, at::kLong);
  auto values = at::randn({count}, gen, at::TensorOptions().dtype(at::kDouble)) + 0.5;
  if (at::isComplexType(dtype))
    values = at::complex(values, at::randn({count}, gen, at::TensorOptions().dtype(at::kDouble)));
  values = values.to(dtype);
  const auto dup = at::arange(0, count, 3, at::kLong);
  return {at::cat({values, values.index_select(0, dup) * 0.25}),
          at::cat({row, row.index_select(0, dup)}), at::cat({col, col.index_select(0, dup)}), rows,
          cols};
}

/// The dense matrix of a COO, duplicates summed, built by torch alone.
at::Tensor dense_of(const Coo& c) {
  return at::zeros({c.rows, c.cols}, c.values.options())
      .index_put({c.row, c.col}, c.values, /*accumulate=*/true);
}

sp::SparseTensor sparse_of(const Coo& c) { return {c.values, c.row, c.col, {c.rows, c.cols}}; }

double tolerance(at::ScalarType t) {
  return (t == at::kFloat || t == at::kComplexFloat) ? 1e-5 : 1e-12;
}

bool close(const at::Tensor& a, const at::Tensor& b, double tol) {
  if (a.sizes() != b.sizes()) return false;
  return at::allclose(a, b.to(a.scalar_type()), tol, tol);
}

const std::array<at::ScalarType, 4> all_dtypes{at::kFloat, at::kDouble, at::kComplexFloat,
                                               at::kComplexDouble};

}  // namespace

TEST_CASE("SparseTensor: COO assembly sums duplicates, coalesced accessors", "[sparse][unit]") {
  for (const auto dtype : all_dtypes) {
    INFO(c10::toString(dtype));
    const auto c = random_coo(13, 9, 60, dtype, 1);
    const auto a = sparse_of(c);
    const auto dense = dense_of(c);
    CHECK(a.shape() == std::array<std::int64_t, 2>{13, 9});
    CHECK(a.rows() == 13);
    CHECK(a.cols() == 9);
    CHECK(a.dtype() == dtype);
    CHECK(close(a.to_dense(), dense, tolerance(dtype)));
    // One stored entry per distinct (row, col), in row-major order.
    const auto key = c.row * 9 + c.col;
    const auto distinct = std::get<0>(at::_unique(key)).numel();
    CHECK(a.nnz() == distinct);
    const auto ak = a.row_indices() * 9 + a.col_indices();
    CHECK(ak.numel() == distinct);
    CHECK(at::equal(ak, std::get<0>(ak.sort())));
    CHECK(at::equal(ak, std::get<0>(at::unique_consecutive(ak))));
    CHECK(close(a.values(), dense.index({a.row_indices(), a.col_indices()}), tolerance(dtype)));
    CHECK(a.row_indices().scalar_type() == at::kLong);
    CHECK(a.col_indices().scalar_type() == at::kLong);
  }
}

TEST_CASE("SparseTensor: from_dense, from_csr, to(dtype)", "[sparse][unit]") {
  const auto c = random_coo(7, 11, 30, at::kDouble, 2);
  const auto dense = dense_of(c);
  const auto a = sp::SparseTensor::from_dense(dense);
  CHECK(at::equal(a.to_dense(), dense));
  CHECK(a.nnz() == dense.ne(0).sum().item<std::int64_t>());
  const auto b = sp::SparseTensor::from_csr(sparse_of(c).csr());
  CHECK(at::equal(b.to_dense(), a.to_dense()));
  const auto f = a.to(at::kFloat);
  CHECK(f.dtype() == at::kFloat);
  CHECK(close(f.to_dense(), dense, 1e-6));
  CHECK_THROWS_AS(a.to(at::kInt), es::Error);
  CHECK_THROWS_AS(sp::SparseTensor::from_dense(at::ones({3})), es::Error);
  sp::Csr bad = b.csr();
  bad.rowptr = bad.rowptr.slice(0, 0, 3);
  CHECK_THROWS_AS(sp::SparseTensor::from_csr(bad), es::Error);
  const sp::SparseTensor none;
  CHECK(none.shape() == std::array<std::int64_t, 2>{0, 0});
  CHECK(none.nnz() == 0);
  CHECK(none.to_dense().sizes() == at::IntArrayRef{0, 0});
  // A matrix without stored entries.
  const sp::SparseTensor empty(at::zeros({0}, at::kDouble), at::zeros({0}, at::kLong),
                               at::zeros({0}, at::kLong), {4, 3});
  CHECK(empty.nnz() == 0);
  CHECK(at::equal(empty.to_dense(), at::zeros({4, 3}, at::kDouble)));
  CHECK(at::equal(empty.matvec(at::ones({3}, at::kDouble)), at::zeros({4}, at::kDouble)));
}

TEST_CASE("SparseTensor: bad input raises einshard::Error", "[sparse][unit]") {
  const auto v = at::ones({3}, at::kDouble);
  const auto i = at::tensor(std::vector<std::int64_t>{0, 1, 2});
  CHECK_NOTHROW(sp::SparseTensor(v, i, i, {3, 3}));
  CHECK_THROWS_AS(sp::SparseTensor(v, i, i, {2, 3}), es::Error);  // row 2 out of range
  CHECK_THROWS_AS(sp::SparseTensor(v, i, i, {3, 2}), es::Error);  // col 2 out of range
  CHECK_THROWS_AS(sp::SparseTensor(v, i - 1, i, {3, 3}), es::Error);  // row -1
  CHECK_THROWS_AS(sp::SparseTensor(v, i, i - 1, {3, 3}), es::Error);  // col -1
  CHECK_THROWS_AS(sp::SparseTensor(v, i.slice(0, 0, 2), i, {3, 3}), es::Error);
  CHECK_THROWS_AS(sp::SparseTensor(v, i.to(at::kDouble), i, {3, 3}), es::Error);
  CHECK_THROWS_AS(sp::SparseTensor(v.to(at::kInt), i, i, {3, 3}), es::Error);
  CHECK_THROWS_AS(sp::SparseTensor(v.to(at::kHalf), i, i, {3, 3}), es::Error);
  CHECK_THROWS_AS(sp::SparseTensor(v, i, i, {-1, 3}), es::Error);
  const sp::SparseTensor a(v, i, i, {3, 3});
  CHECK_THROWS_AS(a.matvec(at::ones({4}, at::kDouble)), es::Error);
  CHECK_THROWS_AS(a.matvec(at::ones({3, 2, 1}, at::kDouble)), es::Error);
  CHECK_THROWS_AS(a.rmatvec(at::ones({2}, at::kDouble)), es::Error);
  CHECK_THROWS_AS(a.sum(2), es::Error);
  CHECK_THROWS_AS(a.norm("2"), es::Error);
  const sp::SparseTensor e(v.slice(0, 0, 0), i.slice(0, 0, 0), i.slice(0, 0, 0), {3, 3});
  CHECK_THROWS_AS(e.max(), es::Error);
  CHECK_THROWS_AS(e.min(), es::Error);
}

TEST_CASE("SparseTensor: matvec, rmatvec and transpose against dense", "[sparse][unit]") {
  for (const auto dtype : all_dtypes) {
    INFO(c10::toString(dtype));
    const auto c = random_coo(17, 12, 80, dtype, 3);
    const auto a = sparse_of(c);
    const auto dense = dense_of(c);
    const auto tol = tolerance(dtype);
    const auto opts = at::TensorOptions().dtype(dtype);
    const auto x = at::randn({12}, opts), y = at::randn({17}, opts);
    CHECK(close(a.matvec(x), at::mv(dense, x), tol));
    CHECK(close(a * x, at::mv(dense, x), tol));
    CHECK(close(a.rmatvec(y), at::mv(dense.t(), y), tol));
    const auto xs = at::randn({12, 3}, opts), ys = at::randn({17, 4}, opts);
    CHECK(close(a.matvec(xs), at::mm(dense, xs), tol));
    CHECK(close(a.rmatvec(ys), at::mm(dense.t(), ys), tol));
    // Strided columns of a multi-vector.
    const auto xt = at::randn({3, 12}, opts).t();
    CHECK(close(a.matvec(xt), at::mm(dense, xt), tol));

    const auto t = a.transpose();
    CHECK(t.shape() == std::array<std::int64_t, 2>{12, 17});
    CHECK(close(t.to_dense(), dense.t(), tol));
    CHECK(close(t.matvec(y), a.rmatvec(y), tol));
    CHECK(at::equal(t.transpose().to_dense(), a.to_dense()));
    CHECK(close(a.adjoint().to_dense(), dense.t().conj(), tol));
  }
  // Mixed dtypes promote as torch does.
  const auto c = random_coo(6, 6, 20, at::kFloat, 4);
  const auto x = at::randn({6}, at::kDouble);
  const auto y = sparse_of(c).matvec(x);
  CHECK(y.scalar_type() == at::kDouble);
  CHECK(close(y, at::mv(dense_of(c).to(at::kDouble), x), 1e-6));
}

TEST_CASE("SparseTensor: matvec and rmatvec gradients equal dense torch's", "[sparse][autograd][unit]") {
  for (const auto dtype : all_dtypes) {
    for (const bool transposed : {false, true}) {
      for (const std::int64_t k : {0, 3}) {
        INFO(c10::toString(dtype) << (transposed ? " rmatvec" : " matvec") << " k=" << k);
        const auto c = random_coo(9, 7, 40, dtype, 5);
        const auto opts = at::TensorOptions().dtype(dtype);
        const std::int64_t in = transposed ? 9 : 7;
        const auto x0 = k == 0 ? at::randn({in}, opts) : at::randn({in, k}, opts);
        // Sparse side: gradients flow to the COO values (through the duplicate summation).
        auto v1 = c.values.clone().requires_grad_();
        auto x1 = x0.clone().requires_grad_();
        const sp::SparseTensor a(v1, c.row, c.col, {9, 7});
        const auto y1 = transposed ? a.rmatvec(x1) : a.matvec(x1);
        const auto probe = at::randn(y1.sizes(), opts);
        at::real(y1 * probe).sum().backward();
        // Dense side.
        auto v2 = c.values.clone().requires_grad_();
        auto x2 = x0.clone().requires_grad_();
        const Coo c2{v2, c.row, c.col, 9, 7};
        const auto d = dense_of(c2);
        const auto m = transposed ? d.t() : d;
        const auto y2 = k == 0 ? at::mv(m, x2) : at::mm(m, x2);
        at::real(y2 * probe).sum().backward();
        const auto tol = tolerance(dtype);
        CHECK(close(y1, y2, tol));
        CHECK(close(v1.grad(), v2.grad(), tol));
        CHECK(close(x1.grad(), x2.grad(), tol));
      }
    }
  }
}

TEST_CASE("SparseTensor: matvec gradient matches finite differences", "[sparse][autograd][unit]") {
  const auto c = random_coo(8, 8, 30, at::kDouble, 6);
  const auto x = at::randn({8}, at::kDouble);
  const auto probe = at::randn({8}, at::kDouble);
  const auto loss = [&](const at::Tensor& v, const at::Tensor& xx) {
    const sp::SparseTensor a(v, c.row, c.col, {8, 8});
    return (a.matvec(xx).sin() * probe).sum();
  };
  auto v = c.values.clone().requires_grad_();
  auto xg = x.clone().requires_grad_();
  loss(v, xg).backward();
  const double h = 1e-6;
  for (std::int64_t k = 0; k < c.values.numel(); k += 5) {
    auto vp = c.values.clone(), vm = c.values.clone();
    vp[k] += h;
    vm[k] -= h;
    const double fd = (loss(vp, x) - loss(vm, x)).item<double>() / (2 * h);
    CHECK(v.grad()[k].item<double>() == Approx(fd).epsilon(1e-6).margin(1e-8));
  }
  for (std::int64_t j = 0; j < 8; ++j) {
    auto xp = x.clone(), xm = x.clone();
    xp[j] += h;
    xm[j] -= h;
    const double fd = (loss(c.values, xp) - loss(c.values, xm)).item<double>() / (2 * h);
    CHECK(xg.grad()[j].item<double>() == Approx(fd).epsilon(1e-6).margin(1e-8));
  }
}

TEST_CASE("SparseTensor: csr_matvec on a pattern with other values", "[sparse][autograd][unit]") {
  const auto c = random_coo(5, 6, 20, at::kDouble, 7);
  const auto a = sparse_of(c);
  const auto values = at::randn({a.nnz()}, at::kDouble).requires_grad_();
  const auto x = at::randn({6}, at::kDouble);
  const auto y = sp::detail::csr_matvec(a.csr(), values, x);
  CHECK(close(y, at::mv(a.with_values(values.detach()).to_dense(), x), 1e-12));
  y.sum().backward();
  const auto ones = at::ones({5}, at::kDouble);
  CHECK(close(values.grad(),
              ones.index_select(0, a.row_indices()) * x.index_select(0, a.col_indices()), 1e-12));
  CHECK_THROWS_AS(sp::detail::csr_matvec(a.csr(), values.slice(0, 1), x), es::Error);
}

TEST_CASE("SparseTensor: elementwise ops act on the stored values", "[sparse][unit]") {
  for (const auto dtype : all_dtypes) {
    INFO(c10::toString(dtype));
    const auto c = random_coo(10, 8, 40, dtype, 8);
    const auto a = sparse_of(c);
    const auto v = a.values();
    const auto tol = tolerance(dtype);
    const auto same = [&](const sp::SparseTensor& r, const at::Tensor& expected) {
      CHECK(r.nnz() == a.nnz());
      CHECK(at::equal(r.row_indices(), a.row_indices()));
      CHECK(at::equal(r.col_indices(), a.col_indices()));
      CHECK(close(r.values(), expected, tol));
    };
    same(a + 1.5, v + 1.5);
    same(1.5 + a, v + 1.5);
    same(a - 2, v - 2);
    same(2 - a, 2 - v);
    same(a * 3, v * 3);
    same(3.0 * a, v * 3);
    same(a / 4, v / 4);
    same(4 / a, 4 / v);
    same(-a, -v);
    same(a.abs(), v.abs());
    same(a.square(), v * v);
    same(a.exp(), v.exp());
    same(a.conj(), v.conj());
    same(a.pow(3), v * v * v);
    same(a.abs().sqrt(), v.abs().sqrt());
    same(a.abs().log(), v.abs().log());
    if (at::isComplexType(dtype)) {
      same(a.sqrt(), v.sqrt());
      same(a.log(), v.log());
    }
    // Densely: A + 1.5 is 1.5 more at the stored entries only.
    const auto mask = at::zeros({10, 8}, at::kBool).index_put({a.row_indices(), a.col_indices()},
                                                            at::ones({a.nnz()}, at::kBool));
    CHECK(close((a + 1.5).to_dense(), at::where(mask, a.to_dense() + 1.5, a.to_dense()), tol));
    // Same pattern: sum and difference.
    const auto b = a.with_values(at::randn({a.nnz()}, at::TensorOptions().dtype(dtype)));
    same(a + b, v + b.values());
    same(a - b, v - b.values());
    CHECK(close((a + b).to_dense(), a.to_dense() + b.to_dense(), tol));
    // Another pattern (or shape): an error, not a silently wrong sum.
    const auto other = sparse_of(random_coo(10, 8, 40, dtype, 9));
    CHECK_THROWS_AS(a + other, es::Error);
    CHECK_THROWS_AS(a - other, es::Error);
    CHECK_THROWS_AS(a + sparse_of(random_coo(8, 10, 40, dtype, 8)), es::Error);
    CHECK_THROWS_AS(a.with_values(v.slice(0, 1)), es::Error);
  }
}

TEST_CASE("SparseTensor: reductions over the stored values", "[sparse][unit]") {
  for (const auto dtype : all_dtypes) {
    INFO(c10::toString(dtype));
    const auto c = random_coo(11, 7, 50, dtype, 10);
    const auto a = sparse_of(c);
    const auto d = a.to_dense();
    const auto tol = tolerance(dtype);
    const auto stored = at::zeros({11, 7}, at::kDouble)
                            .index_put({a.row_indices(), a.col_indices()},
                                       at::ones({a.nnz()}, at::kDouble));
    CHECK(close(a.sum(), d.sum(), tol));
    CHECK(close(a.sum(0), d.sum(0), tol));
    CHECK(close(a.sum(-2), d.sum(0), tol));
    CHECK(close(a.sum(1), d.sum(1), tol));
    CHECK(close(a.sum(-1), d.sum(1), tol));
    CHECK(close(a.mean(), d.sum() / static_cast<double>(a.nnz()), tol));
    CHECK(close(a.mean(0), d.sum(0) / stored.sum(0).clamp_min(1), tol));
    CHECK(close(a.mean(1), d.sum(1) / stored.sum(1).clamp_min(1), tol));
    CHECK(close(a.prod(), a.values().prod(), tol));
    CHECK(close(a.norm(), at::linalg_norm(d), tol));
    CHECK(close(a.norm("fro"), at::linalg_norm(d), tol));
    CHECK(close(a.norm("1"), d.abs().sum(0).max(), tol));
    CHECK(close(a.norm("inf"), d.abs().sum(1).max(), tol));
    CHECK(a.norm().scalar_type() == at::toRealValueType(dtype));
    if (!at::isComplexType(dtype)) {
      CHECK(close(a.max(), a.values().max(), tol));
      CHECK(close(a.min(), a.values().min(), tol));
      // Over the stored values: a matrix of negative entries has a negative max, not 0.
      CHECK((-(a.abs() + 1)).max().item<double>() < 0);
    }
  }
  // Reductions are differentiable w.r.t. the values.
  const auto c = random_coo(5, 5, 12, at::kDouble, 11);
  auto v = c.values.clone().requires_grad_();
  const sp::SparseTensor a(v, c.row, c.col, {5, 5});
  (a.norm() + a.sum(0).square().sum()).backward();
  auto v2 = c.values.clone().requires_grad_();
  const auto d = dense_of({v2, c.row, c.col, 5, 5});
  (at::linalg_norm(d) + d.sum(0).square().sum()).backward();
  CHECK(close(v.grad(), v2.grad(), 1e-12));
}

TEST_CASE("SparseTensor: diagonal and symmetry", "[sparse][unit]") {
  const auto c = random_coo(9, 6, 40, at::kDouble, 12);
  const auto a = sparse_of(c);
  CHECK(at::equal(a.diagonal(), a.to_dense().diagonal()));
  CHECK_FALSE(a.is_symmetric());  // not square
  const auto sq = sparse_of(random_coo(8, 8, 40, at::kDouble, 13));
  CHECK(at::equal(sq.diagonal(), sq.to_dense().diagonal()));
  CHECK_FALSE(sq.is_symmetric());
  // A + A^T is symmetric; an explicit zero facing a missing entry is too.
  const auto s = sp::SparseTensor::from_dense(sq.to_dense() + sq.to_dense().t());
  CHECK(s.is_symmetric());
  const auto i = at::tensor(std::vector<std::int64_t>{0, 1, 2, 0});
  const auto j = at::tensor(std::vector<std::int64_t>{0, 1, 2, 2});
  const auto v = at::tensor(std::vector<double>{1, 2, 3, 0});
  CHECK(sp::SparseTensor(v, i, j, {3, 3}).is_symmetric());
  const auto v_small = at::tensor(std::vector<double>{1, 2, 3, 1e-10});
  CHECK(sp::SparseTensor(v_small, i, j, {3, 3}).is_symmetric());
  CHECK_FALSE(sp::SparseTensor(v_small, i, j, {3, 3}).is_symmetric(1e-12, 0.0));
  // Complex: Hermitian is not symmetric.
  const sp::SparseTensor z(at::tensor(std::vector<c10::complex<double>>{{1, 0}, {2, 1}, {2, -1}}),
                           at::tensor(std::vector<std::int64_t>{0, 0, 1}),
                           at::tensor(std::vector<std::int64_t>{0, 1, 0}), {2, 2});
  CHECK(z.is_hermitian());
  CHECK_FALSE(z.is_symmetric());
}

}  // namespace test_sparse_tensor
