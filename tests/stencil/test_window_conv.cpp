// einwindow against unfold and einconv against at::convolution on one process: every mesh, 1-3
// spatial axes, stride, dilation, groups, same/valid/explicit padding, every boundary, bias,
// uneven and empty shards, kernels wider than shards; values and the gradients of the input,
// weight and bias; bad input raises the same es::Error on every rank.

#include "stencil_support.hpp"

#include <functional>
#include <optional>

namespace test_window_conv {

using namespace stencil_test;

namespace {

es::PerAxis per_axis(const std::vector<std::string>& axes, const I64& values) {
  es::PerAxis p(1);
  p.all.reset();
  for (std::size_t i = 0; i < axes.size(); ++i) p.by_axis[axes[i]] = values[i];
  return p;
}

// ---- einwindow ---------------------------------------------------------------------------------

std::vector<std::pair<std::string, std::vector<std::string>>> window_layouts(const es::Mesh& mesh) {
  switch (mesh.ndim()) {
    case 1: return {{"b h/dp w c -> b h/dp w kh kw c", {"", "dp", "", ""}},
                    {"b h/dp w c -> kw c h/dp b kh w", {"", "dp", "", ""}}};
    case 2: return {{"b h/sp w/dp c -> b h/sp w/dp kh kw c", {"", "sp", "dp", ""}}};
    default: return {{"b h/sp w/tp c -> b h/sp w/tp kh kw c", {"", "sp", "tp", ""}}};
  }
}

struct WindowCase {
  es::Halos radius;
  I64 stride, dilation;  // of h, w
  es::Boundary boundary;
};

using WindowRun = std::function<at::Tensor(const std::string&, const at::Tensor&, const es::AxisMap&,
                                           const es::Halos&, const es::Options&)>;

/// `run(notation, x, windows, radius, options)` against unfold on one process, values and
/// gradients: every mesh and layout, even and empty shards, every boundary, stride and dilation.
void check_every_window(const WindowRun& run) {
  const std::vector<std::string> names{"b", "h", "w", "c"}, sources{"h", "w"};
  const std::vector<WindowCase> cases{
      {{{"h", 1}, {"w", {0, 2}}}, {1, 1}, {1, 1}, es::Boundary::constant},
      {{{"h", {2, 1}}, {"w", 1}}, {2, 1}, {1, 2}, es::Boundary::periodic},
      {{{"h", 3}, {"w", 0}}, {3, 2}, {2, 1}, es::Boundary::replicate},
  };
  for (const auto* mesh : meshes())
    for (const auto& [notation, groups] : window_layouts(*mesh))
      for (std::int64_t H : {11, 4})
        for (bool holes : {false, true})
          for (const auto& wc : cases) {
            Sharding sh{groups};
            if (holes) sh.given[1] = with_empty_shards(H, mesh->size(groups[1]));
            const I64 shape{2, H, 6, 2};
            const auto X = full(shape, 31);
            const double fill = wc.boundary == es::Boundary::constant ? 0.5 : 0.0;
            es::Options o{.mesh = *mesh,
                          .shapes = sh.shapes(shape, *mesh),
                          .boundary = wc.boundary,
                          .stride = per_axis(sources, wc.stride),
                          .dilation = per_axis(sources, wc.dilation)};
            if (wc.boundary == es::Boundary::constant) o.fill = fill;
            INFO(notation << " on " << label(*mesh) << ", H " << H << (holes ? ", empty shards" : "")
                          << ", stride " << wc.stride[0] << ", dilation " << wc.dilation[0]);
            const auto arrow = notation.find("->");
            const auto out_names = [&, &notation = notation] {
              std::vector<std::string> v;
              std::string rest = notation.substr(arrow + 2);
              for (std::size_t i = 0; i < rest.size();) {
                while (i < rest.size() && rest[i] == ' ') ++i;
                auto j = i;
                while (j < rest.size() && rest[j] != ' ' && rest[j] != '/') ++j;
                if (j > i) v.push_back(rest.substr(i, j - i));
                while (j < rest.size() && rest[j] != ' ') ++j;
                i = j;
              }
              return v;
            }();
            check_op(
                *mesh, X, sh,
                [&, &notation = notation](const at::Tensor& x) {
                  return run(notation, x, {{"h", "kh"}, {"w", "kw"}}, wc.radius, o);
                },
                [&, &groups = groups](const at::Tensor& Xf, int q) {
                  auto F = Xf;
                  for (std::size_t i = 0; i < 2; ++i) {
                    const auto dim = static_cast<std::int64_t>(i) + 1;
                    const auto& r = wc.radius.at(sources[i]);
                    const auto d = wc.dilation[i], n = Xf.size(dim), span = d * (r.left + r.right) + 1;
                    F = rows(F, dim, -d * r.left, n + d * r.right, wc.boundary, fill).unfold(dim, span, wc.stride[i]);
                    F = F.slice(-1, 0, span, d);
                  }
                  for (std::int64_t dim = 0; dim < 4; ++dim) {
                    const auto& g = groups[static_cast<std::size_t>(dim)];
                    if (g.empty()) continue;
                    const auto c = coordinate_of(*mesh, g, q);
                    const auto i = static_cast<std::size_t>(dim - 1);
                    const auto [j0, j1] = owned_outputs(sh.sizes(dim, Xf.size(dim), *mesh), F.size(dim), wc.stride[i], 0, c);
                    F = F.narrow(dim, j0, j1 - j0);
                  }
                  std::vector<std::string> order = names;
                  order.insert(order.end(), {"kh", "kw"});
                  std::vector<std::int64_t> perm;
                  for (const auto& n : out_names) perm.push_back(std::find(order.begin(), order.end(), n) - order.begin());
                  return F.permute(perm);
                });
          }
}

}  // namespace

TEST_CASE("einwindow: every mesh, radius, stride, dilation and boundary", "[stencil][window]") {
  check_every_window([](const std::string& notation, const at::Tensor& x, const es::AxisMap& windows,
                        const es::Halos& radius, const es::Options& o) {
    return es::einwindow(notation, x, windows, radius, o);
  });
}

TEST_CASE("prepared einwindow: einwindow's values and gradients, call after call", "[stencil][window][prepared]") {
  check_every_window([](const std::string& notation, const at::Tensor& x, const es::AxisMap& windows,
                        const es::Halos& radius, const es::Options& o) {
    const auto window = es::prepare_window(notation, x, windows, radius, o);
    (void)window(x.detach() * 2);  // an earlier call leaves nothing behind
    return window(x);
  });
}

// ---- einconv -----------------------------------------------------------------------------------

namespace {

struct ConvCase {
  std::int64_t stride, dilation, groups;
  std::optional<std::pair<std::int64_t, std::int64_t>> padding;  // every spatial axis; none: same
  es::Boundary boundary;
  double fill;
  bool bias;
};

const std::vector<ConvCase> conv_cases{
    {1, 1, 1, std::nullopt, es::Boundary::constant, 0.0, true},
    {2, 1, 2, std::nullopt, es::Boundary::periodic, 0.0, true},
    {1, 2, 1, std::pair{4, 2}, es::Boundary::replicate, 0.0, false},
    {3, 1, 1, std::pair{0, 0}, es::Boundary::constant, 0.5, true},  // valid
    {2, 2, 4, std::nullopt, es::Boundary::periodic, 0.0, false},
};

/// A convolution over x of shape (b, spatial..., c) sharded as `groups`, weight (o, c/g, k...).
void check_conv(const es::Mesh& mesh, const std::string& notation, const std::vector<std::string>& groups,
                const I64& shape, const I64& kernel, std::int64_t O, const std::vector<std::string>& spatial,
                const std::vector<std::string>& kernels, const ConvCase& cc, bool holes, bool prepared = false) {
  const auto n = spatial.size();
  const auto C = shape.back();
  Sharding sh{groups};
  for (std::size_t i = 0; i < shape.size() && holes; ++i)
    if (!groups[i].empty()) {
      sh.given[static_cast<std::int64_t>(i)] = with_empty_shards(shape[i], mesh.size(groups[i]));
      break;
    }
  const auto X = full(shape, 41);
  I64 w_shape{O, C / cc.groups};
  w_shape.insert(w_shape.end(), kernel.begin(), kernel.end());
  Params params{full(w_shape, 42)};
  if (cc.bias) params.push_back(full({O}, 43));
  es::AxisMap windows;
  for (std::size_t i = 0; i < n; ++i) windows.emplace_back(spatial[i], kernels[i]);
  es::Options o{.mesh = mesh,
                .shapes = sh.shapes(shape, mesh),
                .boundary = cc.boundary,
                .stride = cc.stride,
                .dilation = cc.dilation,
                .groups = cc.groups};
  if (cc.padding) {
    es::Padding p(0);
    p.all.reset();
    for (const auto& s : spatial) p.by_axis[s] = *cc.padding;
    o.padding = p;
  }
  if (cc.boundary == es::Boundary::constant) o.fill = cc.fill;
  INFO((prepared ? "prepared " : "") << notation << " on " << label(mesh) << (holes ? ", empty shards" : "")
                                    << ", stride " << cc.stride
                << ", dilation " << cc.dilation << ", groups " << cc.groups << ", boundary "
                << static_cast<int>(cc.boundary));
  auto run = [&](const at::Tensor& x, const Params& p) {
    auto opts = o;
    if (cc.bias) opts.bias = p[1];
    if (!prepared) return es::einconv(notation, x, p[0], windows, opts);
    const auto conv = es::prepare_conv(notation, x, p[0], windows, opts);
    (void)conv(x.detach() * 2, p[0].detach() * 3);  // an earlier call, with another weight, leaves nothing behind
    return conv(x, p[0]);
  };
  const auto reference = [&](const at::Tensor& Xf, const Params& p, int q) {
    auto F = Xf;
    I64 shifts;
    for (std::size_t i = 0; i < n; ++i) {
      const auto dim = static_cast<std::int64_t>(i) + 1;
      const auto total = cc.dilation * (kernel[i] - 1);
      const auto [l, r] = cc.padding.value_or(std::pair{total / 2, total - total / 2});
      F = rows(F, dim, -l, Xf.size(dim) + r, cc.boundary, cc.fill);
      shifts.push_back(total / 2 - l);
    }
    const I64 stride(n, cc.stride), dilation(n, cc.dilation), zeros(n, 0);
    auto out = at::convolution(F.movedim(-1, 1), p[0], cc.bias ? c10::optional<at::Tensor>(p[1]) : c10::nullopt,
                               stride, zeros, dilation, false, zeros, cc.groups)
                   .movedim(1, -1);
    for (std::int64_t dim = 0; dim + 1 < out.dim(); ++dim) {
      const auto& g = groups[static_cast<std::size_t>(dim)];
      if (g.empty()) continue;
      const auto c = coordinate_of(mesh, g, q);
      const auto sizes = sh.sizes(dim, Xf.size(dim), mesh);
      if (dim == 0) {  // a sharded batch axis keeps its shards
        const auto [start, size] = sh.range(0, out.size(0), mesh, q);
        out = out.narrow(0, start, size);
        continue;
      }
      const auto i = static_cast<std::size_t>(dim - 1);
      const auto [j0, j1] = owned_outputs(sizes, out.size(dim), cc.stride, shifts[i], c);
      out = out.narrow(dim, j0, j1 - j0);
    }
    return out;
  };
  check_op(mesh, X, sh, run, reference, params);
  {  // Without autograd the interior may be convolved while the halo is in flight.
    at::NoGradGuard no_grad;
    CHECK(near(run(sh.block(X, mesh, mesh.rank()).contiguous(), params), reference(X, params, mesh.rank())));
  }
}

}  // namespace

TEST_CASE("einconv: 2-D on every mesh, stride, dilation, groups, padding, boundary, bias", "[stencil][conv]") {
  for (const auto* mesh : meshes()) {
    std::vector<std::pair<std::string, std::vector<std::string>>> layouts;
    switch (mesh->ndim()) {
      case 1: layouts = {{"b h/dp w c, o c kh kw -> b h/dp w o", {"", "dp", "", ""}}}; break;
      case 2: layouts = {{"b h/sp w/dp c, o c kh kw -> b h/sp w/dp o", {"", "sp", "dp", ""}}}; break;
      default: layouts = {{"b h/sp w/tp c, o c kh kw -> b h/sp w/tp o", {"", "sp", "tp", ""}}};
    }
    for (const auto& [notation, groups] : layouts)
      for (std::int64_t H : {11, 4})
        for (bool holes : {false, true})
          for (const auto& cc : conv_cases)
            check_conv(*mesh, notation, groups, {2, H, 7, 4}, {3, 3}, 8, {"h", "w"}, {"kh", "kw"}, cc, holes);
  }
}

TEST_CASE("prepared einconv: einconv's values and gradients, call after call, the weight changing",
          "[stencil][conv][prepared]") {
  for (const auto* mesh : meshes()) {
    const auto& g = mesh->names();
    const auto h = "h/" + g[0], w = mesh->ndim() > 1 ? "w/" + g[1] : std::string("w");
    for (std::int64_t H : {11, 4})
      for (bool holes : {false, true})
        for (const auto& cc : conv_cases)
          check_conv(*mesh, "b " + h + " " + w + " c, o c kh kw -> b " + h + " " + w + " o",
                     {"", g[0], mesh->ndim() > 1 ? g[1] : "", ""}, {2, H, 7, 4}, {3, 3}, 8, {"h", "w"}, {"kh", "kw"},
                     cc, holes, true);
  }
  const auto& line = mesh_of({es::testing::world().size});
  for (const auto& cc : conv_cases)  // kernels wider than shards
    check_conv(line, "b t/dp c, o c k -> b t/dp o", {"", "dp", ""}, {3, 5, 4}, {5}, 4, {"t"}, {"k"}, cc, true, true);
}

TEST_CASE("einconv: 1-D with kernels wider than shards, 3-D, sharded batch", "[stencil][conv]") {
  const auto W = es::testing::world().size;
  const auto& line = mesh_of({W});
  for (const auto& cc : conv_cases)
    for (bool holes : {false, true})
      check_conv(line, "b t/dp c, o c k -> b t/dp o", {"", "dp", ""}, {3, 5, 4}, {5}, 4, {"t"}, {"k"}, cc, holes);
  for (const auto* mesh : meshes()) {
    if (mesh->ndim() < 2) continue;
    const auto& names = mesh->names();
    const auto a = names[0], b = names[1];
    check_conv(*mesh, "b/" + a + " h/" + b + " w c, o c kh kw -> b/" + a + " h/" + b + " w o", {a, b, "", ""},
               {4, 9, 5, 2}, {3, 3}, 4, {"h", "w"}, {"kh", "kw"}, conv_cases[0], false);
    check_conv(*mesh, "b d/" + a + " h/" + b + " w c, o c kd kh kw -> b d/" + a + " h/" + b + " w o",
               {"", a, b, "", ""}, {2, 5, 6, 4, 2}, {3, 3, 3}, 2, {"d", "h", "w"}, {"kd", "kh", "kw"},
               conv_cases[1 + static_cast<std::size_t>(mesh->ndim() % 2)], false);
  }
}

TEST_CASE("einconv and einwindow: compile-time forms, local use, errors on every rank", "[stencil][conv]") {
  const auto& mesh = mesh_of({es::testing::world().size});
  const auto X = full({2, 9, 6, 4}, 5);
  const auto Wt = full({6, 4, 3, 3}, 6);
  const auto Bs = full({6}, 7);
  // Local: at::conv2d with same padding.
  const auto y = es::einconv<"b h w c, o c kh kw -> b h w o">(X, Wt, {{"h", "kh"}, {"w", "kw"}}, {.bias = Bs});
  CHECK(near(y, at::conv2d(X.permute({0, 3, 1, 2}), Wt, Bs, 1, 1).permute({0, 2, 3, 1})));
  const auto p = es::einwindow<"b h w c -> b h w c kh">(X, {{"h", "kh"}}, {{"h", 1}});
  CHECK(near(p, at::constant_pad_nd(X, {0, 0, 0, 0, 1, 1}).unfold(1, 3, 1)));
  const Sharding sh{{"", "dp", "", ""}};
  const auto x = sh.block(X, mesh, mesh.rank()).contiguous();
  const es::Options o{.mesh = mesh};
  const es::AxisMap hw{{"h", "kh"}, {"w", "kw"}};
  auto conv = [&](const at::Tensor& xx, const at::Tensor& w, es::Options opts) {
    return es::einconv<"b h/dp w c, o c kh kw -> b h/dp w o">(xx, w, hw, opts);
  };
  check_op(
      mesh, X, sh, [&](const at::Tensor& xx, const Params& ps) { return conv(xx, ps[0], o); },
      [&](const at::Tensor& Xf, const Params& ps, int q) {
        return sh.block(at::conv2d(Xf.permute({0, 3, 1, 2}), ps[0], {}, 1, 1).permute({0, 2, 3, 1}), mesh, q);
      },
      {Wt});
  expect_same_error([&] { (void)conv(x, Wt, {.mesh = mesh, .groups = 3}); }, "groups");
  expect_same_error([&] { (void)conv(x, Wt, {.mesh = mesh, .bias = full({5}, 1)}); }, "bias");
  expect_same_error([&] { (void)conv(x, Wt, {.mesh = mesh, .padding = es::Padding{{"c", {1, 1}}}}); }, "'.padding'");
  expect_same_error([&] { (void)conv(x, Wt, {.mesh = mesh, .stride = 0}); }, "'.stride'");
  expect_same_error([&] { (void)conv(x, Wt, {.mesh = mesh, .norm = "ortho"}); }, "'.norm'");
  expect_same_error([&] { (void)es::einconv("b h/dp w c, o c/dp kh kw -> b h/dp w o", x, Wt, hw, o); }, "whole");
  expect_same_error([&] { (void)es::einconv("b h/dp w c, o c kh kw -> b h w o", x, Wt, hw, o); }, "sharded over 'dp'");
  expect_same_error([&] { (void)es::einconv("b h/dp w c, o c kh kw -> b h/dp w o", x, Wt, {{"h", "kh"}}, o); },
                    "weight must name only");
  expect_same_error([&] { (void)es::einwindow("b h/dp w c -> b h/dp w c kh", x, {{"h", "kh"}}, {{"w", 1}}, o); },
                    "no radius");
  expect_same_error([&] { (void)es::einwindow("b h/dp w c -> b h/dp w c kh", x, {{"h", "w"}}, {{"h", 1}}, o); },
                    "new and distinct");
  expect_same_error([&] { (void)es::einwindow("b h/dp w c -> b h/dp w c kh/dp", x, {{"h", "kh"}}, {{"h", 1}}, o); },
                    "must be whole");
  if (es::testing::world().size == 1) return;
  const bool faulty = mesh.rank() == faulty_rank();
  expect_same_error([&] { (void)conv(x, faulty ? Wt.narrow(0, 0, 5) : Wt, o); }, "same whole tensor");
  expect_same_error([&] { (void)conv(faulty ? x.narrow(3, 0, 2) : x, Wt, o); }, "axis 'c'");
}

TEST_CASE("prepared einwindow and einconv: their plans; another tensor or weight raises on its rank and the ranks it "
          "sends rows to, and no rank waits",
          "[stencil][window][conv][prepared]") {
  const int W = es::testing::world().size;
  const auto L = fault_layout(51);
  const auto& mesh = L.mesh;
  const auto faulted = faulted_ranks(mesh, L.groups, faulty_rank());
  const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};
  const es::AxisMap hw{{"h", "kh"}, {"w", "kw"}};
  {
    const auto& x = L.x;
    const auto notation = L.h + " " + L.w + " -> " + L.h + " " + L.w + " kh kw";
    const es::Halos radius{{"h", 1}, {"w", 1}};
    const auto window = es::prepare_window(notation, x, hw, radius, o);
    const auto expected = es::einwindow(notation, x, hw, radius, o);
    const auto plan = es::last_plan();
    for (int call = 0; call < 2; ++call) CHECK(at::equal(window(x), expected));
    check_same(window.plan(), plan);
    check_prepared_faults(mesh, faulted, [&](const at::Tensor& t) { return window(t); }, x, expected,
                          {x.narrow(1, 0, x.size(1) - 1), x.to(at::kFloat), x.unsqueeze(0)});
  }
  const Sharding sh{{"", L.sharding[0], L.sharding[1], ""}};
  const auto x = sh.block(full({2, 2 * W + 3, 2 * W + 1, 3}, 52), mesh, mesh.rank()).contiguous();
  const auto Wt = full({4, 3, 3, 3}, 53);
  const auto notation = "b " + L.h + " " + L.w + " c, o c kh kw -> b " + L.h + " " + L.w + " o";
  const auto conv = es::prepare_conv(notation, x, Wt, hw, o);
  const auto expected = es::einconv(notation, x, Wt, hw, o);
  const auto plan = es::last_plan();
  for (int call = 0; call < 2; ++call) CHECK(at::equal(conv(x, Wt), expected));
  check_same(conv.plan(), plan);
  // The weight's values may change between calls; its shape, dtype and device may not.
  CHECK(near(conv(x, 2 * Wt), 2 * expected));
  const auto with = [&](const at::Tensor& xx, const at::Tensor& ww) { return [&conv, xx, ww] { return conv(xx, ww); }; };
  check_prepared_faults(mesh, faulted, with(x, Wt),
                        {{"tensor", with(x.narrow(2, 0, x.size(2) - 1), Wt)},
                         {"tensor", with(x.to(at::kFloat), Wt)},
                         {"weight", with(x, Wt.narrow(0, 0, 3))},
                         {"weight", with(x, Wt.to(at::kFloat))},
                         {"weight", with(x, Wt.unsqueeze(0))}},
                        expected);
}

}  // namespace test_window_conv
