// Faults injected on one rank of a distributed contraction end the call the same way on every
// rank -- the same es::Error, nobody left in a collective -- and the library stays usable; a NaN
// in one rank's shard is data, not a fault: it reaches exactly the output entries it feeds.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "fault_support.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cstdint>
#include <limits>
#include <string>

namespace test_contraction_faults {

namespace es = einshard;
namespace et = einshard::testing;

namespace {

/// This rank's slice of dimension `d` of `t` over a 1-D mesh, by the split rule.
at::Tensor slice(const at::Tensor& t, std::int64_t d, const es::Mesh& mesh) {
  const auto s = es::compute_split_shapes(t.size(d), mesh.size("tp"));
  std::int64_t start = 0;
  for (int c = 0; c < mesh.coordinate("tp"); ++c) start += s[static_cast<std::size_t>(c)];
  return t.narrow(d, start, s[static_cast<std::size_t>(mesh.coordinate("tp"))]).contiguous();
}

}  // namespace

TEST_CASE("agreement: shards of any cut agree alike, and faults still name the rank", "[mpi][binary][faults]") {
  // A first call agrees in one small all-reduce when every shard but the last is alike on the
  // sharded axes (the split rule's cut, [2, ..., 2, 5]), and all-gathers every rank's shapes for any
  // other cut ([1, 0, 3, 1, ...]). Both paths: the same values, and the same error on every rank.
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  const bool me = w.rank == et::faulty_rank();
  const int P = w.size;
  std::vector<std::int64_t> alike(static_cast<std::size_t>(P), 2), own(static_cast<std::size_t>(P));
  alike.back() = 5;
  for (int c = 0; c < P; ++c) own[static_cast<std::size_t>(c)] = (c * 7 + 1) % 4;  // 1 0 3 2 1 0 ...
  const es::Options o{.mesh = mesh};
  at::manual_seed(11);
  for (const auto& cut : {es::compute_split_shapes(10, P), alike, own}) {
    std::int64_t n = 0, start = 0;
    for (int c = 0; c < P; ++c) (c < w.rank ? start : n) += cut[static_cast<std::size_t>(c)];
    n += start;
    const auto A = at::randn({n, 6}, at::kDouble), B = at::randn({6, 3}, at::kDouble);
    const auto a = A.narrow(0, start, cut[static_cast<std::size_t>(w.rank)]).contiguous();
    // First calls on this cut (each moves data, so each agrees before it runs): the rows' cut to
    // the columns' split-rule cut, and a contraction whose result is whole on every rank.
    CHECK(at::allclose(es::einshard<"a/tp b -> a b/tp">(a, o), slice(A, 1, mesh), 0, 0));
    CHECK(at::allclose(es::einshard<"a/tp b, b c -> a c">(a, B, o), at::matmul(A, B)));
    // One rank's operand differs in a first call on this cut: the same error everywhere.
    const auto other = at::randn({n, 7}, at::kDouble).narrow(0, start, a.size(0));
    if (P > 1)
      et::expect_error_everywhere([&] { (void)es::einshard<"a/tp b, b c -> a c">(me ? other : a, B, o); },
                                  "axis 'b'");
  }
}

TEST_CASE("contraction faults: a fault on one rank raises the same error on every rank", "[mpi][binary][faults]") {
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  const bool me = w.rank == et::faulty_rank();
  at::manual_seed(3);
  const auto X = at::randn({5, 7}, at::kDouble), Y = at::randn({7, 4}, at::kDouble);
  const auto x = slice(X, 1, mesh), y = slice(Y, 0, mesh);  // "l f/tp, f/tp e"
  const es::Options o{.mesh = mesh};
  const std::string reduce_scatter = "l f/tp, f/tp e -> l/tp e";
  auto run = [&](const at::Tensor& a, const at::Tensor& b) { (void)es::einshard(reduce_scatter, {a, b}, o); };

  // The contracted axis with another extent on one rank than its shapes say (one column more:
  // the shard may be empty, 7 columns over 8 ranks being [0]*7 + [7]).
  const es::Options with{.mesh = mesh, .shapes = es::Shapes{{"tp", es::compute_split_shapes(7, w.size)}}};
  et::expect_error_everywhere(
      [&] { (void)es::einshard(reduce_scatter, {me ? at::cat({x, at::zeros({5, 1}, at::kDouble)}, 1) : x, y}, with); },
      "axis 'f'");
  // The two operands' shards of the contracted axis disagree on one rank.
  et::expect_error_everywhere([&] { run(x, me ? at::cat({y, at::zeros({1, 4}, at::kDouble)}) : y); }, "axis 'f'");
  // Another dtype, another number of dimensions, another device, on one rank.
  if (w.size > 1) et::expect_error_everywhere([&] { run(me ? x.to(at::kFloat) : x, y); }, "dtype");
  et::expect_error_everywhere([&] { run(me ? x.unsqueeze(0) : x, y); }, "dimensions");
  et::expect_error_everywhere([&] { run(x, me ? at::empty_like(y, at::TensorOptions().device(at::kMeta)) : y); },
                              "CPU");
  // A kept axis that is not whole everywhere.
  if (w.size > 1) et::expect_error_everywhere([&] { run(me ? x.narrow(0, 0, 4) : x, y); }, "axis 'l'");

  // Still usable, and a NaN is data: it spoils exactly the output entries it feeds.
  auto xn = x.clone();
  const bool owns = xn.size(1) > 0;
  if (me && owns) xn[2][0] = std::numeric_limits<double>::quiet_NaN();
  int any = me && owns ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const auto z = es::einshard(reduce_scatter, {xn, y}, o);
  auto Xn = X.clone();
  if (any) Xn[2].fill_(std::numeric_limits<double>::quiet_NaN());  // row 2 of the product is NaN
  const auto want = slice(Xn.mm(Y), 0, mesh);
  CHECK(at::equal(at::isnan(z), at::isnan(want)));
  CHECK(at::allclose(at::nan_to_num(z), at::nan_to_num(want), 1e-12, 1e-12));
}

// ---- a repeated call replays its prepared call (exec/replay.hpp) ------------------------------

namespace {

/// `x` on every rank but the faulty one, where it is `bad`.
at::Tensor on_one(bool me, const at::Tensor& x, const at::Tensor& bad) { return me ? bad : x; }

}  // namespace

TEST_CASE("replay: a repeated row-parallel call checks its operands inside its all-reduce", "[mpi][binary][faults][replay]") {
  // "l f/tp, f/tp e -> l e": the plan's one collective is an all-reduce over the whole mesh, so a
  // repeated call carries its check in that all-reduce and makes no other rendezvous.
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  const bool me = w.rank == et::faulty_rank();
  at::manual_seed(5);
  const auto X = at::randn({5, 7}, at::kDouble), Y = at::randn({7, 4}, at::kDouble);
  const auto x = slice(X, 1, mesh), y = slice(Y, 0, mesh);
  const es::Options o{.mesh = mesh};
  auto row = [&](const at::Tensor& a, const at::Tensor& b) { return es::einshard<"l f/tp, f/tp e -> l e">(a, b, o); };
  for (int i = 0; i < 3; ++i) CHECK(at::allclose(row(x, y), X.mm(Y), 1e-12, 1e-12));  // first agrees, then replays

  // Faults on one rank after the call was prepared: the same error on every rank as a first call.
  et::expect_error_everywhere([&] { (void)row(x, on_one(me, y, at::cat({y, at::zeros({1, 4}, at::kDouble)}))); },
                              "axis 'f'");
  if (w.size > 1) et::expect_error_everywhere([&] { (void)row(on_one(me, x, x.to(at::kFloat)), y); }, "dtype");
  et::expect_error_everywhere([&] { (void)row(on_one(me, x, x.unsqueeze(0)), y); }, "dimensions");
  et::expect_error_everywhere(
      [&] { (void)row(x, on_one(me, y, at::empty_like(y, at::TensorOptions().device(at::kMeta)))); }, "CPU");
  if (w.size > 1) et::expect_error_everywhere([&] { (void)row(on_one(me, x, x.narrow(0, 0, 4)), y); }, "axis 'l'");
  // The shapes change on every rank (a new batch): agreed again and correct, then replayed again.
  const auto X2 = at::randn({6, 7}, at::kDouble);
  for (int i = 0; i < 2; ++i) CHECK(at::allclose(row(slice(X2, 1, mesh), y), X2.mm(Y), 1e-12, 1e-12));
  // A unary all-reduce replays the same way, a 0-d loss too.
  const auto part = X.mm(Y) / w.size;
  auto sum = [&](const at::Tensor& t) { return es::einshard<"l e // tp -> l e">(t, o); };
  for (int i = 0; i < 2; ++i) CHECK(at::allclose(sum(part), X.mm(Y), 1e-12, 1e-12));
  if (w.size > 1) et::expect_error_everywhere([&] { (void)sum(on_one(me, part, part.narrow(0, 0, 4))); }, "axis 'l'");
  et::expect_error_everywhere([&] { (void)sum(on_one(me, part, part.unsqueeze(0))); }, "dimensions");
  if (w.size > 1) et::expect_error_everywhere([&] { (void)sum(on_one(me, part, part.to(at::kFloat))); }, "dtype");
  auto loss = [&](const at::Tensor& t) { return es::einshard<"loss // tp -> loss">(t, o); };
  for (int i = 0; i < 2; ++i) CHECK(loss(at::scalar_tensor(1.0, at::kDouble)).item<double>() == w.size);
  et::expect_error_everywhere([&] { (void)loss(on_one(me, at::scalar_tensor(1.0, at::kDouble), X)); }, "dimensions");
  // Gradients through a replayed call.
  const auto xg = x.clone().requires_grad_(), yg = y.clone().requires_grad_();
  for (int i = 0; i < 2; ++i) {
    xg.mutable_grad().reset();
    yg.mutable_grad().reset();
    (row(xg, yg) * X.mm(Y)).sum().backward();
    CHECK(at::allclose(xg.grad(), slice(X.mm(Y).mm(Y.t()), 1, mesh), 1e-10, 1e-10));
    CHECK(at::allclose(yg.grad(), slice(X.t().mm(X.mm(Y)), 0, mesh), 1e-10, 1e-10));
  }
}

TEST_CASE("replay: a repeated column-parallel call does not synchronise, and a fault is raised at the next collective",
          "[mpi][binary][faults][replay]") {
  // "l f, e/tp f -> l e/tp" moves no data forward. A rank whose operands differ from the prepared
  // ones keeps a pending record; the next collective of the notation on the mesh -- the next call's
  // all-reduce, the next agreement, or this call's own backward all-reduce -- raises on every rank.
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  const bool me = w.rank == et::faulty_rank();
  at::manual_seed(6);
  const auto X = at::randn({5, 7}, at::kDouble), W1 = at::randn({9, 7}, at::kDouble), W2 = at::randn({3, 9}, at::kDouble);
  const auto w1 = slice(W1, 0, mesh), w2 = slice(W2, 1, mesh);
  const es::Options o{.mesh = mesh};
  auto col = [&](const at::Tensor& a, const at::Tensor& b) { return es::einshard<"l f, e/tp f -> l e/tp">(a, b, o); };
  auto row = [&](const at::Tensor& a, const at::Tensor& b) { return es::einshard<"l e/tp, g e/tp -> l g">(a, b, o); };
  auto mlp = [&](const at::Tensor& a) { return row(col(a, w1), w2); };
  const auto want = X.mm(W1.t()).mm(W2.t());
  for (int i = 0; i < 3; ++i) CHECK(at::allclose(mlp(X), want, 1e-12, 1e-12));

  // Only the faulty rank's input differs: the column-parallel call returns on every rank, the
  // row-parallel call after it raises the column-parallel call's error on every rank.
  if (w.size > 1) {
    et::expect_error_everywhere([&] { (void)mlp(on_one(me, X, X.narrow(0, 0, 4))); }, "axis 'l'");
    // Operands that cannot even be contracted on that rank (NaN stands in for its result).
    et::expect_error_everywhere([&] { (void)mlp(on_one(me, X, at::zeros({5, 8}, at::kDouble))); }, "axis 'f'");
    // The next collective is an agreement (a first call of another notation).
    et::expect_error_everywhere(
        [&] {
          (void)col(on_one(me, X, X.narrow(0, 0, 4)), w1);
          (void)es::einshard<"l e/tp -> l e">(col(X, w1), o);
        },
        "axis 'l'");
    // The next collective is the call's own backward.
    et::expect_error_everywhere(
        [&] {
          const auto xg = on_one(me, X, X.narrow(0, 0, 4)).clone().requires_grad_();
          col(xg, w1).sum().backward();
        },
        "axis 'l'");
    et::expect_error_everywhere([&] { (void)mlp(on_one(me, X, X.to(at::kFloat))); }, "dtype");
  }
  et::expect_error_everywhere([&] { (void)mlp(on_one(me, X, X.unsqueeze(0))); }, "dimensions");
  // A new batch on every rank: each rank's column-parallel result is right at once, and the ranks
  // agree on the new shapes at the next collective -- forward or backward -- without an error.
  const auto X2 = at::randn({8, 7}, at::kDouble);
  CHECK(at::allclose(mlp(X2), X2.mm(W1.t()).mm(W2.t()), 1e-12, 1e-12));
  const auto X3 = at::randn({2, 7}, at::kDouble);
  const auto x3 = X3.clone().requires_grad_();
  const auto h = col(x3, w1);
  CHECK(at::allclose(h, slice(X3.mm(W1.t()), 1, mesh), 1e-12, 1e-12));
  (h * slice(X3.mm(W1.t()), 1, mesh)).sum().backward();
  CHECK(at::allclose(x3.grad(), X3.mm(W1.t()).mm(W1), 1e-10, 1e-10));
  for (int i = 0; i < 2; ++i) CHECK(at::allclose(mlp(X3), X3.mm(W1.t()).mm(W2.t()), 1e-12, 1e-12));
  // Gradients of the whole step through replayed calls, against one process.
  const auto xg = X.clone().requires_grad_(), ag = w1.clone().requires_grad_(), bg = w2.clone().requires_grad_();
  for (int i = 0; i < 2; ++i) {
    for (const auto* t : {&xg, &ag, &bg}) t->mutable_grad().reset();
    row(col(xg, ag), bg).sum().backward();
    const auto G = at::ones({5, 3}, at::kDouble);
    CHECK(at::allclose(xg.grad(), G.mm(W2).mm(W1), 1e-10, 1e-10));
    CHECK(at::allclose(ag.grad(), slice(G.mm(W2).t().mm(X), 0, mesh), 1e-10, 1e-10));
    CHECK(at::allclose(bg.grad(), slice(G.t().mm(X.mm(W1.t())), 1, mesh), 1e-10, 1e-10));
  }
}

TEST_CASE("replay: a repeated repartition checks its operands in one small all-reduce", "[mpi][binary][faults][replay]") {
  // "a/tp b -> a b/tp" starts with an all-to-all. A repeated call checks that every rank's operands
  // are those it agreed with (no P-sized exchange) and otherwise agrees in full, as a first call.
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  const bool me = w.rank == et::faulty_rank();
  at::manual_seed(7);
  const auto A = at::randn({7, 5}, at::kDouble);
  const es::Options o{.mesh = mesh};
  auto swap = [&](const at::Tensor& a) { return es::einshard<"a/tp b -> a b/tp">(a, o); };
  const auto a = slice(A, 0, mesh);
  for (int i = 0; i < 3; ++i) CHECK(at::allclose(swap(a), slice(A, 1, mesh), 0, 0));

  // One rank's operand differs after the call was prepared: the same error on every rank.
  if (w.size > 1) {
    et::expect_error_everywhere([&] { (void)swap(on_one(me, a, a.narrow(1, 0, 4))); }, "axis 'b'");
    et::expect_error_everywhere([&] { (void)swap(on_one(me, a, a.to(at::kFloat))); }, "dtype");
  }
  et::expect_error_everywhere([&] { (void)swap(on_one(me, a, a.unsqueeze(0))); }, "dimensions");
  CHECK(at::allclose(swap(a), slice(A, 1, mesh), 0, 0));
  // Every rank's shapes change (uneven shards of a longer axis): agreed again, then replayed.
  const auto A2 = at::randn({3, 11}, at::kDouble);
  for (int i = 0; i < 2; ++i) CHECK(at::allclose(swap(slice(A2, 0, mesh)), slice(A2, 1, mesh), 0, 0));
  // A pending record of a call that moved no data is raised at the repartition's check.
  if (w.size > 1) {
    const auto W = at::randn({9, 5}, at::kDouble);
    auto col = [&](const at::Tensor& x, const at::Tensor& y) { return es::einshard<"l f, e/tp f -> l e/tp">(x, y, o); };
    const auto X = at::randn({4, 5}, at::kDouble);
    for (int i = 0; i < 2; ++i) (void)col(X, slice(W, 0, mesh));
    et::expect_error_everywhere(
        [&] {
          (void)col(on_one(me, X, X.narrow(0, 0, 3)), slice(W, 0, mesh));
          (void)swap(slice(A2, 0, mesh));
        },
        "axis 'l'");
    CHECK(at::allclose(swap(slice(A2, 0, mesh)), slice(A2, 1, mesh), 0, 0));
  }
  // Gradients through a replayed repartition.
  for (int i = 0; i < 2; ++i) {
    const auto ag = a.clone().requires_grad_();
    (swap(ag) * slice(A, 1, mesh)).sum().backward();
    CHECK(at::allclose(ag.grad(), a, 0, 0));
  }
}

}  // namespace test_contraction_faults
