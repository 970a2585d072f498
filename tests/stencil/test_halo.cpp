// einhalo against one process: the planner alone (pure), then every mesh the world size allows,
// uneven and empty shards, halos wider than one or several shards, every boundary, several axes
// (corners), values and gradients; bad input raises the same es::Error on every rank.

#include <functional>
#include <initializer_list>
#include <set>

#include "stencil_support.hpp"

namespace einshard::plan {  // for Catch's messages
inline std::ostream& operator<<(std::ostream& os, const Interval& i) {
  return os << '[' << i.begin << ", " << i.end << ')';
}
inline std::ostream& operator<<(std::ostream& os, const Piece& p) {
  return os << "{owner " << p.owner << ", source " << p.source << ", target " << p.target << ", length "
            << p.length << '}';
}
}  // namespace einshard::plan

namespace test_halo {

using namespace stencil_test;
namespace plan = einshard::plan;

namespace {

/// The layouts tested on a mesh: notation, group per dimension of (b, h, w, c).
std::vector<std::pair<std::string, std::vector<std::string>>> layouts(const es::Mesh& mesh) {
  switch (mesh.ndim()) {
    case 1: return {{"b h/dp w c", {"", "dp", "", ""}}};
    case 2: return {{"b h/sp w/dp c", {"", "sp", "dp", ""}}, {"b h/dp-sp w c", {"", "dp-sp", "", ""}}};
    default: return {{"b h/sp w/tp c", {"", "sp", "tp", ""}}};
  }
}

/// Mesh rank q's expected halo: rows [o - left, o + s + right) of every halo axis, resolved by the
/// boundary, in axis order.
at::Tensor halo_reference(const at::Tensor& X, const Sharding& sh, const es::Mesh& mesh, int q,
                          const es::Halos& halos, const std::vector<std::string>& names, es::Boundary b,
                          double fill) {
  auto y = X;
  for (std::int64_t d = 0; d < X.dim(); ++d) {
    const auto [o, s] = sh.range(d, X.size(d), mesh, q);
    const auto h = halos.find(names[static_cast<std::size_t>(d)]);
    const auto l = h == halos.end() ? 0 : h->second.left, r = h == halos.end() ? 0 : h->second.right;
    y = rows(y, d, o - l, o + s + r, b, fill);
  }
  return y;
}

}  // namespace

TEST_CASE("halo plan: fetches cut at shard boundaries, wrap and pad", "[stencil][halo]") {
  const I64 shards{3, 3, 3, 1};  // N = 10
  auto f = plan::plan_fetch(shards, {-2, 5}, plan::Edge::constant, "h");
  CHECK(f.pad_left == 2);
  CHECK(f.fetched == 5);
  CHECK(f.pad_right == 0);
  CHECK(f.pieces == std::vector<plan::Piece>{{0, 0, 0, 3}, {1, 0, 3, 2}});

  // Periodic, more than once around: [-12, 1) is 8 9 | 0..9 | 0.
  f = plan::plan_fetch(shards, {-12, 1}, plan::Edge::periodic, "h");
  CHECK(f.fetched == 13);
  CHECK(f.pieces == std::vector<plan::Piece>{{2, 2, 0, 1}, {3, 0, 1, 1}, {0, 0, 2, 3}, {1, 0, 5, 3},
                                             {2, 0, 8, 3}, {3, 0, 11, 1}, {0, 0, 12, 1}});

  // Replicate beyond the end: one real row (the last) copied.
  f = plan::plan_fetch(shards, {12, 15}, plan::Edge::replicate, "h");
  CHECK(f.fetched == 1);
  CHECK(f.pad_right == 2);
  CHECK(f.pieces == std::vector<plan::Piece>{{3, 0, 0, 1}});

  // Empty shards own nothing; a wide halo takes pieces from several owners.
  const I64 holes{0, 2, 0, 0, 3};
  f = plan::plan_fetch(holes, {-1, 6}, plan::Edge::constant, "h");
  CHECK(f.pad_left == 1);
  CHECK(f.pad_right == 1);
  CHECK(f.pieces == std::vector<plan::Piece>{{1, 0, 0, 2}, {4, 0, 2, 3}});
  CHECK_THROWS_AS(plan::plan_fetch(I64{0, 0}, {0, 1}, plan::Edge::periodic, "h"), es::Error);

  // The sends of an owner list its rows in each requester's target order.
  const auto requests = plan::halo_requests(shards, 4, 4);
  const auto ex = plan::plan_exchange(shards, requests, plan::Edge::periodic, 3, "h");
  CHECK(ex.local == 1);
  CHECK(ex.output() == 9);
  CHECK(ex.sends.size() == 3);
  CHECK(ex.rows_sent(3) == 4);  // row 9 twice to rank 1: as its left ghost (wrapped) and its last
  CHECK(ex.rows_received(3) == 8);
}

TEST_CASE("halo plan: window outputs follow their anchor rows", "[stencil][halo]") {
  const I64 shards{3, 3, 3, 1};
  // k = 3, stride 2, same padding: anchors 0 2 4 6 8.
  auto w = plan::plan_window(shards, {3, 1, 2, 1, 1, 1}, "h");
  CHECK(w.output == 5);
  CHECK(w.shards == I64{2, 1, 2, 0});
  CHECK(w.requests == std::vector<plan::Interval>{{-1, 4}, {3, 6}, {5, 10}, {0, 0}});
  // Stride 1, same padding: the output keeps the input's shards.
  w = plan::plan_window(shards, {5, 2, 1, 4, 4, 4}, "h");
  CHECK(w.shards == shards);
  // Valid padding: 8 outputs, each owned by its centre row's owner.
  w = plan::plan_window(shards, {3, 1, 1, 0, 0, 1}, "h");
  CHECK(w.output == 8);
  CHECK(w.shards == I64{2, 3, 3, 0});
  CHECK_THROWS_AS(plan::plan_window(shards, {12, 1, 1, 0, 0, 6}, "h"), es::Error);
}

namespace {

using HaloRun = std::function<at::Tensor(const std::string&, const at::Tensor&, const es::Halos&, const es::Options&)>;

/// `run(notation, x, halos, options)` against one process, values and gradients: every mesh and
/// layout, each extent of h in `extents`, even and empty shards, every boundary (`constant_fill`
/// for the constant one), a halo of two axes and one wider than several shards.
void check_every_halo(std::initializer_list<std::int64_t> extents, std::uint64_t seed, double constant_fill,
                      const HaloRun& run) {
  const std::vector<std::string> names{"b", "h", "w", "c"};
  for (const auto* mesh : meshes())
    for (const auto& [notation, groups] : layouts(*mesh))
      for (std::int64_t H : extents)
        for (bool holes : {false, true})
          for (auto b : {es::Boundary::constant, es::Boundary::periodic, es::Boundary::replicate})
            for (const auto& halos : {es::Halos{{"h", {2, 1}}, {"w", 1}}, es::Halos{{"h", {H + 3, 2}}}}) {
              Sharding sh{groups};
              if (holes) sh.given[1] = with_empty_shards(H, mesh->size(groups[1]));
              const auto X = full({2, H, 5, 3}, seed);
              const double fill = b == es::Boundary::constant ? constant_fill : 0.0;
              es::Options o{.mesh = *mesh, .shapes = sh.shapes({2, H, 5, 3}, *mesh), .boundary = b};
              if (b == es::Boundary::constant) o.fill = fill;
              INFO(notation << " on " << label(*mesh) << ", H " << H << (holes ? ", empty shards" : "")
                            << ", boundary " << static_cast<int>(b) << ", halo h " << halos.at("h").left);
              check_op(
                  *mesh, X, sh, [&, &notation = notation](const at::Tensor& x) { return run(notation, x, halos, o); },
                  [&](const at::Tensor& Xf, int q) { return halo_reference(Xf, sh, *mesh, q, halos, names, b, fill); });
            }
}

}  // namespace

TEST_CASE("einhalo: every mesh, boundary and width, uneven and empty shards", "[stencil][halo]") {
  check_every_halo({11, 3}, 11, 1.5, [](const std::string& notation, const at::Tensor& x, const es::Halos& halos,
                                         const es::Options& o) { return es::einhalo(notation, x, halos, o); });
}

TEST_CASE("einhalo: shards of the caller's own cut agree without shapes metadata", "[stencil][halo]") {
  // The agreement rebuilds every rank's shard sizes from one small all-reduce when every shard but
  // the last is alike (the split rule's cut, or [2, ..., 2, 5]); any other cut ([0, 1, 0, 1, ..., rest]
  // with empty shards) makes every rank all-gather instead. Both must give the same halos, call
  // after call.
  const auto& mesh = mesh_of({es::testing::world().size});
  const int P = mesh.size("dp");
  I64 alike(static_cast<std::size_t>(P), 2);
  alike.back() = 5;
  const std::int64_t n_alike = 2 * (P - 1) + 5;
  for (const auto& [H, cut] : {std::pair{std::int64_t{11}, with_empty_shards(11, P)}, std::pair{n_alike, alike}}) {
    Sharding sh{{"dp", ""}};
    sh.given[0] = cut;
    const auto X = full({H, 4}, 21);
    const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};  // no .shapes
    for (int call = 0; call < 2; ++call)
      check_op(
          mesh, X, sh, [&](const at::Tensor& x) { return es::einhalo<"h/dp w">(x, {{"h", 2}, {"w", 1}}, o); },
          [&](const at::Tensor& Xf, int q) {
            return halo_reference(Xf, sh, mesh, q, {{"h", 2}, {"w", 1}}, {"h", "w"}, es::Boundary::periodic, 0);
          });
  }
}

TEST_CASE("einhalo: compile-time notation, whole axes, float", "[stencil][halo]") {
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto X = full({13, 4}, 5, at::kFloat);
  const Sharding sh{{"dp", ""}};
  check_op(
      mesh, X, sh,
      [&](const at::Tensor& x) {
        return es::einhalo<"h/dp w">(x, {{"h", 1}, {"w", {0, 2}}},
                                     {.mesh = mesh, .boundary = es::Boundary::replicate});
      },
      [&](const at::Tensor& Xf, int q) {
        return halo_reference(Xf, sh, mesh, q, {{"h", 1}, {"w", {0, 2}}}, {"h", "w"},
                              es::Boundary::replicate, 0);
      },
      99, 1e-5);
  // A repeated call reuses its planned exchanges; another shard size plans anew.
  const auto x = sh.block(X, mesh, mesh.rank()).contiguous();
  const es::Options periodic{.mesh = mesh, .boundary = es::Boundary::periodic};
  const auto first = es::einhalo<"h/dp w">(x, {{"h", 2}}, periodic);
  CHECK(at::equal(es::einhalo<"h/dp w">(x, {{"h", 2}}, periodic), first));
  const Sharding shorter{{"dp", ""}};
  const auto X2 = X.narrow(0, 0, 7);
  CHECK(near(es::einhalo<"h/dp w">(shorter.block(X2, mesh, mesh.rank()).contiguous(), {{"h", 2}}, periodic),
             halo_reference(X2, shorter, mesh, mesh.rank(), {{"h", 2}}, {"h", "w"}, es::Boundary::periodic, 0)));
  // No sharded axis: local padding, no mesh needed.
  const auto Y = es::einhalo<"h w">(X, {{"w", 2}}, {.boundary = es::Boundary::periodic});
  CHECK(near(Y, rows(X, 1, -2, 6, es::Boundary::periodic, 0)));
}

TEST_CASE("einhalo: bad input raises the same error on every rank", "[stencil][halo]") {
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto X = full({2, 7, 5}, 3);
  const Sharding sh{{"", "dp", ""}};
  const auto x = sh.block(X, mesh, mesh.rank()).contiguous();
  const es::Options o{.mesh = mesh};
  expect_same_error([&] { (void)es::einhalo<"b h/dp w">(x, {{"q", 1}}, o); }, "halo axis 'q'");
  expect_same_error([&] { (void)es::einhalo<"b h/dp w">(x, {{"h", {-1, 1}}}, o); }, "negative");
  expect_same_error(
      [&] {
        (void)es::einhalo<"b h/dp w">(x, {{"h", 1}},
                                      {.mesh = mesh, .boundary = es::Boundary::periodic, .fill = 2.0});
      },
      "'.fill'");
  expect_same_error([&] { (void)es::einhalo<"b h/dp w">(x, {{"h", 1}}, {.mesh = mesh, .groups = 2}); },
                    "'.groups'");
  expect_same_error([&] { (void)es::einhalo<"b h/dp w">(x, {{"h", 1}}); }, "needs a mesh");
  CHECK_THROWS_AS(es::einhalo("b h/dp w ->", x, {{"h", 1}}, o), es::NotationError);
  if (es::testing::world().size == 1) return;  // faults below need a rank that differs from another
  const bool faulty = mesh.rank() == faulty_rank();
  expect_same_error([&] { (void)es::einhalo<"b h/dp w">(faulty ? x.narrow(2, 0, 4) : x, {{"h", 1}}, o); },
                    "axis 'w'");
  expect_same_error([&] { (void)es::einhalo<"b h/dp w">(faulty ? x[0] : x, {{"h", 1}}, o); }, "dimensions");
  expect_same_error([&] { (void)es::einhalo<"b h/dp w">(x, {{"h", faulty ? 2 : 1}}, o); },
                    "different operation");
}

TEST_CASE("prepared einhalo: einhalo's ghost rows and gradients, call after call", "[stencil][halo][prepared]") {
  check_every_halo({11}, 13, -0.5, [](const std::string& notation, const at::Tensor& x, const es::Halos& halos,
                                     const es::Options& o) {
    const auto halo = es::prepare_halo(notation, x, halos, o);
    (void)halo(x.detach() * 2);  // an earlier call leaves nothing behind
    return halo(x);
  });
}

TEST_CASE("prepared einhalo: its plan is einhalo's, and a call needs only the ranks it exchanges with",
          "[stencil][halo][prepared]") {
  const int W = es::testing::world().size;
  // On a 2 x W/2 mesh the exchange of "h/sp w" runs within a mesh row: the two rows call the
  // prepared halo a different number of times, which any collective over the mesh would not survive.
  const auto& mesh = W % 2 == 0 ? mesh_of({2, W / 2}) : mesh_of({1, W});
  const Sharding sh{{"sp", ""}};
  const auto X = full({2 * W + 3, 4}, 17);
  const auto x = sh.block(X, mesh, mesh.rank()).contiguous();
  const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};
  const es::Halos halos{{"h", {1, 2}}, {"w", 1}};
  const auto halo = es::prepare_halo<"h/sp w">(x, halos, o);
  const auto expected = halo_reference(X, sh, mesh, mesh.rank(), halos, {"h", "w"}, es::Boundary::periodic, 0);
  for (int call = 0; call < (mesh.coordinate("dp") == 0 ? 3 : 1); ++call) CHECK(near(halo(x), expected));
  CHECK(at::equal(halo(x), es::einhalo<"h/sp w">(x, halos, o)));
  const auto mine = halo.plan(), theirs = es::explain_halo<"h/sp w">(x, halos, o);
  REQUIRE(mine.steps.size() == theirs.steps.size());
  for (std::size_t i = 0; i < mine.steps.size(); ++i) {
    CHECK(mine.steps[i].name == theirs.steps[i].name);
    CHECK(mine.steps[i].forward.bytes_sent == theirs.steps[i].forward.bytes_sent);
    CHECK(mine.steps[i].forward.bytes_received == theirs.steps[i].forward.bytes_received);
  }
}

TEST_CASE("prepared einhalo: another tensor raises on its rank and on the ranks it sends rows to, and no rank waits",
          "[stencil][halo][prepared]") {
  const auto L = fault_layout(23);
  const auto& mesh = L.mesh;
  const auto& x = L.x;
  const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};
  const es::Halos halos = L.groups.size() == 2 ? es::Halos{{"h", 1}, {"w", 1}} : es::Halos{{"h", 1}};
  const auto halo = es::prepare_halo(L.h + " " + L.w, x, halos, o);
  const auto expected =
      halo_reference(L.X, Sharding{L.sharding}, mesh, mesh.rank(), halos, {"h", "w"}, es::Boundary::periodic, 0);
  check_prepared_faults(mesh, faulted_ranks(mesh, L.groups, faulty_rank()), [&](const at::Tensor& t) { return halo(t); }, x,
                        expected, {x.narrow(1, 0, x.size(1) - 1), x.to(at::kFloat), x.unsqueeze(0)});
}

}  // namespace test_halo
