// einroll against at::roll on one process: every mesh, uneven and empty shards, negative shifts,
// shifts larger than the axis, shard-aligned shifts, several axes at once; values and gradients.

#include <functional>

#include "stencil_support.hpp"

namespace test_roll {

using namespace stencil_test;

namespace {

std::vector<std::pair<std::string, std::vector<std::string>>> layouts(const es::Mesh& mesh) {
  switch (mesh.ndim()) {
    case 1: return {{"a/dp b c", {"dp", "", ""}}, {"a b c/dp", {"", "", "dp"}}};
    case 2: return {{"a/sp b/dp c", {"sp", "dp", ""}}, {"a b/dp-sp c", {"", "dp-sp", ""}}};
    default: return {{"a/sp b c/tp", {"sp", "", "tp"}}};
  }
}

using RollRun = std::function<at::Tensor(const std::string&, const at::Tensor&, const es::Shifts&, const es::Options&)>;

/// `run(notation, x, shifts, options)` against at::roll on one process, values and gradients: every
/// mesh and layout, even and empty shards, negative, wrapping and shard-aligned shifts, several
/// axes at once.
void check_every_roll(const RollRun& run) {
  const I64 shape{9, 5, 7};
  const std::vector<std::string> names{"a", "b", "c"};
  for (const auto* mesh : meshes())
    for (const auto& [notation, groups] : layouts(*mesh))
      for (bool holes : {false, true}) {
        Sharding sh{groups};
        std::int64_t sharded = 0;
        while (groups[static_cast<std::size_t>(sharded)].empty()) ++sharded;
        const auto n = shape[static_cast<std::size_t>(sharded)];
        if (holes) sh.given[sharded] = with_empty_shards(n, mesh->size(groups[static_cast<std::size_t>(sharded)]));
        const auto first = sh.sizes(sharded, n, *mesh)[0];
        const auto& axis = names[static_cast<std::size_t>(sharded)];
        const std::vector<es::Shifts> cases{{{axis, 2}},
                                            {{axis, -3}},
                                            {{axis, 3 * n + 1}},
                                            {{axis, -2 * n}},
                                            {{axis, first}},
                                            {{"a", 4}, {"b", -1}, {"c", 5}}};
        for (const auto& shifts : cases) {
          INFO(notation << " on " << label(*mesh) << (holes ? ", empty shards" : "") << ", shift of " << axis
                        << ": " << shifts.begin()->second);
          const auto X = full(shape, 21);
          const es::Options o{.mesh = *mesh, .shapes = sh.shapes(shape, *mesh)};
          check_op(
              *mesh, X, sh, [&, &notation = notation](const at::Tensor& x) { return run(notation, x, shifts, o); },
              [&](const at::Tensor& Xf, int q) {
                std::vector<std::int64_t> s, d;
                for (const auto& [name, shift] : shifts) {
                  s.push_back(shift);
                  d.push_back(std::find(names.begin(), names.end(), name) - names.begin());
                }
                return sh.block(at::roll(Xf, s, d), *mesh, q);
              });
        }
      }
}

}  // namespace

TEST_CASE("einroll: every mesh, shift and layout, uneven and empty shards", "[stencil][roll]") {
  check_every_roll([](const std::string& notation, const at::Tensor& x, const es::Shifts& shifts,
                      const es::Options& o) { return es::einroll(notation, x, shifts, o); });
}

TEST_CASE("prepared einroll: einroll's values and gradients, call after call", "[stencil][roll][prepared]") {
  check_every_roll([](const std::string& notation, const at::Tensor& x, const es::Shifts& shifts,
                      const es::Options& o) {
    const auto roll = es::prepare_roll(notation, x, shifts, o);
    (void)roll(x.detach() * 2);  // an earlier call leaves nothing behind
    return roll(x);
  });
}

TEST_CASE("prepared einroll: its plan is einroll's; another tensor raises on its rank and the ranks it sends rows "
          "to, and no rank waits",
          "[stencil][roll][prepared]") {
  const auto L = fault_layout(29);
  const auto& mesh = L.mesh;
  const auto& x = L.x;
  const es::Options o{.mesh = mesh};
  const es::Shifts shifts{{"a", 1}, {"b", 1}};
  const auto notation = "a" + L.h.substr(1) + " b" + L.w.substr(1);
  const auto roll = es::prepare_roll(notation, x, shifts, o);
  const auto expected = Sharding{L.sharding}.block(at::roll(L.X, {1, 1}, {0, 1}), mesh, mesh.rank());
  for (int call = 0; call < 2; ++call) CHECK(at::equal(roll(x), expected));
  CHECK(at::equal(roll(x), es::einroll(notation, x, shifts, o)));
  check_same(roll.plan(), es::explain_roll(notation, x, shifts, o));
  // A roll by one fetches from the rank before only.
  check_prepared_faults(mesh, faulted_ranks(mesh, L.groups, faulty_rank(), true),
                        [&](const at::Tensor& t) { return roll(t); }, x, expected,
                        {x.narrow(1, 0, x.size(1) - 1), x.to(at::kFloat), x.unsqueeze(0)});
}

TEST_CASE("einroll: compile-time notation; errors on every rank", "[stencil][roll]") {
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto X = full({11, 3}, 2);
  const Sharding sh{{"dp", ""}};
  check_op(
      mesh, X, sh,
      [&](const at::Tensor& x) { return es::einroll<"a/dp b">(x, {{"a", 5}, {"b", -4}}, {.mesh = mesh}); },
      [&](const at::Tensor& Xf, int q) { return sh.block(at::roll(Xf, {5, -4}, {0, 1}), mesh, q); });
  const auto x = sh.block(X, mesh, mesh.rank()).contiguous();
  CHECK(near(es::einroll<"a b">(X, {{"a", -3}}), at::roll(X, {-3}, {0})));
  expect_same_error([&] { (void)es::einroll<"a/dp b">(x, {{"z", 1}}, {.mesh = mesh}); }, "roll axis 'z'");
  expect_same_error([&] { (void)es::einroll<"a/dp b">(x, {{"a", 1}}); }, "needs a mesh");
  expect_same_error([&] { (void)es::einroll<"a/dp b">(x, {{"a", 1}}, {.mesh = mesh, .fill = 1.0}); }, "'.fill'");
  if (es::testing::world().size == 1) return;
  const bool faulty = mesh.rank() == faulty_rank();
  expect_same_error([&] { (void)es::einroll<"a/dp b">(faulty ? x.narrow(1, 0, 2) : x, {{"a", 1}}, {.mesh = mesh}); },
                    "axis 'b'");
  expect_same_error(
      [&] {
        (void)es::einroll<"a/dp b">(x, {{"a", 1}},
                                    {.mesh = mesh, .shapes = es::Shapes{{"dp", es::DimShapes(I64(static_cast<std::size_t>(mesh.size()), 1))}}});
      },
      "shapes metadata");
}

TEST_CASE("einroll and einhalo: non-contiguous shards, integer dtypes", "[stencil][roll]") {
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto X = at::arange(10 * 6, at::kLong).view({10, 6});
  const Sharding sh{{"dp", ""}};
  // A transposed view of this rank's shard, as "b a/dp".
  const auto xt = sh.block(X, mesh, mesh.rank()).contiguous().t();
  if (xt.size(1) > 1) CHECK_FALSE(xt.is_contiguous());
  const auto r = es::einroll<"b a/dp">(xt, {{"a", -7}, {"b", 2}}, {.mesh = mesh});
  CHECK(at::equal(r, sh.block(at::roll(X, {-7, 2}, {0, 1}), mesh, mesh.rank()).t()));
  const auto h = es::einhalo<"b a/dp">(xt, {{"a", {3, 12}}}, {.mesh = mesh, .boundary = es::Boundary::constant, .fill = -1.0});
  const auto [o, s] = sh.range(0, 10, mesh, mesh.rank());
  CHECK(at::equal(h, rows(X, 0, o - 3, o + s + 12, es::Boundary::constant, -1.0).t()));
}

}  // namespace test_roll
