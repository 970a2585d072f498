// Local (communication-free) einshard: values and gradients against at::einsum and hand-written
// reshape/permute references, factored groups, families, ellipsis, scalars, errors and the cache.
//
// References run on float64 so tolerances can be tight. Where einshard runs the very same kernel as
// the reference (pure permutations and reshapes), results are compared bit for bit.

#include <ATen/ATen.h>

#include <einshard/einshard.hpp>

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace test_local_einshard {

namespace es = einshard;

namespace {

using Tensors = std::vector<at::Tensor>;
using Fn = std::function<at::Tensor(const Tensors&)>;

at::Tensor randn(std::vector<std::int64_t> shape) {
  return at::randn(shape, at::TensorOptions().dtype(at::kDouble));
}

std::vector<std::int64_t> shape_of(const at::Tensor& t) { return t.sizes().vec(); }

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a - b).abs().max().item<double>();
}

/// Same shape, same dtype, and values within float64 round-off (or identical when `exact`).
void require_same(const at::Tensor& actual, const at::Tensor& expected, bool exact = false) {
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  REQUIRE(shape_of(actual) == shape_of(expected));
  REQUIRE(actual.scalar_type() == expected.scalar_type());
  INFO("max |actual - expected| = " << max_abs_diff(actual, expected));
  if (exact)
    REQUIRE(at::equal(actual, expected));
  else
    REQUIRE(at::allclose(actual, expected, 1e-12, 1e-12));
}

struct Run {
  at::Tensor out;
  Tensors grads;
};

/// Runs `f` on fresh leaves copied from `xs`, then backpropagates `(out * g).sum()`.
Run forward_backward(const Tensors& xs, const Fn& f, const at::Tensor& g) {
  Tensors leaves;
  for (const auto& x : xs) leaves.push_back(x.detach().clone().requires_grad_(true));
  Run r;
  r.out = f(leaves);
  (r.out * g).sum().backward();
  for (const auto& l : leaves) r.grads.push_back(l.grad());
  r.out = r.out.detach();
  return r;
}

/// einshard (`actual`) and the reference give the same values and the same gradients for a random
/// upstream gradient.
void check_against(const Tensors& xs, const Fn& actual, const Fn& reference, bool exact = false) {
  const auto shape = reference(xs);
  const auto g = at::randn_like(shape);
  const auto want = forward_backward(xs, reference, g);
  const auto got = forward_backward(xs, actual, g);
  require_same(got.out, want.out, exact);
  REQUIRE(got.grads.size() == xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(got.grads[i].defined());
    require_same(got.grads[i], want.grads[i], exact);
  }
}

Fn einsum_ref(std::string equation) {
  return [equation](const Tensors& xs) { return at::einsum(equation, xs); };
}

/// The run-time form.
Fn runtime(std::string notation, es::Options o = {}) {
  return [notation, o](const Tensors& xs) { return es::einshard(notation, xs, o); };
}

/// Requires `f` to throw `E` whose what() contains `fragment`.
template <class E, class F>
void require_throws(F&& f, std::string_view fragment) {
  try {
    f();
  } catch (const E& e) {
    const std::string what = e.what();
    INFO("what(): " << what);
    CHECK(what.find(fragment) != std::string::npos);
    return;
  } catch (const std::exception& e) {
    FAIL("unexpected exception type; what(): " << e.what());
  }
  FAIL("no exception; expected one mentioning \"" << fragment << "\"");
}

}  // namespace

// -------------------------------------------------------------------------------------------------
// Plain einsum forms

TEST_CASE("local einshard: contraction and permutation equal at::einsum", "[local][einsum]") {
  at::manual_seed(1);
  const Tensors xs{randn({2, 3, 4, 5}), randn({3, 5, 6, 2})};
  const auto ref = einsum_ref("abkc,bcld->klda");
  SECTION("compile-time") {
    check_against(
        xs, [](const Tensors& t) { return es::einshard<"a b k c, b c l d -> k l d a">(t[0], t[1]); },
        ref);
  }
  SECTION("run-time") { check_against(xs, runtime("a b k c, b c l d -> k l d a"), ref); }
  SECTION("compile-time and run-time forms agree exactly") {
    const auto a = es::einshard<"a b k c, b c l d -> k l d a">(xs[0], xs[1]);
    const auto b = es::einshard("a b k c, b c l d -> k l d a", xs);
    REQUIRE(at::equal(a, b));
    REQUIRE(shape_of(a) == std::vector<std::int64_t>{4, 6, 2, 2});
  }
}

TEST_CASE("local einshard: permutation is an exact permute", "[local][einsum]") {
  at::manual_seed(2);
  const Tensors xs{randn({2, 3, 4, 5, 6})};
  const Fn ref = [](const Tensors& t) { return t[0].permute({0, 1, 3, 4, 2}); };
  check_against(
      xs, [](const Tensors& t) { return es::einshard<"b t c h w -> b t h w c">(t[0]); }, ref, true);
  check_against(xs, runtime("b t c h w -> b t h w c"), ref, true);
  // The identity is the identity.
  require_same(es::einshard<"b t c h w -> b t c h w">(xs[0]), xs[0], true);
}

TEST_CASE("local einshard: outer product, diagonal and summed input-only axes", "[local][einsum]") {
  at::manual_seed(3);
  SECTION("outer product i, j -> i j") {
    const Tensors xs{randn({3}), randn({4})};
    const Fn ref = [](const Tensors& t) { return t[0].unsqueeze(1) * t[1].unsqueeze(0); };
    check_against(
        xs, [](const Tensors& t) { return es::einshard<"i, j -> i j">(t[0], t[1]); }, ref);
    check_against(xs, runtime("i, j -> i j"), ref);
  }
  SECTION("diagonal i i -> i") {
    const Tensors xs{randn({4, 4})};
    const Fn ref = [](const Tensors& t) { return t[0].diagonal(); };
    check_against(xs, [](const Tensors& t) { return es::einshard<"i i -> i">(t[0]); }, ref, true);
    check_against(xs, runtime("i i -> i"), ref, true);
    // The gradient of a diagonal is zero off the diagonal.
    auto x = xs[0].clone().requires_grad_(true);
    es::einshard<"i i -> i">(x).sum().backward();
    require_same(x.grad(), at::eye(4, at::kDouble), true);
  }
  SECTION("summed input-only axis a b -> a") {
    const Tensors xs{randn({3, 5})};
    const Fn ref = [](const Tensors& t) { return t[0].sum(1); };
    check_against(xs, [](const Tensors& t) { return es::einshard<"a b -> a">(t[0]); }, ref);
    check_against(xs, runtime("a b -> a"), ref);
    check_against(xs, runtime("a b -> b"), [](const Tensors& t) { return t[0].sum(0); });
  }
  SECTION("matrix product with a summed axis in one operand only") {
    const Tensors xs{randn({2, 3, 7}), randn({3, 4})};
    check_against(xs, runtime("a b z, b c -> a c"), einsum_ref("abz,bc->ac"));
  }
}

TEST_CASE("local einshard: ellipsis", "[local][ellipsis]") {
  at::manual_seed(4);
  SECTION("... c, c o -> ... o at several ranks") {
    for (const auto& lead : std::vector<std::vector<std::int64_t>>{{}, {2}, {2, 3}, {2, 1, 3}}) {
      auto shape = lead;
      shape.push_back(4);
      INFO("leading dims: " << lead.size());
      const Tensors xs{randn(shape), randn({4, 5})};
      check_against(xs, runtime("... c, c o -> ... o"), einsum_ref("...c,co->...o"));
      check_against(
          xs, [](const Tensors& t) { return es::einshard<"... c, c o -> ... o">(t[0], t[1]); },
          einsum_ref("...c,co->...o"));
    }
  }
  SECTION("... c -> c sums the ellipsis") {
    const Tensors xs{randn({2, 3, 4})};
    const Fn ref = [](const Tensors& t) { return t[0].sum({0, 1}); };
    check_against(xs, runtime("... c -> c"), ref);
    check_against(xs, [](const Tensors& t) { return es::einshard<"... c -> c">(t[0]); }, ref);
  }
  SECTION("b ... c -> ... b c moves the batch axis") {
    const Tensors xs{randn({2, 3, 4, 5})};
    const Fn ref = [](const Tensors& t) { return t[0].permute({1, 2, 0, 3}); };
    check_against(xs, runtime("b ... c -> ... b c"), ref, true);
    check_against(
        xs, [](const Tensors& t) { return es::einshard<"b ... c -> ... b c">(t[0]); }, ref, true);
    // An ellipsis may cover nothing.
    const Tensors two{randn({2, 5})};
    check_against(two, runtime("b ... c -> ... b c"), [](const Tensors& t) { return t[0]; }, true);
  }
  SECTION("ellipsis with a factored group") {
    // ... (h d) -> ... h d and a contraction over the split factors.
    const Tensors xs{randn({2, 3, 12})};
    check_against(
        xs, runtime("... (h d) -> ... h d", {.sizes = {{"d", 4}}}),
        [](const Tensors& t) { return t[0].reshape({2, 3, 3, 4}); }, true);
    check_against(
        xs,
        [](const Tensors& t) { return es::einshard<"... (h d) -> ... d h">(t[0], {.sizes = {{"d", 4}}}); },
        [](const Tensors& t) { return t[0].reshape({2, 3, 3, 4}).transpose(-1, -2); }, true);
    const Tensors ys{randn({2, 3, 12}), randn({3, 4, 5})};
    check_against(
        ys,
        [](const Tensors& t) {
          return es::einshard<"b ... (h d), h d o -> b ... o">(t[0], t[1], {.sizes = {{"h", 3}}});
        },
        [](const Tensors& t) { return at::einsum("b...hd,hdo->b...o", {t[0].reshape({2, 3, 3, 4}), t[1]}); });
    // A group on the output side next to an ellipsis.
    const Tensors zs{randn({2, 3, 4, 5})};
    check_against(
        zs, runtime("... h d -> ... (d h)"),
        [](const Tensors& t) { return t[0].transpose(-1, -2).reshape({2, 3, 20}); }, true);
  }
}

TEST_CASE("local einshard: three and four operands", "[local][einsum]") {
  at::manual_seed(5);
  const Tensors xs{randn({2, 3}), randn({3, 4}), randn({4, 5})};
  const auto ref3 = einsum_ref("ab,bc,cd->ad");
  SECTION("three operands, separate arguments") {
    check_against(
        xs,
        [](const Tensors& t) { return es::einshard<"a b, b c, c d -> a d">(t[0], t[1], t[2]); },
        ref3);
  }
  SECTION("three operands, TensorList and run-time") {
    check_against(
        xs, [](const Tensors& t) { return es::einshard<"a b, b c, c d -> a d">(at::TensorList(t)); },
        ref3);
    check_against(xs, runtime("a b, b c, c d -> a d"), ref3);
    // The chain product, by matmul.
    require_same(es::einshard("a b, b c, c d -> a d", xs), xs[0].mm(xs[1]).mm(xs[2]));
  }
  SECTION("four operands") {
    const Tensors ys{randn({2, 3}), randn({3, 4}), randn({4, 5}), randn({5, 2})};
    const auto ref4 = einsum_ref("ab,bc,cd,de->ae");
    check_against(
        ys,
        [](const Tensors& t) { return es::einshard<"a b, b c, c d, d e -> a e">(at::TensorList(t)); },
        ref4);
    check_against(ys, runtime("a b, b c, c d, d e -> a e"), ref4);
    // A trace of a product of four matrices, to a 1-element vector.
    check_against(ys, runtime("a b, b c, c d, d a -> a"), einsum_ref("ab,bc,cd,da->a"));
  }
}

TEST_CASE("local einshard: more than 26 distinct axes", "[local][einsum]") {
  at::manual_seed(15);
  // 30 axes (einsum letters beyond 'z'), reversed.
  std::string in, out;
  std::vector<std::int64_t> shape, reversed;
  for (int i = 0; i < 30; ++i) {
    const auto name = "a" + std::to_string(i);
    in += name + " ";
    out = name + " " + out;
    shape.push_back(i % 3 == 0 ? 2 : 1);
    reversed.insert(reversed.begin(), i);
  }
  const Tensors xs{randn(shape)};
  check_against(xs, runtime(in + "-> " + out),
                [&](const Tensors& t) { return t[0].permute(reversed); }, true);
  // A contraction over 30 axes of two operands.
  const Tensors ys{randn(shape), randn(shape)};
  check_against(ys, runtime(in + ", " + in + "-> a0 a29"),
                [](const Tensors& t) { return (t[0] * t[1]).sum(at::IntArrayRef{
                    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                    23, 24, 25, 26, 27, 28}); });
  // torch::einsum has 52 subscripts; one more is an es::Error, not a crash.
  std::string many;
  for (int i = 0; i < 53; ++i) many += "a" + std::to_string(i) + " ";
  require_throws<es::Error>(
      [&] { es::einshard(many + "-> a0", {randn(std::vector<std::int64_t>(53, 1))}); },
      "at most 52");
}

TEST_CASE("local einshard: names with underscores and digits, whitespace variants", "[local][syntax]") {
  at::manual_seed(6);
  const Tensors xs{randn({3, 4})};
  const Fn transpose = [](const Tensors& t) { return t[0].t(); };
  check_against(xs, [](const Tensors& t) { return es::einshard<"x_1 y_2 -> y_2 x_1">(t[0]); },
                transpose, true);
  check_against(xs, runtime("x_1 y_2 -> y_2 x_1"), transpose, true);
  check_against(xs, runtime("long_axis_name b2 -> b2 long_axis_name"), transpose, true);
  for (const std::string n : {"a b -> b a ", "a b -> b a \t\n", "  a b->b a", "a b->b a",
                              "\ta\tb\n->\nb\ta", "a/dp b -> b a / dp", "a / dp b -> b a/dp",
                              "a  /  dp b->b a/dp  "}) {
    INFO("notation: '" << n << "'");
    check_against(xs, runtime(n), transpose, true);
  }
  check_against(xs, [](const Tensors& t) { return es::einshard<"a b -> b a  ">(t[0]); }, transpose,
                true);
  check_against(xs, [](const Tensors& t) { return es::einshard<"a / dp b->b a/dp">(t[0]); },
                transpose, true);
  const Tensors ys{randn({2, 3}), randn({3, 4})};
  check_against(ys, runtime("a b,b c->a c"), einsum_ref("ab,bc->ac"));
  check_against(ys, runtime(" a b ,  b c  ->  a c "), einsum_ref("ab,bc->ac"));
}

TEST_CASE("local einshard: sharded axes carried unchanged need no mesh", "[local][sharded]") {
  at::manual_seed(7);
  SECTION("a/dp b -> b a/dp") {
    const Tensors xs{randn({3, 4})};
    const Fn ref = [](const Tensors& t) { return t[0].t(); };
    check_against(xs, [](const Tensors& t) { return es::einshard<"a/dp b -> b a/dp">(t[0]); }, ref,
                  true);
    check_against(xs, runtime("a/dp b -> b a/dp"), ref, true);
  }
  SECTION("b/dp n c, b/dp c o -> b/dp n o (batched matmul)") {
    const Tensors xs{randn({2, 3, 4}), randn({2, 4, 5})};
    const Fn ref = [](const Tensors& t) { return at::bmm(t[0], t[1]); };
    check_against(
        xs,
        [](const Tensors& t) { return es::einshard<"b/dp n c, b/dp c o -> b/dp n o">(t[0], t[1]); },
        ref);
    check_against(xs, runtime("b/dp n c, b/dp c o -> b/dp n o"), ref);
    // An empty local shard is fine.
    const Tensors empty{randn({0, 3, 4}), randn({0, 4, 5})};
    const auto out = es::einshard<"b/dp n c, b/dp c o -> b/dp n o">(empty[0], empty[1]);
    REQUIRE(shape_of(out) == std::vector<std::int64_t>{0, 3, 5});
  }
  SECTION("l/tp e, l/tp e -> l/tp e (elementwise product)") {
    const Tensors xs{randn({3, 4}), randn({3, 4})};
    const Fn ref = [](const Tensors& t) { return t[0] * t[1]; };
    check_against(
        xs, [](const Tensors& t) { return es::einshard<"l/tp e, l/tp e -> l/tp e">(t[0], t[1]); },
        ref);
    check_against(xs, runtime("l/tp e, l/tp e -> l/tp e"), ref);
  }
  SECTION("compound mesh dims and two axes on one mesh dim") {
    const Tensors xs{randn({3, 4, 2})};
    check_against(xs, runtime("a/dp-sp b/sp c -> c b/sp a/dp-sp"),
                  [](const Tensors& t) { return t[0].permute({2, 1, 0}); }, true);
  }
}

// -------------------------------------------------------------------------------------------------
// Factored groups

TEST_CASE("local einshard: factored groups", "[local][groups]") {
  at::manual_seed(8);
  const Tensors xs{randn({2, 12, 5})};  // b (h p) c with h = 3, p = 4
  SECTION("expand b (h p) c -> b h p c with the size of p") {
    const Fn ref = [](const Tensors& t) { return t[0].reshape({2, 3, 4, 5}); };
    check_against(
        xs,
        [](const Tensors& t) { return es::einshard<"b (h p) c -> b h p c">(t[0], {.sizes = {{"p", 4}}}); },
        ref, true);
    check_against(xs, runtime("b (h p) c -> b h p c", {.sizes = {{"p", 4}}}), ref, true);
    // h is inferred: 12 / 4.
    REQUIRE(es::einshard<"b (h p) c -> b h p c">(xs[0], {.sizes = {{"p", 4}}}).size(1) == 3);
    // Giving h instead infers p; giving both (consistently) is fine too.
    check_against(xs, runtime("b (h p) c -> b h p c", {.sizes = {{"h", 3}}}), ref, true);
    check_against(xs, runtime("b (h p) c -> b h p c", {.sizes = {{"h", 3}, {"p", 4}}}), ref, true);
    // Another split of the same tensor gives another shape.
    REQUIRE(shape_of(es::einshard("b (h p) c -> b h p c", {xs[0]}, {.sizes = {{"p", 6}}})) ==
            std::vector<std::int64_t>{2, 2, 6, 5});
  }
  SECTION("pack b h p c -> b (h p) c needs no sizes") {
    const Tensors ys{randn({2, 3, 4, 5})};
    const Fn ref = [](const Tensors& t) { return t[0].reshape({2, 12, 5}); };
    check_against(ys, [](const Tensors& t) { return es::einshard<"b h p c -> b (h p) c">(t[0]); },
                  ref, true);
    check_against(ys, runtime("b h p c -> b (h p) c"), ref, true);
    // Pack in the other order: a transpose first.
    check_against(ys, runtime("b h p c -> b (p h) c"),
                  [](const Tensors& t) { return t[0].transpose(1, 2).reshape({2, 12, 5}); }, true);
  }
  SECTION("expand + pack + permute b (h p) c -> b (p h) c") {
    const Fn ref = [](const Tensors& t) {
      return t[0].reshape({2, 3, 4, 5}).permute({0, 2, 1, 3}).reshape({2, 12, 5});
    };
    check_against(
        xs,
        [](const Tensors& t) { return es::einshard<"b (h p) c -> b (p h) c">(t[0], {.sizes = {{"p", 4}}}); },
        ref, true);
    check_against(xs, runtime("b (h p) c -> b (p h) c", {.sizes = {{"p", 4}}}), ref, true);
    // The same notation with another factor size is another permutation.
    const auto other = es::einshard("b (h p) c -> b (p h) c", {xs[0]}, {.sizes = {{"p", 3}}});
    REQUIRE_FALSE(at::equal(other, ref(xs)));
  }
  SECTION("factor size inferred from another operand: (h p) c, p -> h c") {
    const Tensors ys{randn({12, 5}), randn({4})};
    const Fn ref = [](const Tensors& t) { return at::einsum("hpc,p->hc", {t[0].reshape({3, 4, 5}), t[1]}); };
    check_against(ys, [](const Tensors& t) { return es::einshard<"(h p) c, p -> h c">(t[0], t[1]); },
                  ref);
    check_against(ys, runtime("(h p) c, p -> h c"), ref);
    // The output in the other order.
    check_against(ys, runtime("(h p) c, p -> c h"),
                  [ref](const Tensors& t) { return ref(t).t(); });
  }
  SECTION("groups on both sides") {
    const Tensors ys{randn({6, 20})};  // (a b) (c d) with b = 2, d = 5
    const Fn ref = [](const Tensors& t) {
      return t[0].reshape({3, 2, 4, 5}).permute({2, 0, 3, 1}).reshape({12, 10});
    };
    check_against(
        ys,
        [](const Tensors& t) {
          return es::einshard<"(a b) (c d) -> (c a) (d b)">(t[0], {.sizes = {{"b", 2}, {"d", 5}}});
        },
        ref, true);
    check_against(ys, runtime("(a b) (c d) -> (c a) (d b)", {.sizes = {{"a", 3}, {"c", 4}}}), ref,
                  true);
  }
  SECTION("a factor inferred in one group completes another") {
    // (h p) gives h = 3 from p = 4; then (h q) gives q = 15 / 3 = 5.
    const Tensors ys{randn({12}), randn({15})};
    check_against(ys, runtime("(h p), (h q) -> h p q", {.sizes = {{"p", 4}}}),
                  [](const Tensors& t) {
                    return at::einsum("hp,hq->hpq", {t[0].reshape({3, 4}), t[1].reshape({3, 5})});
                  });
  }
  SECTION("sharded axis inside a group: b (h/sp p) c -> b h/sp p c") {
    const Fn ref = [](const Tensors& t) { return t[0].reshape({2, 3, 4, 5}); };
    check_against(
        xs,
        [](const Tensors& t) {
          return es::einshard<"b (h/sp p) c -> b h/sp p c">(t[0], {.sizes = {{"p", 4}}});
        },
        ref, true);
    check_against(xs, runtime("b (h/sp p) c -> b h/sp p c", {.sizes = {{"p", 4}}}), ref, true);
    check_against(xs, runtime("b (h/sp p) c -> b (p h/sp) c", {.sizes = {{"h", 3}}}),
                  [](const Tensors& t) {
                    return t[0].reshape({2, 3, 4, 5}).transpose(1, 2).reshape({2, 12, 5});
                  },
                  true);
  }
  SECTION("attention scores: a contraction over factored axes") {
    const Tensors ys{randn({2, 3, 8}), randn({2, 5, 8})};  // b q (h d), b k (h d); h = 2, d = 4
    const Fn ref = [](const Tensors& t) {
      return at::einsum("bqhd,bkhd->bhqk", {t[0].reshape({2, 3, 2, 4}), t[1].reshape({2, 5, 2, 4})});
    };
    check_against(
        ys,
        [](const Tensors& t) {
          return es::einshard<"b/dp q (h d), b/dp k (h d) -> b/dp h q k">(t[0], t[1],
                                                                         {.sizes = {{"d", 4}}});
        },
        ref);
    check_against(ys, runtime("b q (h d), b k (h d) -> b h q k", {.sizes = {{"h", 2}}}), ref);
  }
  SECTION("group errors (reference §1.3)") {
    require_throws<es::Error>([&] { es::einshard<"b (h p) c -> b h p c">(xs[0]); },
                              "Cannot infer multiple factor sizes");
    require_throws<es::Error>([&] { es::einshard("b (h p) c -> b h p c", {xs[0]}); },
                              "Cannot infer multiple factor sizes for h, p");
    require_throws<es::Error>(
        [&] { es::einshard<"b (h p) c -> b h p c">(xs[0], {.sizes = {{"p", 5}}}); },
        "Cannot infer factor size for 'h' from dimension 12");
    require_throws<es::Error>(
        [&] { es::einshard("b (h p) c -> b h p c", {xs[0]}, {.sizes = {{"h", 2}, {"p", 4}}}); },
        "multiply to 8, but tensor dimension is 12");
    require_throws<es::Error>(
        [&] { es::einshard<"b (h p) c -> b h p c">(xs[0], {.sizes = {{"h", 4}, {"p", 4}}}); },
        "multiply to");
  }
}

// -------------------------------------------------------------------------------------------------
// Families

namespace {

/// x: (B, nh*wh, nw*ww, C) -> windows (B*nh*nw, wh*ww, C), by hand.
at::Tensor window_partition_2d(const at::Tensor& x, std::int64_t wh, std::int64_t ww) {
  const auto B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  return x.reshape({B, H / wh, wh, W / ww, ww, C})
      .permute({0, 1, 3, 2, 4, 5})
      .reshape({B * (H / wh) * (W / ww), wh * ww, C});
}

/// x: (B, nt*wt, nh*wh, nw*ww, C) -> windows (B*nt*nh*nw, wt*wh*ww, C), by hand.
at::Tensor window_partition_3d(const at::Tensor& x, std::int64_t wt, std::int64_t wh, std::int64_t ww) {
  const auto B = x.size(0), T = x.size(1), H = x.size(2), W = x.size(3), C = x.size(4);
  return x.reshape({B, T / wt, wt, H / wh, wh, W / ww, ww, C})
      .permute({0, 1, 3, 5, 2, 4, 6, 7})
      .reshape({B * (T / wt) * (H / wh) * (W / ww), wt * wh * ww, C});
}

const es::Families families_2d{{"spatial", {"h", "w"}}, {"window", {"wh", "ww"}}};
const es::Families families_3d{{"spatial", {"t", "h", "w"}}, {"window", {"wt", "wh", "ww"}}};

}  // namespace

TEST_CASE("local einshard: window partition with families", "[local][families]") {
  at::manual_seed(9);
  SECTION("2D partition, sizes by family name") {
    const Tensors xs{randn({2, 6, 9, 3})};  // windows of 2 x 3
    check_against(xs,
                  runtime("b [*spatial *window] c -> (b *spatial) (*window) c",
                          {.sizes = {{"window", {2, 3}}}, .families = families_2d}),
                  [](const Tensors& t) { return window_partition_2d(t[0], 2, 3); }, true);
    // The same, with the sizes by member name.
    check_against(xs,
                  runtime("b [*spatial *window] c -> (b *spatial) (*window) c",
                          {.sizes = {{"wh", 2}, {"ww", 3}}, .families = families_2d}),
                  [](const Tensors& t) { return window_partition_2d(t[0], 2, 3); }, true);
    // Sizes of the other family (the numbers of windows) instead.
    check_against(xs,
                  runtime("b [*spatial *window] c -> (b *spatial) (*window) c",
                          {.sizes = {{"spatial", {3, 3}}}, .families = families_2d}),
                  [](const Tensors& t) { return window_partition_2d(t[0], 2, 3); }, true);
  }
  SECTION("2D reverse restores the input") {
    const auto x = randn({2, 6, 9, 3});
    const Tensors ws{window_partition_2d(x, 2, 3)};
    const es::Options o{.sizes = {{"spatial", {3, 3}}, {"window", {2, 3}}}, .families = families_2d};
    check_against(ws, runtime("(b *spatial) (*window) c -> b [*spatial *window] c", o),
                  [&](const Tensors& t) {
                    return t[0]
                        .reshape({2, 3, 3, 2, 3, 3})
                        .permute({0, 1, 3, 2, 4, 5})
                        .reshape({2, 6, 9, 3});
                  },
                  true);
    require_same(es::einshard("(b *spatial) (*window) c -> b [*spatial *window] c", ws, o), x, true);
  }
  SECTION("scalar family size broadcasts to every member") {
    const Tensors xs{randn({1, 4, 6, 2})};
    check_against(xs,
                  runtime("b [*spatial *window] c -> (b *spatial) (*window) c",
                          {.sizes = {{"window", 2}}, .families = families_2d}),
                  [](const Tensors& t) { return window_partition_2d(t[0], 2, 2); }, true);
  }
  SECTION("3D partition and reverse") {
    const auto x = randn({2, 4, 6, 6, 3});  // windows of 2 x 3 x 2
    const Tensors xs{x};
    const es::Options o{.sizes = {{"window", {2, 3, 2}}}, .families = families_3d};
    check_against(xs, runtime("b [*spatial *window] c -> (b *spatial) (*window) c", o),
                  [](const Tensors& t) { return window_partition_3d(t[0], 2, 3, 2); }, true);
    const Tensors ws{window_partition_3d(x, 2, 3, 2)};
    const es::Options r{.sizes = {{"spatial", {2, 2, 3}}, {"window", {2, 3, 2}}},
                        .families = families_3d};
    require_same(es::einshard("(b *spatial) (*window) c -> b [*spatial *window] c", ws, r), x, true);
    check_against(ws, runtime("(b *spatial) (*window) c -> b [*spatial *window] c", r),
                  [](const Tensors& t) {
                    return t[0]
                        .reshape({2, 2, 2, 3, 2, 3, 2, 3})
                        .permute({0, 1, 4, 2, 5, 3, 6, 7})
                        .reshape({2, 4, 6, 6, 3});
                  },
                  true);
  }
  SECTION("a family inside a group and on its own") {
    const Tensors xs{randn({2, 3, 4, 5})};
    check_against(xs, runtime("b *spatial c -> (b *spatial) c", {.families = families_2d}),
                  [](const Tensors& t) { return t[0].reshape({24, 5}); }, true);
    check_against(xs, runtime("b *spatial c -> c *spatial b", {.families = families_2d}),
                  [](const Tensors& t) { return t[0].permute({3, 1, 2, 0}); }, true);
  }
  SECTION("family members carrying sharding") {
    const es::Families sharded{{"spatial", {"h/sp", "w"}}, {"window", {"wh", "ww"}}};
    const Tensors xs{randn({2, 6, 9, 3})};
    // b (h/sp wh) (w ww) c -> b h/sp w wh ww c: local, h/sp is carried. Sizes keyed by the family
    // name reach the members without their sharding.
    check_against(xs,
                  runtime("b [*spatial *window] c -> b *spatial *window c",
                          {.sizes = {{"spatial", {3, 3}}}, .families = sharded}),
                  [](const Tensors& t) {
                    return t[0].reshape({2, 3, 2, 3, 3, 3}).permute({0, 1, 3, 2, 4, 5});
                  },
                  true);
    // Dropping the sharded member from the output is not local.
    require_throws<es::Error>(
        [&] {
          es::einshard("b *spatial c -> b c", xs, {.families = sharded});
        },
        "require a mesh");
  }
}

TEST_CASE("local einshard: family errors", "[local][families][errors]") {
  at::manual_seed(10);
  const Tensors xs{randn({2, 6, 9, 3})};
  const std::string partition = "b [*spatial *window] c -> (b *spatial) (*window) c";
  SECTION("unknown family") {
    require_throws<es::NotationError>(
        [&] { es::einshard("b *nope c -> b c", xs, {.families = families_2d}); },
        "Unknown axis family 'nope'");
    try {
      es::einshard("b *nope c -> b c", xs, {.families = families_2d});
      FAIL("no exception");
    } catch (const es::NotationError& e) {
      CHECK(e.column() == 3);  // the '*'
    }
    // No families at all.
    require_throws<es::NotationError>([&] { es::einshard("b *spatial c -> b c", xs); },
                                      "Unknown axis family 'spatial'");
  }
  SECTION("zip with a token that is not a family reference") {
    require_throws<es::NotationError>(
        [&] { es::einshard("b [*spatial h] c -> b c", xs, {.families = families_2d}); },
        "may hold only family references");
  }
  SECTION("zipped families of different lengths") {
    require_throws<es::NotationError>(
        [&] {
          es::einshard(partition, xs,
                       {.families = {{"spatial", {"h", "w"}}, {"window", {"wt", "wh", "ww"}}}});
        },
        "Zipped axis families must have matching lengths");
  }
  SECTION("a family size with the wrong number of values") {
    require_throws<es::Error>(
        [&] {
          es::einshard(partition, xs, {.sizes = {{"window", {2, 3, 1}}}, .families = families_2d});
        },
        "Size family 'window' has 3 values for 2 axes");
  }
  SECTION("conflicting sizes for one axis") {
    require_throws<es::Error>(
        [&] {
          es::einshard(partition, xs,
                       {.sizes = {{"window", {2, 3}}, {"wh", 3}}, .families = families_2d});
        },
        "Conflicting size for expanded axis 'wh'");
    // Agreeing sizes from both keys are fine.
    require_same(es::einshard(partition, xs,
                              {.sizes = {{"window", {2, 3}}, {"wh", 2}}, .families = families_2d}),
                 window_partition_2d(xs[0], 2, 3), true);
  }
}

// -------------------------------------------------------------------------------------------------
// Scalars, errors, options, cache

TEST_CASE("local einshard: a scalar loss -> loss", "[local][scalar]") {
  at::manual_seed(11);
  const auto x = randn({});
  const Fn ref = [](const Tensors& t) { return t[0] * 1.0; };
  check_against({x}, [](const Tensors& t) { return es::einshard<"loss -> loss">(t[0]); }, ref, true);
  check_against({x}, runtime("loss -> loss"), ref, true);
  REQUIRE(es::einshard<"loss -> loss">(x).dim() == 0);
  REQUIRE(es::einshard<"loss -> loss">(x).item<double>() == x.item<double>());
  // A 1-d tensor stays 1-d.
  REQUIRE(shape_of(es::einshard<"loss -> loss">(randn({3}))) == std::vector<std::int64_t>{3});
  // Two scalars multiply.
  const auto y = randn({});
  check_against({x, y}, runtime("l, l -> l"), [](const Tensors& t) { return t[0] * t[1]; });
}

TEST_CASE("local einshard: rank mismatch and the number of tensors", "[local][errors]") {
  at::manual_seed(12);
  const auto x3 = randn({2, 3, 4});
  require_throws<es::Error>([&] { es::einshard<"a b -> b a">(x3); },
                            "expected 2 dimensions in the input, found 3");
  require_throws<es::Error>([&] { es::einshard("a b -> b a", {x3}); },
                            "expected 2 dimensions in the input, found 3");
  require_throws<es::Error>([&] { es::einshard("a b ... c -> c", {randn({2, 3})}); },
                            "expected 3 or more dimensions in the input, found 2");
  require_throws<es::Error>(
      [&] { es::einshard("a b, b c -> a c", {randn({2, 3}), randn({3, 4, 5})}); },
      "einshard 'a b, b c -> a c': expected 2 dimensions in input 2, found 3");
  // A 0-d tensor is accepted only for a single plain axis.
  require_throws<es::Error>([&] { es::einshard("a b -> a", {randn({})}); }, "expected 2 dimensions");
  // Wrong number of tensors: run-time form and compile-time list form.
  require_throws<es::Error>([&] { es::einshard("a b, b c -> a c", {randn({2, 3})}); },
                            "expected 2 tensors (one per input), found 1");
  require_throws<es::Error>(
      [&] { es::einshard("a b -> b a", {randn({2, 3}), randn({2, 3})}); },
      "expected 1 tensors (one per input), found 2");
  const Tensors one{randn({2, 3})};
  require_throws<es::Error>(
      [&] { es::einshard<"a b, b c, c d -> a d">(at::TensorList(one)); },
      "expected 3 tensors (one per input), found 1");
}

TEST_CASE("local einshard: non-local notations without a mesh", "[local][errors]") {
  const auto x = randn({4, 3});
  require_throws<es::Error>([&] { es::einshard<"a b -> a/dp b">(x); }, "require a mesh");
  require_throws<es::Error>([&] { es::einshard("a b -> a/dp b", {x}); }, "require a mesh");
  require_throws<es::Error>([&] { es::einshard<"b n h // tp -> b n h">(randn({2, 3, 4})); },
                            "require a mesh");
  require_throws<es::Error>([&] { es::einshard("a/dp b -> a b", {x}); }, "require a mesh");
  require_throws<es::Error>([&] { es::einshard("a/dp b -> a/sp b", {x}); }, "require a mesh");
  // Summing a sharded axis needs an all-reduce.
  require_throws<es::Error>([&] { es::einshard("a/dp b -> b", {x}); }, "require a mesh");
  // A contraction whose operands disagree on the sharding of the shared axis.
  require_throws<es::Error>([&] { es::einshard<"a b/tp, b c -> a c">(x, randn({3, 2})); },
                            "require a mesh");
  // The message names the notation.
  require_throws<es::Error>([&] { es::einshard("a b -> a/dp b", {x}); }, "'a b -> a/dp b'");
}

TEST_CASE("explain raises what einshard raises before it computes", "[local][errors][explain]") {
  const auto x = randn({4, 3});
  // No mesh for a distributed notation.
  require_throws<es::Error>([&] { (void)es::explain<"a b -> a/dp b">(x); }, "require a mesh");
  require_throws<es::Error>([&] { (void)es::explain("a b -> a/dp b", {x}); }, "require a mesh");
  // The wrong number of tensors, distributed and local.
  const Tensors one{x};
  require_throws<es::Error>([&] { (void)es::explain<"a b, b c -> a c">(at::TensorList(one)); },
                            "expected 2 tensors (one per input), found 1");
  require_throws<es::Error>([&] { (void)es::explain("a b -> b a", {x, x}); },
                            "expected 1 tensors (one per input), found 2");
  // The wrong number of dimensions of a local notation's tensor.
  require_throws<es::Error>([&] { (void)es::explain<"a b c -> c b a">(x); },
                            "expected 3 dimensions in the input, found 2");
  // Input einshard accepts is explained (a local notation: no steps).
  CHECK(es::explain<"a b -> b a">(x).steps.empty());
}

TEST_CASE("local einshard: options einshard does not use are errors", "[local][options]") {
  const auto x = randn({2, 3});
  require_throws<es::Error>([&] { es::einshard<"a b -> b a">(x, {.norm = "ortho"}); }, "'.norm'");
  require_throws<es::Error>([&] { es::einshard("a b -> b a", {x}, {.norm = "ortho"}); }, "'.norm'");
  require_throws<es::Error>([&] { es::einshard("a b -> b a", {x}, {.stride = 2}); }, "'.stride'");
  require_throws<es::Error>([&] { es::einshard("a b -> b a", {x}, {.fill = 0.0}); }, "'.fill'");
  require_throws<es::Error>(
      [&] { es::einshard("a b -> b a", {x}, {.axes = {{"a", "ka"}}}); }, "'.axes'");
  // Options it does use are accepted on a local op (the policy only matters when planning).
  require_same(es::einshard("a b -> b a", {x}, {.policy = es::Policy::memory}), x.t(), true);
  require_same(es::einshard<"a b -> b a">(x, {.shapes = es::Shapes{{"dp", {1, 1}}}}), x.t(), true);
}

TEST_CASE("local einshard: options built field by field", "[local][options]") {
  const auto x = randn({2, 12, 3});
  es::Options o;
  o.sizes["p"] = 4;  // SizeValue has a default, so a map entry can be made and then assigned
  const auto y = es::einshard<"b (h p) c -> b h p c">(x, o);
  require_same(y, x.reshape({2, 3, 4, 3}), true);
  o.families["f"] = {"h", "p"};
  o.sizes.clear();
  o.sizes["f"] = es::SizeValue(std::vector<std::int64_t>{3, 4});  // by family: one per member
  require_same(es::einshard("b (h p) c -> b *f c", {x}, o), x.reshape({2, 3, 4, 3}), true);
}

TEST_CASE("local einshard: NotationError of a run-time notation", "[local][errors]") {
  const auto x = randn({2, 3});
  try {
    es::einshard("a b -> a c", {x});
    FAIL("no exception");
  } catch (const es::NotationError& e) {
    CHECK(e.column() == 10);  // the 'c'
    CHECK(e.expression() == "a b -> a c");
    CHECK(e.message().find("'c'") != std::string::npos);
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("a b -> a c") != std::string::npos);
    // The caret sits under column 10 of the quoted expression.
    const auto quoted = what.find("  a b -> a c\n");
    REQUIRE(quoted != std::string::npos);
    CHECK(what.substr(quoted + 13) == std::string(2 + 9, ' ') + "^");
  }
  // A NotationError is an es::Error (one hierarchy), and is caught as a NotationError first.
  require_throws<es::Error>([&] { es::einshard("a b ->", {x}); }, "^");
  bool is_notation = false;
  try {
    es::einshard("a (b -> a", {x});
  } catch (const es::NotationError& e) {
    is_notation = true;
    CHECK(e.column() >= 1);
  } catch (const es::Error&) {
  }
  CHECK(is_notation);
  // A malformed notation fails on every call, not only on the first (no poisoned cache entry).
  for (int i = 0; i < 2; ++i)
    require_throws<es::NotationError>([&] { es::einshard("a b -> a b b", {x}); }, "more than once");
}

TEST_CASE("local einshard: the parse cache", "[local][cache]") {
  at::manual_seed(13);
  const auto x = randn({3, 4});
  SECTION("repeated calls give equal results") {
    const auto first = es::einshard("a b -> b a", {x});
    for (int i = 0; i < 3; ++i) require_same(es::einshard("a b -> b a", {x}), first, true);
    // The cached plan works on other shapes.
    const auto other = randn({5, 2});
    require_same(es::einshard("a b -> b a", {other}), other.t(), true);
  }
  SECTION("the same string with different families") {
    const std::string n = "*s -> x y";
    const es::Families same{{"s", {"x", "y"}}};
    const es::Families swapped{{"s", {"y", "x"}}};
    for (int round = 0; round < 2; ++round) {
      require_same(es::einshard(n, {x}, {.families = same}), x, true);
      require_same(es::einshard(n, {x}, {.families = swapped}), x.t(), true);
    }
    // The same families under another name are another entry again.
    require_same(es::einshard("*t -> x y", {x}, {.families = {{"t", {"y", "x"}}}}), x.t(), true);
    // Families given but not referenced change nothing.
    require_same(es::einshard("x y -> y x", {x}, {.families = same}), x.t(), true);
    require_same(es::einshard("x y -> y x", {x}), x.t(), true);
  }
  SECTION("many distinct notations") {
    // More distinct strings than fit in the cache would still all work (spot check of a few hundred).
    for (int i = 0; i < 300; ++i) {
      const auto name = "n" + std::to_string(i);
      require_same(es::einshard(name + " m -> m " + name, {x}), x.t(), true);
    }
  }
}

// -------------------------------------------------------------------------------------------------
// Randomized: einshard (run-time form) == at::einsum on values and gradients.

namespace {

struct RandomCase {
  std::string notation;
  std::string equation;  ///< of at::einsum, on the tensors with every group split apart
  std::vector<std::vector<std::int64_t>> shapes;  ///< what einshard gets (groups merged)
  std::vector<std::vector<std::int64_t>> split;   ///< what at::einsum gets (groups split)
  int output_group = -1;        ///< the output's group: its first named axis, or -1
  int output_ellipsis = -1;     ///< where the output's "..." sits among its named axes, or -1
  es::Sizes sizes;              ///< factor sizes of every grouped axis
};

RandomCase random_case(std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const std::vector<std::string> names{"a", "b2", "c_d", "e", "Fx", "g", "h_1"};
  std::map<std::string, std::int64_t> size;
  for (const auto& n : names) size[n] = uniform(1, 4);
  std::map<std::string, char> letter;
  for (std::size_t i = 0; i < names.size(); ++i) letter[names[i]] = static_cast<char>('a' + i);

  // The ellipsis covers 0-2 dims; each operand with an ellipsis takes the full set or a trailing
  // part of it (einsum broadcasts right-aligned).
  std::vector<std::int64_t> ellipsis_dims;
  for (int k = uniform(0, 2); k > 0; --k) ellipsis_dims.push_back(uniform(1, 3));
  const bool use_ellipsis = chance(0.3);

  const auto inputs = static_cast<std::size_t>(uniform(1, 4));
  std::vector<std::vector<std::string>> operands(inputs);
  std::vector<int> ellipsis_at(inputs, -1);
  std::vector<std::size_t> ellipsis_keep(inputs, 0);
  RandomCase c;
  for (std::size_t i = 0; i < inputs; ++i) {
    auto& op = operands[i];
    const int rank = uniform(0, 3);
    for (int k = 0; k < rank; ++k) {
      // Occasionally repeat an axis in one operand (a diagonal).
      if (!op.empty() && chance(0.1))
        op.push_back(op[static_cast<std::size_t>(uniform(0, static_cast<int>(op.size()) - 1))]);
      else
        op.push_back(names[static_cast<std::size_t>(uniform(0, static_cast<int>(names.size()) - 1))]);
    }
    if ((use_ellipsis && chance(0.7)) || op.empty()) {
      ellipsis_at[i] = uniform(0, static_cast<int>(op.size()));
      ellipsis_keep[i] = static_cast<std::size_t>(uniform(0, static_cast<int>(ellipsis_dims.size())));
    }
  }
  bool any_ellipsis = false;
  std::vector<std::string> candidates;
  for (std::size_t i = 0; i < inputs; ++i) {
    any_ellipsis = any_ellipsis || ellipsis_at[i] >= 0;
    for (const auto& n : operands[i])
      if (std::find(candidates.begin(), candidates.end(), n) == candidates.end()) candidates.push_back(n);
  }
  std::shuffle(candidates.begin(), candidates.end(), rng);
  std::vector<std::string> output(candidates.begin(),
                                  candidates.begin() + uniform(0, static_cast<int>(candidates.size())));
  int out_ellipsis = any_ellipsis && chance(0.7) ? uniform(0, static_cast<int>(output.size())) : -1;
  if (output.empty() && out_ellipsis < 0) {
    if (!candidates.empty())
      output.push_back(candidates.front());
    else
      out_ellipsis = 0;  // every operand is only "..."
  }

  // Axes carried by every input and the output, once each, can be sharded in the notation.
  std::set<std::string> sharded;
  for (const auto& n : output) {
    bool everywhere = true;
    for (const auto& op : operands) everywhere = everywhere && std::count(op.begin(), op.end(), n) == 1;
    if (everywhere && chance(0.4)) sharded.insert(n);
  }

  // Sometimes two adjacent axes of an operand (distinct, not repeated elsewhere in it, no "..."
  // between them) form a factored group `(x y)`.
  auto pick_group = [&](const std::vector<std::string>& op, int at_ellipsis) {
    std::vector<int> starts;
    for (std::size_t k = 0; k + 1 < op.size(); ++k)
      if (op[k] != op[k + 1] && std::count(op.begin(), op.end(), op[k]) == 1 &&
          std::count(op.begin(), op.end(), op[k + 1]) == 1 && at_ellipsis != static_cast<int>(k) + 1)
        starts.push_back(static_cast<int>(k));
    if (starts.empty() || !chance(0.35)) return -1;
    const int k = starts[static_cast<std::size_t>(uniform(0, static_cast<int>(starts.size()) - 1))];
    for (int j = k; j <= k + 1; ++j) {
      const auto& n = op[static_cast<std::size_t>(j)];
      c.sizes.insert_or_assign(n, es::SizeValue(size[n]));
    }
    return k;
  };
  std::vector<int> group_at(inputs);
  for (std::size_t i = 0; i < inputs; ++i) group_at[i] = pick_group(operands[i], ellipsis_at[i]);
  c.output_group = pick_group(output, out_ellipsis);
  c.output_ellipsis = out_ellipsis;

  auto space = [&] {
    switch (uniform(0, 5)) {
      case 0: return std::string("  ");
      case 1: return std::string("\t");
      default: return std::string(" ");
    }
  };
  auto spec = [&](const std::vector<std::string>& op, int at_ellipsis, int group, std::string& notation,
                  std::string& equation) {
    bool first = true;
    for (std::size_t k = 0; k <= op.size(); ++k) {
      if (static_cast<int>(k) == at_ellipsis) {
        notation += (first ? "" : space()) + "...";
        equation += "...";
        first = false;
      }
      if (k == op.size()) break;
      notation += first ? "" : space();
      if (static_cast<int>(k) == group) notation += chance(0.5) ? "(" : "( ";
      notation += op[k];
      if (sharded.count(op[k])) notation += chance(0.5) ? "/dp" : " / dp";
      if (static_cast<int>(k) == group + 1 && group >= 0) notation += chance(0.5) ? ")" : " )";
      equation += letter[op[k]];
      first = false;
    }
  };
  for (std::size_t i = 0; i < inputs; ++i) {
    if (i) {
      c.notation += chance(0.5) ? ", " : ",";
      c.equation += ',';
    }
    spec(operands[i], ellipsis_at[i], group_at[i], c.notation, c.equation);
    std::vector<std::int64_t> split, merged;
    for (std::size_t k = 0; k <= operands[i].size(); ++k) {
      if (static_cast<int>(k) == ellipsis_at[i]) {
        const auto begin = ellipsis_dims.end() - static_cast<std::ptrdiff_t>(ellipsis_keep[i]);
        split.insert(split.end(), begin, ellipsis_dims.end());
        merged.insert(merged.end(), begin, ellipsis_dims.end());
      }
      if (k == operands[i].size()) break;
      const auto extent = size[operands[i][k]];
      split.push_back(extent);
      if (static_cast<int>(k) == group_at[i] + 1 && group_at[i] >= 0)
        merged.back() *= extent;
      else
        merged.push_back(extent);
    }
    c.split.push_back(split);
    c.shapes.push_back(merged);
  }
  c.notation += chance(0.7) ? " -> " : "->";
  c.equation += "->";
  spec(output, out_ellipsis, c.output_group, c.notation, c.equation);
  if (chance(0.2)) c.notation += " ";
  return c;
}

/// at::einsum on the inputs with their groups split apart, then the output's group merged.
Fn random_reference(const RandomCase& c) {
  return [c](const Tensors& xs) {
    Tensors split;
    for (std::size_t i = 0; i < xs.size(); ++i) split.push_back(xs[i].reshape(c.split[i]));
    auto out = at::einsum(c.equation, split);
    if (c.output_group < 0) return out;
    // Where the group's first axis is among the result's dims: after the ellipsis' dims if the
    // ellipsis comes before it.
    const std::string rhs = c.equation.substr(c.equation.find("->") + 2);
    const std::int64_t letters = static_cast<std::int64_t>(rhs.size()) - (c.output_ellipsis >= 0 ? 3 : 0);
    const std::int64_t ellipsis_dims = out.dim() - letters;
    std::int64_t at = c.output_group;
    if (c.output_ellipsis >= 0 && c.output_ellipsis <= c.output_group) at += ellipsis_dims;
    auto shape = out.sizes().vec();
    shape[static_cast<std::size_t>(at)] *= shape[static_cast<std::size_t>(at) + 1];
    shape.erase(shape.begin() + at + 1);
    return out.reshape(shape);
  };
}

}  // namespace

TEST_CASE("local einshard: random expressions equal at::einsum", "[local][random]") {
  std::mt19937 rng(20240611);
  at::manual_seed(14);
  int checked = 0, grouped = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto c = random_case(rng);
    Tensors xs;
    for (const auto& s : c.shapes) xs.push_back(randn(s));
    INFO("trial " << trial << ": notation '" << c.notation << "', einsum '" << c.equation << "'");
    check_against(xs, runtime(c.notation, {.sizes = c.sizes}), random_reference(c));
    ++checked;
    grouped += c.sizes.empty() ? 0 : 1;
  }
  REQUIRE(checked == 300);
  CHECK(grouped > 30);  // the generator does exercise factored groups
}

}  // namespace test_local_einshard
