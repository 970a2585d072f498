// The plans of the stencil operations (explain_halo, explain_roll, explain_window, explain_conv
// and es::last_plan() after a call, prepared or not): steps in the order they run, and this rank's bytes, checked
// against the rows each rank's request needs from the others, computed here from the shard sizes
// by brute force (every requested index, its owner). Backward mirrors forward; over all ranks the
// bytes sent equal the bytes received.

#include "stencil_support.hpp"

namespace test_plan {

using namespace stencil_test;

namespace {

constexpr auto halo_step = "halo_forward_accumulate_backward";

/// Rows rank `c` of a group receives from, and sends to, the other ranks when every coordinate q
/// requests the global rows [requests[q].first, requests[q].second): periodic wraps indices,
/// constant leaves those outside the axis out (they are padding).
struct Rows {
  std::int64_t sent = 0, received = 0;
};
Rows traffic(const I64& shards, const std::vector<std::pair<std::int64_t, std::int64_t>>& requests, bool periodic,
             int c) {
  const auto n = std::accumulate(shards.begin(), shards.end(), std::int64_t{0});
  auto owner = [&](std::int64_t row) {
    int q = 0;
    for (std::int64_t start = 0;; ++q) {
      start += shards[static_cast<std::size_t>(q)];
      if (row < start) return q;
    }
  };
  Rows r;
  for (std::size_t q = 0; q < requests.size(); ++q)
    for (auto i = requests[q].first; i < requests[q].second; ++i) {
      auto row = i;
      if (periodic && n > 0) row = ((i % n) + n) % n;
      if (row < 0 || row >= n) continue;
      const int o = owner(row);
      if (static_cast<int>(q) == c && o != c) ++r.received;
      if (static_cast<int>(q) != c && o == c) ++r.sent;
    }
  return r;
}

std::vector<std::pair<std::int64_t, std::int64_t>> halo_requests(const I64& shards, std::int64_t left,
                                                                 std::int64_t right) {
  std::vector<std::pair<std::int64_t, std::int64_t>> r;
  std::int64_t start = 0;
  for (auto s : shards) {
    r.emplace_back(start - left, start + s + right);
    start += s;
  }
  return r;
}

/// The input rows each coordinate's outputs read along a window axis: outputs of `span` rows,
/// `stride` apart over the axis padded by `pad_left`, output j owned by the owner of row
/// j*stride + shift (owned_outputs).
std::vector<std::pair<std::int64_t, std::int64_t>> window_requests(const I64& shards, std::int64_t span,
                                                                   std::int64_t stride, std::int64_t pad_left,
                                                                   std::int64_t pad_right, std::int64_t shift) {
  const auto n = std::accumulate(shards.begin(), shards.end(), std::int64_t{0});
  const auto outputs = (n + pad_left + pad_right - span) / stride + 1;
  std::vector<std::pair<std::int64_t, std::int64_t>> r;
  for (int c = 0; c < static_cast<int>(shards.size()); ++c) {
    const auto [j0, j1] = owned_outputs(shards, outputs, stride, shift, c);
    r.emplace_back(j1 > j0 ? std::pair{j0 * stride - pad_left, (j1 - 1) * stride - pad_left + span}
                           : std::pair<std::int64_t, std::int64_t>{0, 0});
  }
  return r;
}

std::int64_t product(const I64& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

/// The step of an exchange along dimension `d` of a tensor of local shape `shape` (then extended
/// to `extended` rows): its name, group and bytes, backward mirroring forward.
void check_exchange(const es::PlanStep& s, const std::string& axis, const std::string& group, I64& shape,
                    std::int64_t d, Rows rows, std::int64_t extended, std::int64_t element) {
  INFO("step " << s.name << " along " << axis);
  auto others = shape;
  others[static_cast<std::size_t>(d)] = 1;
  const auto row = product(others) * element;
  const auto sent = rows.sent * row, received = rows.received * row;
  CHECK(s.name == (group.empty() ? "pad" : halo_step));
  CHECK(s.group == group);
  CHECK(s.axis == axis);
  CHECK(s.operand == -1);
  CHECK(s.forward.bytes_sent == sent);
  CHECK(s.forward.bytes_received == received);
  CHECK(s.backward.bytes_sent == received);
  CHECK(s.backward.bytes_received == sent);
  CHECK(s.forward.collectives == (sent + received > 0 ? 1 : 0));
  CHECK(s.backward.collectives == s.forward.collectives);
  shape[static_cast<std::size_t>(d)] = extended;
}

/// Over every rank, the bytes sent equal the bytes received, forward and backward.
void check_balanced(const es::Plan& p) {
  std::int64_t v[4] = {p.total_forward().bytes_sent, p.total_forward().bytes_received,
                       p.total_backward().bytes_sent, p.total_backward().bytes_received};
  MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(v[0] == v[1]);
  CHECK(v[2] == v[3]);
}

/// A prepared call's plan, and last_plan() after one of its calls on `args` (the call before it on
/// `mesh` another), are `plan`.
template <class Prepared, class... Args>
void check_prepared_plan(const Prepared& prepared, const es::Plan& plan, const es::Mesh& mesh, const Args&... args) {
  (void)es::einhalo<"q">(at::zeros({1}), {}, {.mesh = mesh});  // local: no collective
  REQUIRE(es::last_plan().notation == "q");
  (void)prepared(args...);
  check_same(es::last_plan(), plan);
  check_same(prepared.plan(), plan);
}

/// Layouts of (b, h, w, c) on a mesh: notation, group per dimension.
std::vector<std::pair<std::string, std::vector<std::string>>> layouts(const es::Mesh& mesh) {
  switch (mesh.ndim()) {
    case 1: return {{"b h/dp w c", {"", "dp", "", ""}}};
    case 2: return {{"b h/sp w/dp c", {"", "sp", "dp", ""}}, {"b h/dp-sp w c", {"", "dp-sp", "", ""}}};
    default: return {{"b h/sp w/tp c", {"", "sp", "tp", ""}}};
  }
}

}  // namespace

TEST_CASE("explain_halo: the bytes of every exchange, in order; last_plan() after einhalo", "[stencil][plan]") {
  const I64 extents{2, 11, 5, 3};
  for (const auto* mesh : meshes())
    for (const auto& [notation, groups] : layouts(*mesh))
      for (bool holes : {false, true})
        for (bool periodic : {false, true})
          for (const auto& halos : {es::Halos{{"h", {2, 1}}, {"w", 1}}, es::Halos{{"h", {14, 2}}}}) {
            Sharding sh{groups};
            if (holes) sh.given[1] = with_empty_shards(extents[1], mesh->size(groups[1]));
            const auto x = sh.block(full(extents, 11), *mesh, mesh->rank()).contiguous();
            const es::Options o{.mesh = *mesh, .shapes = sh.shapes(extents, *mesh),
                                .boundary = periodic ? es::Boundary::periodic : es::Boundary::constant};
            INFO(notation << " on " << label(*mesh) << (holes ? ", empty shards" : "") << (periodic ? ", periodic" : "")
                          << ", halo h " << halos.at("h").left);
            const auto plan = es::explain_halo(notation, x, halos, o);
            CHECK(plan.notation == notation);
            auto shape = x.sizes().vec();
            std::size_t step = 0;
            for (std::int64_t d = 0; d < 4; ++d) {
              const auto name = std::string("bhwc").substr(static_cast<std::size_t>(d), 1);
              const auto h = halos.find(name);
              if (h == halos.end()) continue;
              const auto& g = groups[static_cast<std::size_t>(d)];
              Rows rows;
              if (!g.empty()) {
                const auto shards = sh.sizes(d, extents[static_cast<std::size_t>(d)], *mesh);
                rows = traffic(shards, halo_requests(shards, h->second.left, h->second.right), periodic,
                               coordinate_of(*mesh, g, mesh->rank()));
              }
              REQUIRE(step < plan.steps.size());
              CHECK(plan.steps[step].before == notation);
              check_exchange(plan.steps[step++], name, g, shape, d, rows,
                             x.size(d) + h->second.left + h->second.right, 8);
            }
            CHECK(step == plan.steps.size());
            check_balanced(plan);
            const auto y = es::einhalo(notation, x, halos, o);
            CHECK(y.sizes().vec() == shape);
            check_same(es::last_plan(), plan);
            check_prepared_plan(es::prepare_halo(notation, x, halos, o), plan, *mesh, x);
          }
  // Without a mesh: local padding, nothing sent.
  const auto plan = es::explain_halo<"h w">(full({4, 3}, 2, at::kFloat), {{"w", 2}});
  REQUIRE(plan.steps.size() == 1);
  CHECK(plan.steps[0].name == "pad");
  CHECK(plan.total_forward().bytes_sent + plan.total_forward().bytes_received == 0);
}

TEST_CASE("explain_roll: sharded axes fetch their shifted range, whole ones roll locally", "[stencil][plan]") {
  for (const auto* mesh : meshes()) {
    const auto& g = mesh->names().back();
    for (std::int64_t A : {10, 3})
      for (std::int64_t shift : {0, 1, 5, -4, 13}) {
        const I64 extents{A, 4};
        const Sharding sh{{g, ""}};
        const auto x = sh.block(full(extents, 4, at::kFloat), *mesh, mesh->rank()).contiguous();
        const es::Shifts shifts{{"a", shift}, {"b", -1}};
        const auto notation = "a/" + g + " b";
        const es::Options o{.mesh = *mesh};
        INFO(notation << " on " << label(*mesh) << ", A " << A << ", shift " << shift);
        const auto plan = es::explain_roll(notation, x, shifts, o);
        std::size_t step = 0;
        if (shift % A != 0) {
          const auto shards = sh.sizes(0, A, *mesh);
          const auto s = ((shift % A) + A) % A;
          auto shape = x.sizes().vec();
          REQUIRE(!plan.steps.empty());
          check_exchange(plan.steps[step++], "a", g, shape, 0,
                         traffic(shards, halo_requests(shards, s, -s), true, coordinate_of(*mesh, g, mesh->rank())),
                         x.size(0), 4);
        }
        REQUIRE(step + 1 == plan.steps.size());
        CHECK(plan.steps[step].name == "roll");
        CHECK(plan.steps[step].axis == "b");
        CHECK(plan.steps[step].forward.bytes_sent == 0);
        check_balanced(plan);
        (void)es::einroll(notation, x, shifts, o);
        check_same(es::last_plan(), plan);
        check_prepared_plan(es::prepare_roll(notation, x, shifts, o), plan, *mesh, x);
      }
  }
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto x = Sharding{{"dp"}}.block(full({9}, 1), mesh, mesh.rank()).contiguous();
  check_same(es::explain_roll<"a/dp">(x, {{"a", 2}}, {.mesh = mesh}), es::explain_roll("a/dp", x, {{"a", 2}}, {.mesh = mesh}));
}

TEST_CASE("explain_window: each window axis's exchange, then the unfold", "[stencil][plan]") {
  const I64 extents{2, 13, 6, 2};
  for (const auto* mesh : meshes())
    for (const auto& [notation, groups] : layouts(*mesh))
      for (bool holes : {false, true})
        for (std::int64_t stride : {1, 2})
          for (bool periodic : {false, true}) {
            Sharding sh{groups};
            if (holes) sh.given[1] = with_empty_shards(extents[1], mesh->size(groups[1]));
            const auto x = sh.block(full(extents, 8), *mesh, mesh->rank()).contiguous();
            const auto out = notation.substr(0, notation.rfind(' ')) + " kh kw c";
            const auto full_notation = notation + " -> " + out;
            const es::Options o{.mesh = *mesh, .shapes = sh.shapes(extents, *mesh),
                                .boundary = periodic ? es::Boundary::periodic : es::Boundary::constant,
                                .stride = es::PerAxis{{"h", stride}}, .dilation = es::PerAxis{{"w", 2}}};
            const es::AxisMap windows{{"h", "kh"}, {"w", "kw"}};
            const es::Halos radius{{"h", {1, 2}}, {"w", 1}};
            INFO(full_notation << " on " << label(*mesh) << (holes ? ", empty shards" : "") << ", stride " << stride
                               << (periodic ? ", periodic" : ""));
            const auto plan = es::explain_window(full_notation, x, windows, radius, o);
            REQUIRE(plan.steps.size() == 3);
            auto shape = x.sizes().vec();
            // h: taps 4, stride `stride`, radius (1, 2); w: taps 3, dilation 2, radius (2, 2) rows.
            const std::vector<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t>> axes{
                {"h", 1, 4, stride, 1}, {"w", 2, 5, 1, 2}};
            for (std::size_t i = 0; i < axes.size(); ++i) {
              const auto& [name, d, span, st, left] = axes[i];
              const auto& g = groups[static_cast<std::size_t>(d)];
              const auto extent = extents[static_cast<std::size_t>(d)];
              const auto shards = g.empty() ? I64{extent} : sh.sizes(d, extent, *mesh);
              const auto requests = window_requests(shards, span, st, left, span - 1 - left, 0);
              const auto mine = requests[static_cast<std::size_t>(coordinate_of(*mesh, g, mesh->rank()))];
              check_exchange(plan.steps[i], name, g, shape, d,
                             g.empty() ? Rows{} : traffic(shards, requests, periodic, coordinate_of(*mesh, g, mesh->rank())),
                             mine.second - mine.first, 8);
            }
            CHECK(plan.steps[2].name == "unfold");
            CHECK(plan.steps[2].before == notation);
            CHECK(plan.steps[2].after == out);
            check_balanced(plan);
            (void)es::einwindow(full_notation, x, windows, radius, o);
            check_same(es::last_plan(), plan);
            check_prepared_plan(es::prepare_window(full_notation, x, windows, radius, o), plan, *mesh, x);
          }
}

TEST_CASE("explain_conv: the exchanges, the convolution, the weight and bias reductions", "[stencil][plan]") {
  const I64 extents{2, 12, 5, 3};
  const auto W = full({4, 3, 3, 3}, 21), B = full({4}, 22);
  for (const auto* mesh : meshes())
    for (const auto& g : mesh->names())
      for (std::int64_t stride : {1, 2})
        for (bool valid : {false, true}) {
          const Sharding sh{{"", g, "", ""}};
          const auto x = sh.block(full(extents, 9), *mesh, mesh->rank()).contiguous();
          const auto notation = "b h/" + g + " w c, o c kh kw -> b h/" + g + " w o";
          es::Options o{.mesh = *mesh, .bias = B, .stride = stride};
          if (valid) o.padding = 0;
          INFO(notation << " on " << label(*mesh) << ", stride " << stride << (valid ? ", valid" : ", same"));
          const es::AxisMap windows{{"h", "kh"}, {"w", "kw"}};
          const auto plan = es::explain_conv(notation, x, W, windows, o);
          REQUIRE(plan.steps.size() == 5);
          auto shape = x.sizes().vec();
          const std::int64_t pad = valid ? 0 : 1;  // k = 3: "same" pads one row each side
          const auto shards = sh.sizes(1, extents[1], *mesh);
          const int me = coordinate_of(*mesh, g, mesh->rank());
          const auto h = window_requests(shards, 3, stride, pad, pad, 1 - pad);
          const auto mine = h[static_cast<std::size_t>(me)];
          check_exchange(plan.steps[0], "h", g, shape, 1, traffic(shards, h, false, me), mine.second - mine.first, 8);
          const auto w = window_requests({extents[2]}, 3, stride, pad, pad, 1 - pad)[0];
          check_exchange(plan.steps[1], "w", "", shape, 2, {}, w.second - w.first, 8);
          CHECK(plan.steps[2].name == "convolution");
          CHECK(plan.steps[2].before == "b h/" + g + " w c");
          CHECK(plan.steps[2].after == "b h/" + g + " w o");
          // The weight and bias are whole; their gradients are all-reduced over the input's group.
          const auto P = mesh->size(g);
          for (int operand : {1, 2}) {
            const auto& s = plan.steps[static_cast<std::size_t>(operand) + 2];
            const auto bytes = (operand == 1 ? W : B).numel() * 8;
            CHECK(s.name == "identity_forward_allreduce_backward");
            CHECK(s.group == g);
            CHECK(s.operand == operand);
            CHECK(s.forward.bytes_sent == 0);
            CHECK(s.backward.bytes_sent == 2 * (P - 1) * bytes / P);
            CHECK(s.backward.bytes_received == s.backward.bytes_sent);
            CHECK(s.backward.collectives == 1);
          }
          CHECK(plan.steps[3].before == "o c kh kw");
          check_balanced(plan);
          const auto y = es::einconv(notation, x, W, windows, o);
          CHECK(y.size(1) == (h[static_cast<std::size_t>(me)].second > h[static_cast<std::size_t>(me)].first
                                   ? (mine.second - mine.first - 3) / stride + 1
                                   : 0));
          check_same(es::last_plan(), plan);
          const auto prepared = es::prepare_conv(notation, x, W, windows, o);
          check_prepared_plan(prepared, plan, *mesh, x, W);
          {
            const at::NoGradGuard no_grad;  // the overlapped path runs the same plan
            (void)es::einconv(notation, x, W, windows, o);
            check_same(es::last_plan(), plan);
            check_prepared_plan(prepared, plan, *mesh, x, W);
          }
        }
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto x = Sharding{{"", "dp", "", ""}}.block(full(extents, 9), mesh, mesh.rank()).contiguous();
  check_same(es::explain_conv<"b h/dp w c, o c kh kw -> b h/dp w o">(x, W, {{"h", "kh"}, {"w", "kw"}}, {.mesh = mesh}),
             es::explain_conv("b h/dp w c, o c kh kw -> b h/dp w o", x, W, {{"h", "kh"}, {"w", "kw"}}, {.mesh = mesh}));
}

TEST_CASE("stencil plans: one written notation, families expanded differently, planned apart", "[stencil][plan]") {
  // The same local shapes both times: only the expansion tells the calls apart.
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto x = Sharding{{"", "dp", "", ""}}.block(full({2, 7, 7, 3}, 17), mesh, mesh.rank()).contiguous();
  const es::Halos halos{{"h", 1}};
  for (const auto& [members, expanded] : {std::pair{std::vector<std::string>{"h/dp", "w"}, std::string("b h/dp w c")},
                                          std::pair{std::vector<std::string>{"w/dp", "h"}, std::string("b w/dp h c")}}) {
    const auto y = es::einhalo("b *sp c", x, halos, {.mesh = mesh, .families = {{"sp", members}}});
    CHECK(at::equal(y, es::einhalo(expanded, x, halos, {.mesh = mesh})));
  }
}

}  // namespace test_plan
