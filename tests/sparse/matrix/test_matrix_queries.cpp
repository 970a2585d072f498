// Matrix queries and determinants: T(), H(), is_symmetric/is_hermitian, full_tensor, det, svd,
// condition_number and logdet (stochastic Lanczos quadrature) against dense one-process results;
// logdet against the same estimate on one process (rank-invariant probes) and the exact value.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "operations_support.hpp"

namespace test_matrix_queries {

namespace es = einshard;
namespace sp = einshard::sparse;
using es::testing::Coo;

namespace {

using es::testing::max_abs;

/// The same matrix on this process alone (the one-process reference run of a distributed op).
sp::DSparseTensor on_one_process(const Coo& a) {
  return sp::DSparseTensor::partition(sp::SparseTensor(a.values, a.rows, a.cols, {a.n, a.n}),
                                      es::Mesh(MPI_COMM_SELF, {1}, {"x"}));
}

}  // namespace

TEST_CASE("T() and H() are the transposes with the same partition; full_tensor is the matrix", "[sparse][queries]") {
  const auto mesh = es::testing::world_mesh();
  using M = sp::PartitionMethod;
  auto coo = es::testing::unsymmetric_with_duplicates(40);
  const auto coords = at::rand({40, 2}, at::make_generator<at::CPUGeneratorImpl>(2), at::kDouble);
  for (auto method : {M::simple, M::rcb}) {
    const auto D = es::testing::distribute(coo, mesh, method, coords);
    const auto A = es::testing::dense(coo);
    CHECK(max_abs(D.full_tensor() - A) == 0.0);
    const auto x = es::testing::random_vector(40, 5);
    const auto t = D.T();
    CHECK(at::equal(t.layout()->owned(), D.layout()->owned()));
    CHECK(max_abs(t.matvec(t.scatter(x)).full_tensor() - A.transpose(0, 1).mv(x)) < 1e-12);
    CHECK(max_abs(t.T().matvec(D.scatter(x)).full_tensor() - A.mv(x)) < 1e-12);
    CHECK(max_abs(t.full_tensor() - A.transpose(0, 1)) == 0.0);
    CHECK_FALSE(D.is_symmetric());
  }
}

TEST_CASE("is_symmetric / is_hermitian: values and patterns, real and complex", "[sparse][queries]") {
  const auto mesh = es::testing::world_mesh();
  const auto coords = es::testing::grid_coords(5, 4);
  for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb}) {
    auto coo = es::testing::poisson2d(5, 4);
    CHECK(es::testing::distribute(coo, mesh, method, coords).is_symmetric());
    CHECK(es::testing::distribute(coo, mesh, method, coords).is_hermitian());
    // One entry without its transpose: structurally unsymmetric.
    Coo one = coo;
    one.values = at::cat({coo.values, at::ones({1}, at::kDouble)});
    one.rows = at::cat({coo.rows, at::full({1}, 0, at::kLong)});
    one.cols = at::cat({coo.cols, at::full({1}, 19, at::kLong)});
    CHECK_FALSE(es::testing::distribute(one, mesh, method, coords).is_symmetric());
    CHECK(es::testing::distribute(one, mesh, method, coords).is_symmetric(1.0 + 1e-12, 0.0));  // within atol
    // Complex Hermitian B + B^H: Hermitian, not symmetric; H() is A^H.
    const auto B = es::testing::dense(coo).to(at::kComplexDouble) *
                   at::complex(at::ones({20, 20}, at::kDouble), at::rand({20, 20}, at::make_generator<at::CPUGeneratorImpl>(1), at::kDouble));
    const auto A = B + B.conj().transpose(0, 1);
    const auto nz = A.nonzero();
    const Coo h{A.index({nz.select(1, 0), nz.select(1, 1)}), nz.select(1, 0).contiguous(), nz.select(1, 1).contiguous(), 20};
    const auto D = es::testing::distribute(h, mesh, method, coords);
    CHECK(D.is_hermitian());
    CHECK_FALSE(D.is_symmetric());
    const auto x = at::complex(es::testing::random_vector(20, 3), es::testing::random_vector(20, 4));
    CHECK(max_abs(D.H().matvec(D.scatter(x)).full_tensor() - A.conj().transpose(0, 1).mv(x)) < 1e-12);
  }
}

TEST_CASE("det, svd, condition_number gather to one rank and match dense LAPACK", "[sparse][queries]") {
  const auto mesh = es::testing::world_mesh();
  const auto coo = es::testing::unsymmetric_with_duplicates(12);
  const auto A = es::testing::dense(coo);
  const auto D = es::testing::distribute(coo, mesh, sp::PartitionMethod::simple, {});
  const auto det = at::linalg_det(A).item<double>();
  CHECK(std::abs(D.det() - det) <= 1e-10 * std::abs(det));
  const auto s = at::linalg_svdvals(A);
  CHECK(max_abs(D.svd(3) - s.narrow(0, 0, 3)) < 1e-10);
  CHECK(D.svd(100).numel() == 12);
  CHECK(std::abs(D.condition_number() - (s.max() / s.min()).item<double>()) < 1e-8);
  const auto bad_k = es::testing::error_of([&] { (void)D.svd(0); });
  CHECK(bad_k.find("DSparseTensor::svd: expected k >= 1, found 0") != std::string::npos);
  CHECK(es::testing::agrees_on_every_rank(bad_k));
}

TEST_CASE("det refuses a rectangular matrix on every rank; svd, condition_number and full_tensor take it",
          "[sparse][queries]") {
  const auto mesh = es::testing::world_mesh();
  const auto D = es::testing::rectangular_13x9(mesh);
  const auto A = es::testing::rectangular_13x9_dense();
  const std::int64_t n = 9;
  CHECK(max_abs(D.full_tensor() - A) == 0.0);
  const auto det = es::testing::error_of([&] { (void)D.det(); });
  CHECK(det.find("DSparseTensor::det: expected a square matrix, found shape (13, 9)") != std::string::npos);
  CHECK(es::testing::agrees_on_every_rank(det));
  const auto s = at::linalg_svdvals(A);
  CHECK(D.svd(100).numel() == n);
  CHECK(max_abs(D.svd(4) - s.narrow(0, 0, 4)) < 1e-10);
  CHECK(std::abs(D.condition_number() - (s.max() / s.min()).item<double>()) < 1e-8 * (s.max() / s.min()).item<double>());
}

TEST_CASE("logdet: stochastic Lanczos quadrature, rank-invariant, near the exact value, with gradient", "[sparse][queries][logdet]") {
  const auto mesh = es::testing::world_mesh();
  const auto coo = es::testing::poisson2d(8, 6);
  const auto A = es::testing::dense(coo);
  const double exact = std::get<1>(at::linalg_slogdet(A)).item<double>();
  const sp::LogdetOptions options{.probes = 24, .lanczos_steps = 25, .seed = 3};
  const auto one = on_one_process(coo);
  const auto one_values = one.values().detach().clone().requires_grad_(true);
  const auto reference = one.with_values(one_values).logdet(options);
  reference.backward();
  for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb}) {
    const auto D0 = es::testing::distribute(coo, mesh, method, es::testing::grid_coords(8, 6));
    const auto values = D0.values().detach().clone().requires_grad_(true);
    const auto D = D0.with_values(values);
    const auto ld = D.logdet(options);
    CHECK(ld.dim() == 0);
    // The same probes at any world size: the one-process estimate, to rounding.
    CHECK(std::abs(ld.item<double>() - reference.item<double>()) < 1e-9 * std::abs(exact));
    CHECK(std::abs(ld.item<double>() - exact) < 0.05 * std::abs(exact));
    ld.backward();
    REQUIRE(values.grad().defined());
    // Gradient: the one-process estimate entry by entry (matched through global indices), and
    // close in direction to the exact A^{-T} on the pattern.
    const auto mine = sp::detail::global_entries(D);
    const auto theirs = sp::detail::global_entries(one);
    const auto key = [&](const sp::detail::CooEntries& t) { return t.rows * coo.n + t.cols; };
    const auto pos = at::searchsorted(key(theirs), key(mine));  // one-process entries are sorted
    CHECK(max_abs(values.grad() - one_values.grad().index_select(0, pos)) < 1e-6);
    const auto inv = at::linalg_inv(A).transpose(0, 1);
    const auto truth = inv.index({mine.rows, mine.cols});
    auto dots = at::stack({(values.grad() * truth).sum(), values.grad().square().sum(), truth.square().sum()}).contiguous();
    MPI_Allreduce(MPI_IN_PLACE, dots.data_ptr<double>(), 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const auto* d = dots.data_ptr<double>();
    CHECK(d[0] / std::sqrt(d[1] * d[2]) > 0.9);
  }
  const auto bad = es::testing::error_of([&] { (void)on_one_process(coo).logdet({.probes = 0}); });
  CHECK(bad.find("logdet: expected probes >= 1") != std::string::npos);
}

}  // namespace test_matrix_queries
