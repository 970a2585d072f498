// The local product of a planned contraction stage (exec::matmul_form / exec::contract): equations the
// binary planner writes that are (batched) matrix products run through at::matmul, the others
// through at::einsum; values and gradients equal at::einsum's either way.

#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <vector>

#include "einshard/exec/local.hpp"

namespace test_planner_local_product {

namespace exec = einshard::exec;

namespace {

struct Case {
  std::string equation;
  std::vector<std::int64_t> x, y;
  bool matmul;
};

}  // namespace

TEST_CASE("planner local product: matrix-product equations run as at::matmul, equal to einsum",
          "[planner][local]") {
  const std::vector<Case> cases{
      {"abc,dc->abd", {2, 3, 4}, {5, 4}, true},             // linear layer (column-parallel)
      {"abc,cd->abd", {2, 3, 4}, {4, 5}, true},             // weight stored (in, out)
      {"abcd,ecd->abe", {2, 3, 4, 2}, {5, 4, 2}, true},     // two contracted axes
      {"abcd,abed->abce", {2, 3, 4, 6}, {2, 3, 5, 6}, true},  // attention scores
      {"abcd,abde->abce", {2, 3, 4, 6}, {2, 3, 6, 5}, true},  // attention values
      {"ab,b->a", {3, 4}, {4}, true},                       // matrix-vector
      {"a,a->", {4}, {4}, true},                            // dot product
      {"ab,cd->abcd", {2, 3}, {4, 5}, true},                // outer product
      {"abc,dc->abd", {2, 3, 0}, {5, 0}, true},             // empty contracted axis
      {"abc,cd->adb", {2, 3, 4}, {4, 5}, false},            // result order not (rows, columns)
      {"bac,dc->abd", {3, 2, 4}, {5, 4}, false},            // x not (batch, rows, contracted)
      {"abc,db->ad", {2, 3, 4}, {5, 3}, false},             // c summed over x alone
      {"ab,ab->ab", {2, 3}, {2, 3}, true},                  // elementwise: batch only
      {"abc,dc->abd", {2, 3, 1}, {5, 4}, true},             // broadcast contracted axis: einsum at run time
  };
  for (const auto& c : cases) {
    INFO(c.equation);
    const auto form = exec::matmul_form(c.equation);
    CHECK(form.has_value() == c.matmul);
    const auto x = at::randn(c.x, at::kDouble).requires_grad_(), y = at::randn(c.y, at::kDouble).requires_grad_();
    const auto want = at::einsum(c.equation, {x, y});
    const auto got = exec::contract(form, c.equation, x, y);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(at::allclose(got, want, 1e-12, 1e-12));
    if (want.numel() == 0) continue;
    const auto g = at::randn(want.sizes(), at::kDouble);
    const auto gw = torch::autograd::grad({want}, {x, y}, {g});
    const auto gg = torch::autograd::grad({got}, {x, y}, {g});
    CHECK(at::allclose(gg[0], gw[0], 1e-12, 1e-12));
    CHECK(at::allclose(gg[1], gw[1], 1e-12, 1e-12));
  }
}

}  // namespace test_planner_local_product
