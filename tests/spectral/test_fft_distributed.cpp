// Distributed einfft against the single-process transform, at any world size (ctest runs this
// binary at 1, 2, 3, 4 and 8 ranks), on every mesh whose size is the world size: the 1-D mesh, the
// 2-D factorizations and (2,2,W/4) from 8 ranks on.
//
// Every rank draws the same full tensor from one seed and takes its block by the input layout (split
// rule, or the shapes metadata for uneven and empty shards). The reference is the same notation with
// its sharding removed, run on the full tensor on one process (tests/spectral/test_fft_local.cpp
// checks that against torch::fft directly). Each rank compares its output block with its block of the
// reference, and, for one full random upstream gradient G, its input gradient with its block of the
// reference's input gradient. Faults are injected on one rank; every rank must raise the same Error.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "fault_support.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace test_fft_distributed {

namespace es = einshard;

namespace {

using I64 = std::vector<std::int64_t>;

std::vector<std::vector<int>> mesh_shapes(int W) {
  std::vector<std::vector<int>> out{{W}};
  if (W == 1) return {{1}, {1, 1}, {1, 1, 1}};
  for (int a = 2; a < W; ++a)
    if (W % a == 0) out.push_back({a, W / a});
  if (W == 2 || W == 3) out.push_back({1, W});
  if (W % 4 == 0 && W >= 8) out.push_back({2, 2, W / 4});
  return out;
}

const es::Mesh& mesh_of(const std::vector<int>& sizes) {
  static std::map<std::vector<int>, es::Mesh> cache;
  if (auto it = cache.find(sizes); it != cache.end()) return it->second;
  static const std::vector<std::string> all{"dp", "sp", "tp"};
  std::vector<std::string> names(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
  return cache.emplace(sizes, es::Mesh(MPI_COMM_WORLD, sizes, names)).first->second;
}

std::string label(const es::Mesh& m) {
  std::string s = "(";
  for (std::size_t i = 0; i < m.sizes().size(); ++i) s += (i ? "," : "") + std::to_string(m.sizes()[i]);
  return s + ")";
}

/// One side of a notation: (axis, group) per dimension.
std::vector<std::pair<std::string, std::string>> side(const std::string& notation, bool output) {
  const auto arrow = notation.find("->");
  std::istringstream in(output ? notation.substr(arrow + 2) : notation.substr(0, arrow));
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string tok; in >> tok;) {
    const auto slash = tok.find('/');
    out.emplace_back(tok.substr(0, slash), slash == std::string::npos ? "" : tok.substr(slash + 1));
  }
  return out;
}

std::string unsharded(const std::string& notation) {
  std::string out;
  bool skip = false;
  for (char c : notation) {
    if (c == '/') skip = true;
    else if (c == ' ') skip = false;
    if (!skip) out += c;
  }
  return out;
}

/// Shard sizes of `axis` over `group`: the given ones, or the split rule.
using Given = std::map<std::string, I64>;
I64 sizes_of(const std::string& axis, std::int64_t n, const es::Mesh& mesh, const std::string& group,
             const Given& given) {
  if (auto it = given.find(axis); it != given.end()) return it->second;
  return es::compute_split_shapes(n, mesh.size(group));
}

at::Tensor block(const at::Tensor& t, const std::vector<std::pair<std::string, std::string>>& layout,
                 const es::Mesh& mesh, const Given& given) {
  auto b = t;
  for (std::size_t d = 0; d < layout.size(); ++d) {
    const auto& [axis, group] = layout[d];
    if (group.empty()) continue;
    const auto s = sizes_of(axis, t.size(static_cast<std::int64_t>(d)), mesh, group, given);
    const auto c = static_cast<std::size_t>(mesh.coordinate(group));
    const auto off = std::accumulate(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(c), std::int64_t{0});
    b = b.narrow(static_cast<std::int64_t>(d), off, s[c]);
  }
  return b.contiguous();
}

struct Case {
  std::string notation;
  es::AxisMap axes;
  bool inverse = false;
  bool real = false;
  std::optional<std::string> norm;
  std::map<std::string, std::int64_t, std::less<>> signal;
  Given given;  ///< shard sizes by axis name (input and output axes)
  es::Shapes shapes;
};

/// Runs `c` on `full` distributed over `mesh` and on one process; checks values and gradients.
void check_case(const Case& c, const at::Tensor& full, const es::Mesh& mesh, double tol = 1e-9) {
  const auto in = side(c.notation, false), out = side(c.notation, true);
  es::Options local{.axes = c.axes, .inverse = c.inverse, .real = c.real, .norm = c.norm, .signal_sizes = c.signal};
  auto leaf = full.detach().clone().requires_grad_(true);
  auto ref = es::einfft(unsharded(c.notation), {leaf}, local);
  at::manual_seed(99);
  const auto G = at::randn(ref.sizes(), ref.options());
  ref.backward(G);

  es::Options o = local;
  o.mesh = mesh;
  o.shapes = c.shapes;
  auto x = block(full, in, mesh, c.given).requires_grad_(true);
  auto y = es::einfft(c.notation, {x}, o);
  const auto want = block(ref.detach(), out, mesh, c.given);
  INFO(c.notation << " on " << label(mesh) << (c.inverse ? " inverse" : "") << (c.real ? " real" : "")
                  << " norm " << c.norm.value_or("(unset)") << "\n" << es::last_plan().str());
  REQUIRE(y.sizes() == want.sizes());
  CHECK(at::allclose(y.detach(), want, tol, tol));
  y.backward(block(G, out, mesh, c.given));
  const auto grad_want = block(leaf.grad(), in, mesh, c.given);
  REQUIRE(x.grad().defined());
  CHECK(at::allclose(x.grad(), grad_want, tol, tol));
}

int count(const es::Plan& p, const std::string& name) {
  const auto n = p.names();
  return static_cast<int>(std::count(n.begin(), n.end(), name));
}

const std::vector<std::optional<std::string>> norms{std::nullopt, "backward", "forward", "ortho"};

std::vector<const es::Mesh*> meshes() {
  std::vector<const es::Mesh*> out;
  for (const auto& s : mesh_shapes(es::testing::world().size)) out.push_back(&mesh_of(s));
  return out;
}

}  // namespace

TEST_CASE("einfft distributed: complex slab, standard and transposed output, every norm", "[spectral][fft]") {
  at::manual_seed(5);
  const auto full = at::randn({2, 7, 5, 6}, at::kComplexDouble);
  for (const auto* m : meshes()) {
    const auto g = m->names()[0];
    for (const auto& norm : norms)
      for (const bool inverse : {false, true}) {
        check_case({"b x/" + g + " y z -> b kx/" + g + " ky kz", {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}, inverse,
                    false, norm},
                   full, *m);
        check_case({"b x/" + g + " y z -> b kx ky/" + g + " kz", {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}, inverse,
                    false, norm},
                   full, *m);
      }
    // Transposed output skips the last all-to-all; the standard layout needs it. Over one rank
    // nothing moves at all.
    const int one = m->size(g) > 1 ? 1 : 0;
    const auto xb = block(full, side("b x/" + g + " y z -> b x y z", false), *m, {});
    const es::Options o{.mesh = *m, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}};
    CHECK(count(es::explain_fft("b x/" + g + " y z -> b kx ky/" + g + " kz", {xb}, o), "alltoall_repartition") == one);
    CHECK(count(es::explain_fft("b x/" + g + " y z -> b kx/" + g + " ky kz", {xb}, o), "alltoall_repartition") == 2 * one);
    // Bytes: in the transposed slab each rank keeps 1/P of its block and sends the rest, once;
    // backward sends back what forward received. Sent and received balance over the ranks.
    {
      const auto plan = es::explain_fft("b x/" + g + " y z -> b kx ky/" + g + " kz", {xb}, o);
      std::int64_t sent = plan.total_forward().bytes_sent, received = plan.total_forward().bytes_received;
      CHECK(plan.total_backward().bytes_sent == received);
      CHECK(plan.total_backward().bytes_received == sent);
      const auto P = m->size(g);
      const auto ys = es::compute_split_shapes(5, P);
      const auto mine = static_cast<std::int64_t>(ys[static_cast<std::size_t>(m->coordinate(g))]);
      CHECK(sent == (xb.numel() - xb.size(1) * mine * 2 * 6) * 16);
      MPI_Allreduce(MPI_IN_PLACE, &sent, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &received, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      CHECK(sent == received);
    }
    // The inverse of the transposed layout goes straight back in one transpose.
    const auto kb = block(full, side("b x y/" + g + " z -> b x y z", false), *m, {});
    const es::Options oi{.mesh = *m, .axes = {{"kx", "x"}, {"ky", "y"}, {"kz", "z"}}, .inverse = true};
    CHECK(count(es::explain_fft("b kx ky/" + g + " kz -> b x/" + g + " y z", {kb}, oi), "alltoall_repartition") == one);
  }
}

TEST_CASE("einfft distributed: axes moving between mesh dimensions, pencils, compound groups", "[spectral][fft]") {
  at::manual_seed(6);
  const auto full = at::randn({3, 6, 5, 4}, at::kComplexDouble);
  const es::AxisMap xyz{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
  for (const auto* m : meshes()) {
    const auto& n = m->names();
    if (n.size() < 2) {
      // Every axis of the tensor sharded or transformed: "x y" both sharded needs two dimensions.
      check_case({"b x/" + n[0] + " y z -> kz/" + n[0] + " b ky kx", xyz}, full, *m);
      continue;
    }
    const auto compound = n[0] + "-" + n[1];
    check_case({"b x/" + n[0] + " y z -> b kx ky/" + n[1] + " kz", xyz}, full, *m);
    check_case({"b x/" + n[1] + " y z -> b kx/" + n[0] + " ky kz", xyz, true}, full, *m);
    check_case({"b x/" + n[0] + " y/" + n[1] + " z -> b kx/" + n[0] + " ky/" + n[1] + " kz", xyz}, full, *m);
    check_case({"b x/" + n[0] + " y/" + n[1] + " z -> b kx ky/" + n[0] + " kz/" + n[1], xyz}, full, *m);
    check_case({"b x/" + compound + " y z -> b kx ky/" + compound + " kz", xyz}, full, *m);
    // No axis outside the transform: the first transpose joins two groups into one.
    const auto xy = full.select(0, 1).select(2, 0);
    check_case({"x/" + n[0] + " y/" + n[1] + " -> ky/" + n[0] + " kx/" + n[1], {{"x", "kx"}, {"y", "ky"}}}, xy, *m);
    // A real tensor in a complex transform: the first transpose moves real data.
    check_case({"x/" + n[0] + " y/" + n[1] + " -> ky/" + n[0] + " kx/" + n[1], {{"x", "kx"}, {"y", "ky"}}},
               at::real(xy).contiguous(), *m);
    if (n.size() == 3)
      check_case({"b x/dp y/sp z/tp -> b kx/tp ky/dp kz/sp", xyz}, full, *m);
  }
}

TEST_CASE("einfft distributed: uneven and empty shards from the shapes metadata", "[spectral][fft]") {
  at::manual_seed(7);
  const auto full = at::randn({2, 9, 4}, at::kComplexDouble);
  for (const auto* m : meshes()) {
    const auto g = m->names()[0];
    const auto P = m->size(g);
    // All of x on the last rank, kx spread by the split rule but reversed.
    I64 sx(static_cast<std::size_t>(P), 0), skx = es::compute_split_shapes(9, P);
    sx.back() = 9;
    std::reverse(skx.begin(), skx.end());
    Case c{"b x/" + g + " y -> b kx/" + g + " ky", {{"x", "kx"}, {"y", "ky"}}};
    c.given = {{"x", sx}, {"kx", skx}};
    c.shapes = es::Shapes{{g, {{"x", sx}, {"kx", skx}}}};
    check_case(c, full, *m);
  }
}

TEST_CASE("einfft distributed: real transforms with a sharded half axis, both directions", "[spectral][fft]") {
  at::manual_seed(8);
  const auto full = at::randn({2, 6, 7}, at::kDouble);
  const es::AxisMap f{{"x", "kx"}, {"y", "ky"}};  // y is the half axis
  for (const auto* m : meshes()) {
    const auto& n = m->names();
    const auto g = n[0];
    const auto h = n.size() > 1 ? n[1] : n[0];
    for (const auto& norm : norms) {
      check_case({"b x y/" + g + " -> b kx ky/" + g, f, false, true, norm}, full, *m);
      check_case({"b x/" + g + " y -> b kx/" + g + " ky", f, false, true, norm}, full, *m);
      check_case({"b x/" + g + " y -> b kx ky/" + h, f, false, true, norm}, full, *m);
    }
    const auto spectrum = at::fft_rfftn(full, std::nullopt, at::IntArrayRef{1, 2});  // (2, 6, 4)
    const es::AxisMap i{{"kx", "x"}, {"ky", "y"}};
    for (const auto& norm : norms) {
      check_case({"b kx ky/" + g + " -> b x y/" + g, i, true, true, norm}, spectrum, *m);
      check_case({"b kx/" + g + " ky -> b x/" + h + " y", i, true, true, norm, {{"y", 7}}}, spectrum, *m);
      check_case({"b kx ky/" + g + " -> b x/" + g + " y", i, true, true, norm, {{"ky", 5}}}, spectrum, *m);
    }
  }
}

TEST_CASE("einfft distributed: single precision and a 1-D FFT over a batch", "[spectral][fft]") {
  at::manual_seed(9);
  for (const auto* m : meshes()) {
    const auto g = m->names()[0];
    check_case({"b x/" + g + " -> b k/" + g, {{"x", "k"}}}, at::randn({4, 11}, at::kComplexDouble), *m);
    check_case({"b x/" + g + " y -> b kx ky/" + g, {{"x", "kx"}, {"y", "ky"}}},
               at::randn({2, 8, 8}, at::kComplexFloat), *m, 1e-4);
  }
}

TEST_CASE("einfft distributed: a 1-D FFT of a lone sharded axis, six-step and Bluestein", "[spectral][fft]") {
  at::manual_seed(10);
  // 64 and 36 factor with both factors >= P up to 4 ranks (64 to 8); 30, 2 and 1 do not, but have
  // no better Bluestein length; 7, 97 (primes) and 106 = 2*53 go through Bluestein from 2 ranks on.
  for (const auto* m : meshes()) {
    const auto g = m->names()[0];
    const auto P = m->size(g);
    for (const std::int64_t n : {64, 36, 30, 7, 97, 106, 2, 1}) {
      const auto x = at::randn({n}, at::kComplexDouble);
      for (const auto& norm : norms)
        for (const bool inverse : {false, true})
          check_case({"x/" + g + " -> k/" + g, {{"x", "k"}}, inverse, false, norm}, x, *m);
      check_case({"x/" + g + " -> k/" + g, {{"x", "k"}}, false, true}, at::real(x).contiguous(), *m);
      const auto half = at::fft_rfft(at::real(x));
      for (const auto& norm : norms)
        if (n > 1) check_case({"k/" + g + " -> x/" + g, {{"k", "x"}}, true, true, norm}, half, *m);
      // Signal sizes: odd (no Nyquist bin), and longer than the spectrum (zero padding).
      check_case({"k/" + g + " -> x/" + g, {{"k", "x"}}, true, true, std::nullopt, {{"x", 2 * n + 1}}}, half, *m);
      check_case({"k/" + g + " -> x/" + g, {{"k", "x"}}, true, true, std::nullopt, {{"x", 3}}}, half, *m);
    }
    // Uneven and empty shards in and out: everything on the last rank in, split reversed out.
    for (const std::int64_t n : {64, 97}) {
      I64 sx(static_cast<std::size_t>(P), 0), sk = es::compute_split_shapes(n, P);
      sx.back() = n;
      std::reverse(sk.begin(), sk.end());
      Case c{"x/" + g + " -> k/" + g, {{"x", "k"}}};
      c.given = {{"x", sx}, {"k", sk}};
      c.shapes = es::Shapes{{g, {{"x", sx}, {"k", sk}}}};
      check_case(c, at::randn({n}, at::kComplexDouble), *m);
      c.inverse = true;
      check_case(c, at::randn({n}, at::kComplexDouble), *m);
    }
    check_case({"x/" + g + " -> k/" + g, {{"x", "k"}}}, at::randn({48}, at::kComplexFloat), *m, 1e-4);
    // No transform axes: the layout change alone.
    check_case({"b x/" + g + " -> x b/" + g, {}}, at::randn({5, 6}, at::kComplexDouble), *m);
    if (m->names().size() > 1) {
      const auto& h = m->names()[1];
      check_case({"x/" + g + " -> k/" + h, {{"x", "k"}}}, at::randn({40}, at::kComplexDouble), *m);
      check_case({"x/" + g + "-" + h + " -> k/" + g + "-" + h, {{"x", "k"}}, true}, at::randn({100}, at::kComplexDouble), *m);
      check_case({"x/" + h + " -> k", {{"x", "k"}}}, at::randn({20}, at::kComplexDouble), *m);
    }
    // Three transposes when the rows (8 of 8) line up with the shards, two more to enter and leave
    // them when not; every byte sent is received.
    const auto xb = block(at::randn({64}, at::kComplexDouble), side("x/" + g + " -> k", false), *m, {});
    const auto plan = es::explain_fft("x/" + g + " -> k/" + g, {xb}, {.mesh = *m, .axes = {{"x", "k"}}});
    INFO(plan.str());
    CHECK(count(plan, "alltoall_repartition") == (P == 1 ? 0 : 8 % P == 0 ? 3 : 5));
    std::int64_t sent = plan.total_forward().bytes_sent, received = plan.total_forward().bytes_received;
    CHECK(plan.total_backward().bytes_sent == received);
    MPI_Allreduce(MPI_IN_PLACE, &sent, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &received, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sent == received);
  }
}

TEST_CASE("einfft distributed: without autograd (FFTW passes, in place on the transposes' output)", "[spectral][fft]") {
  // Nothing recorded: the local complex passes may run on FFTW, in place on tensors the call owns.
  // The input must come back untouched and the values equal one process's.
  at::manual_seed(11);
  at::NoGradGuard no_grad;
  for (const auto* m : meshes()) {
    const auto g = m->names()[0];
    auto values = [&](const std::string& notation, const es::AxisMap& axes, const at::Tensor& full, bool inverse,
                      double tol) {
      const auto in = side(notation, false), out = side(notation, true);
      const auto want = es::einfft(unsharded(notation), {full}, {.axes = axes, .inverse = inverse});
      const auto x = block(full, in, *m, {});
      const auto before = x.clone();
      const auto y = es::einfft(notation, {x}, {.mesh = *m, .axes = axes, .inverse = inverse});
      INFO(notation << " on " << label(*m));
      CHECK(at::allclose(y, block(want, out, *m, {}), tol, tol));
      CHECK(at::equal(x, before));
    };
    const es::AxisMap xyz{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
    for (const bool inverse : {false, true}) {
      values("x/" + g + " y z -> kx/" + g + " ky kz", xyz, at::randn({8, 6, 5}, at::kComplexDouble), inverse, 1e-9);
      values("x/" + g + " y z -> kx ky/" + g + " kz", xyz, at::randn({8, 6, 5}, at::kComplexFloat), inverse, 1e-4);
      values("x/" + g + " -> k/" + g, {{"x", "k"}}, at::randn({64}, at::kComplexDouble), inverse, 1e-9);
      values("x/" + g + " -> k/" + g, {{"x", "k"}}, at::randn({97}, at::kComplexDouble), inverse, 1e-9);
    }
  }
}

TEST_CASE("einfft distributed: a repeated transform checks its operands, then agrees again when they change",
          "[spectral][fft]") {
  const auto w = es::testing::world();
  const auto& m = mesh_of({w.size});
  const bool me = w.rank == es::testing::faulty_rank();
  const es::AxisMap axes{{"x", "kx"}, {"y", "ky"}};
  const es::Options o{.mesh = m, .axes = axes};
  const std::string notation = "b x/dp y -> b kx ky/dp";
  at::manual_seed(17);
  auto reference = [&](const at::Tensor& full) {
    return block(es::einfft(unsharded(notation), {full}, {.axes = axes}), side(notation, true), m, {});
  };
  auto run = [&](const at::Tensor& full) { return es::einfft(notation, {block(full, side(notation, false), m, {})}, o); };
  const auto full = at::randn({2, 7, 5}, at::kComplexDouble);
  for (int i = 0; i < 3; ++i) CHECK(at::allclose(run(full), reference(full), 1e-12, 1e-12));  // agrees, then checks
  const auto x = block(full, side(notation, false), m, {});
  es::testing::expect_error_everywhere(
      [&] { (void)es::einfft(notation, {me ? x.unsqueeze(0) : x}, o); }, "dimensions");
  if (w.size > 1)
    es::testing::expect_error_everywhere(
        [&] { (void)es::einfft(notation, {me ? x.narrow(2, 0, 4) : x}, o); }, "axis 'y'");
  CHECK(at::allclose(run(full), reference(full), 1e-12, 1e-12));
  // New shapes on every rank (an empty shard of x from 4 ranks on): agreed again, then checked.
  const auto other = at::randn({3, 3, 6}, at::kComplexDouble);
  for (int i = 0; i < 2; ++i) CHECK(at::allclose(run(other), reference(other), 1e-12, 1e-12));
  // Into an output tensor: the output's description is part of what is checked.
  const auto xo = block(other, side(notation, false), m, {});
  const auto want = reference(other);
  for (int i = 0; i < 2; ++i) {
    auto out = at::zeros(want.sizes(), want.options());
    es::einfft_out(notation, out, xo, o);
    CHECK(at::allclose(out, want, 1e-12, 1e-12));
  }
  es::testing::expect_error_everywhere(
      [&] {
        auto out = at::zeros(want.sizes(), want.options().dtype(me ? at::kComplexFloat : at::kComplexDouble));
        es::einfft_out(notation, out, xo, o);
      },
      "output");
}

TEST_CASE("einfft distributed: faults raise the same error on every rank", "[spectral][fft]") {
  const auto w = es::testing::world();
  const auto& m = mesh_of({w.size});
  const es::Options o{.mesh = m, .axes = {{"x", "kx"}, {"y", "ky"}}};
  // One rank passes a tensor of the wrong rank.
  es::testing::expect_error_everywhere(
      [&] {
        const auto x = w.rank == w.size - 1 ? at::randn({2, 3}, at::kComplexDouble) : at::randn({2, 3, 4}, at::kComplexDouble);
        (void)es::einfft("b x/dp y -> b kx ky/dp", {x}, o);
      },
      "dimensions");
  // Shard sizes that contradict the shapes metadata (on one rank).
  es::testing::expect_error_everywhere(
      [&] {
        const auto x = at::randn({2, w.rank == 0 ? 5 : 2, 4}, at::kComplexDouble);
        es::Options bad = o;
        bad.shapes = es::Shapes{{"dp", {{"x", I64(static_cast<std::size_t>(w.size), 2)}}}};
        (void)es::einfft("b x/dp y -> b kx ky/dp", {x}, bad);
      },
      "shapes metadata");
  // A real forward transform of a complex tensor.
  es::testing::expect_error_everywhere(
      [&] {
        es::Options r = o;
        r.real = true;
        (void)es::einfft("b x/dp y -> b kx ky/dp", {at::randn({2, 2, 4}, at::kComplexDouble)}, r);
      },
      "needs a real tensor");
  // A non-transform axis changing its sharding.
  es::testing::expect_error_everywhere([&] { (void)es::einfft("b/dp x -> b k", {at::randn({2, 4}, at::kComplexDouble)}, {.mesh = m, .axes = {{"x", "k"}}}); },
                  "keep its sharding");
}

namespace {

/// A real transform of `full` over its three axes (x y z; z the half axis) against torch's
/// rfftn/irfftn on the whole tensor: values with autograd off (FFTW's r2c/c2r passes where einshard
/// has FFTW) and on (torch's), and the input gradient for one random upstream gradient.
void check_real(const std::string& notation, const at::Tensor& full, bool inverse, const es::Mesh& mesh,
                const Given& given, const std::optional<std::string>& norm = std::nullopt,
                std::optional<std::int64_t> signal = std::nullopt, double tol = 1e-9) {
  const auto in = side(notation, false), out = side(notation, true);
  std::optional<c10::string_view> n;
  if (norm) n = c10::string_view(norm->data(), norm->size());
  const std::vector<std::int64_t> dims{0, 1, 2};
  auto torch_fft = [&](const at::Tensor& t) {
    if (!inverse) return at::fft_rfftn(t, std::nullopt, dims, n);
    const std::vector<std::int64_t> s{t.size(0), t.size(1), signal.value_or(2 * (t.size(2) - 1))};
    return at::fft_irfftn(t, s, dims, n);
  };
  auto leaf = full.detach().clone().requires_grad_(true);
  auto ref = torch_fft(leaf);
  at::manual_seed(98);
  const auto G = at::randn(ref.sizes(), ref.options());
  ref.backward(G);

  // The shapes metadata of the axes this notation shards.
  es::Shapes shapes;
  for (const auto& l : {in, out})
    for (const auto& [axis, group] : l)
      if (!group.empty() && given.contains(axis)) shapes[group].by_axis[axis] = given.at(axis);
  const auto names = inverse ? es::AxisMap{{"kx", "x"}, {"ky", "y"}, {"kz", "z"}}
                             : es::AxisMap{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
  es::Options o{.mesh = mesh, .shapes = shapes, .axes = names, .inverse = inverse, .real = true, .norm = norm};
  if (signal) o.signal_sizes = {{"z", *signal}};
  INFO(notation << " on " << label(mesh) << (inverse ? " c2r" : " r2c") << " norm " << norm.value_or("(unset)"));
  const auto want = block(ref.detach(), out, mesh, given);
  const auto x = block(full, in, mesh, given);
  {
    at::NoGradGuard no_grad;
    const auto y = es::einfft(notation, {x}, o);
    REQUIRE(y.sizes() == want.sizes());
    CHECK(y.scalar_type() == want.scalar_type());
    CHECK(at::allclose(y, want, tol, tol));
  }
  auto xg = x.clone().requires_grad_(true);
  auto y = es::einfft(notation, {xg}, o);
  REQUIRE(y.sizes() == want.sizes());
  CHECK(at::allclose(y.detach(), want, tol, tol));
  y.backward(block(G, out, mesh, given));
  REQUIRE(xg.grad().defined());
  CHECK(at::allclose(xg.grad(), block(leaf.grad(), in, mesh, given), tol, tol));
}

/// Shard sizes of n over P with the first rank empty (n on the others by the split rule).
I64 first_empty(std::int64_t n, int P) {
  if (P == 1) return {n};
  auto rest = es::compute_split_shapes(n, P - 1);
  rest.insert(rest.begin(), 0);
  return rest;
}

}  // namespace

TEST_CASE("einfft distributed: r2c and c2r against torch's rfftn and irfftn, uneven and empty shards", "[spectral][fft]") {
  at::manual_seed(12);
  const auto W = es::testing::world().size;
  const auto& m = mesh_of({W});
  const auto full = at::randn({5, 3, 6}, at::kDouble);
  const auto spectrum = at::fft_rfftn(at::randn({5, 3, 6}, at::kDouble));  // (5, 3, 4)
  // x: the first rank empty, kx by the split rule; kz: 4 bins, reversed split.
  auto kz = es::compute_split_shapes(4, W);
  std::reverse(kz.begin(), kz.end());
  const Given uneven{{"x", first_empty(5, W)}, {"kx", es::compute_split_shapes(5, W)}, {"ky", first_empty(3, W)}};
  for (const auto& norm : {std::optional<std::string>{}, std::optional<std::string>{"ortho"}}) {
    check_real("x/dp y z -> kx/dp ky kz", full, false, m, uneven, norm);
    check_real("x/dp y z -> kx ky/dp kz", full, false, m, uneven, norm);
    check_real("x y z/dp -> kx ky kz/dp", full, false, m, {{"z", es::compute_split_shapes(6, W)}, {"kz", kz}}, norm);
    check_real("kx/dp ky kz -> x/dp y z", spectrum, true, m, uneven, norm);
    check_real("kx ky/dp kz -> x/dp y z", spectrum, true, m, uneven, norm);
  }
  // An odd signal length (no Nyquist bin), the forward norm, single precision.
  check_real("kx/dp ky kz -> x/dp y z", spectrum, true, m, uneven, "forward", 7);
  check_real("x/dp y z -> kx ky/dp kz", full.to(at::kFloat), false, m, uneven, std::nullopt, std::nullopt, 1e-4);
  check_real("kx ky/dp kz -> x/dp y z", spectrum.to(at::kComplexFloat), true, m, uneven, std::nullopt, std::nullopt, 1e-4);
  // The half axis is transformed before the first transpose, so the transpose moves n/2+1 of n
  // along it: a real transform of 8x4x16 moves 9/16 of what a complex one does.
  const auto r = block(at::randn({8, 4, 16}, at::kDouble), side("x/dp y z -> x", false), m, {});
  const es::Options real{.mesh = m, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}, .real = true};
  const es::Options complex{.mesh = m, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}};
  const auto sent_real = es::explain_fft<"x/dp y z -> kx ky/dp kz">(r, real).total_forward().bytes_sent;
  const auto sent_complex =
      es::explain_fft<"x/dp y z -> kx ky/dp kz">(r.to(at::kComplexDouble), complex).total_forward().bytes_sent;
  CHECK(sent_real * 16 == sent_complex * 9);
}

TEST_CASE("einfft distributed: into an output tensor, and in place", "[spectral][fft]") {
  at::manual_seed(13);
  for (const auto* m : meshes()) {
    const auto g = m->names()[0];
    const es::AxisMap xyz{{"x", "kx"}, {"y", "ky"}, {"z", "kz"}};
    for (const bool grad_mode : {false, true}) {
      at::AutoGradMode mode(grad_mode);
      auto same = [&](const std::string& notation, const at::Tensor& full, const es::Options& o) {
        INFO(notation << " on " << label(*m) << (grad_mode ? " grad mode" : " no grad"));
        const auto x = block(full, side(notation, false), *m, {});
        const auto want = es::einfft(notation, {x}, o);
        auto out = at::full(want.sizes(), 7, want.options());
        auto& back = es::einfft_out(notation, out, x, o);
        CHECK(back.is_same(out));
        CHECK(at::allclose(out, want, 1e-9, 1e-9));
        return want;
      };
      es::Options o{.mesh = *m, .axes = xyz};
      const auto c = at::randn({8, 6, 5}, at::kComplexDouble);
      same("x/" + g + " y z -> kx/" + g + " ky kz", c, o);  // last stage: the transpose back
      same("x/" + g + " y z -> kx ky/" + g + " kz", c, o);  // last stage: a local FFT
      o.inverse = true;
      same("x/" + g + " y z -> kx ky/" + g + " kz", c, o);
      o.inverse = false;
      o.real = true;
      same("x/" + g + " y z -> kx ky/" + g + " kz", at::real(c).contiguous(), o);  // r2c
      o.inverse = true;
      same("x/" + g + " y z -> kx/" + g + " ky kz", c.narrow(2, 0, 3), o);  // c2r
      // In place: the output block is the input's shape (x and kx split alike).
      const es::Options c2c{.mesh = *m, .axes = xyz};
      const auto notation = "x/" + g + " y z -> kx/" + g + " ky kz";
      auto x = block(c, side(notation, false), *m, {});
      const auto want = es::einfft(notation, {x}, c2c);
      const auto storage = x.data_ptr();
      es::einfft_out(notation, x, x, c2c);
      CHECK(x.data_ptr() == storage);
      CHECK(at::allclose(x, want, 1e-9, 1e-9));
    }
    // An output that orders its axes otherwise (FFTW_MPI_TRANSPOSED_OUT's ky-first slabs): the last
    // FFT writes in that order, so the result is contiguous; forward and inverse, into a tensor too.
    {
      at::NoGradGuard no_grad;
      const auto full = at::randn({8, 6, 5}, at::kComplexDouble);
      const auto spectrum = at::fft_fftn(full).permute({1, 0, 2});
      const auto notation = "x/" + g + " y z -> ky/" + g + " kx kz";
      const auto y = es::einfft(notation, {block(full, side(notation, false), *m, {})}, {.mesh = *m, .axes = xyz});
      const auto want = block(spectrum.contiguous(), side(notation, true), *m, {});
      if (m->size(g) == 1) CHECK(y.is_contiguous());  // else the last FFT runs in place, the permute a view
      CHECK(at::allclose(y, want, 1e-9, 1e-9));
      auto out = at::empty_like(want);
      es::einfft_out(notation, out, block(full, side(notation, false), *m, {}), {.mesh = *m, .axes = xyz});
      CHECK(at::allclose(out, want, 1e-9, 1e-9));
      const auto back = es::einfft("ky/" + g + " kx kz -> z y/" + g + " x", {y},
                                   {.mesh = *m, .axes = {{"kx", "x"}, {"ky", "y"}, {"kz", "z"}}, .inverse = true});
      CHECK(at::allclose(back, block(full.permute({2, 1, 0}).contiguous(), side("z y/" + g + " x -> z", false), *m, {}),
                         1e-9, 1e-9));
    }
    // In place on one process, and a compile-time notation.
    auto x = at::randn({4, 6, 5}, at::kComplexDouble);
    const auto want = at::fft_fftn(x);
    es::einfft_out<"x y z -> kx ky kz">(x, x, {.axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}});
    CHECK(at::allclose(x, want, 1e-9, 1e-9));
  }
}

TEST_CASE("einfft distributed: several fields in one exchange", "[spectral][fft]") {
  at::manual_seed(14);
  for (const auto* m : meshes()) {
    const auto g = m->names()[0];
    for (const auto& [notation, real] : {std::pair{"x/" + g + " y z -> kx ky/" + g + " kz", false},
                                        std::pair{"x/" + g + " y z -> kx/" + g + " ky kz", true}}) {
      const es::Options o{.mesh = *m, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}, .real = real};
      const auto dtype = real ? at::kDouble : at::kComplexDouble;
      std::vector<at::Tensor> full, leaves, xs;
      for (int f = 0; f < 3; ++f) {
        full.push_back(at::randn({7, 5, 6}, dtype));
        leaves.push_back(full.back().clone().requires_grad_(true));
        xs.push_back(block(full.back(), side(notation, false), *m, {}).requires_grad_(true));
      }
      INFO(notation << " on " << label(*m));
      const auto ys = es::einfft_many(notation, xs, o);
      const auto many = es::last_plan();
      REQUIRE(ys.size() == 3);
      // One exchange per transpose for all fields: a single field's count, three times its bytes.
      const auto one = es::explain_fft(notation, {xs[0].detach()}, o);
      CHECK(count(many, "alltoall_repartition") == count(one, "alltoall_repartition"));
      CHECK(many.total_forward().bytes_sent == 3 * one.total_forward().bytes_sent);
      at::Tensor loss = at::zeros({}, at::kDouble), ref_loss = at::zeros({}, at::kDouble);
      for (int f = 0; f < 3; ++f) {
        const auto ref = real ? at::fft_rfftn(leaves[static_cast<std::size_t>(f)])
                              : at::fft_fftn(leaves[static_cast<std::size_t>(f)]);
        at::manual_seed(50 + static_cast<std::uint64_t>(f));
        const auto G = at::randn(ref.sizes(), ref.options());
        const auto& y = ys[static_cast<std::size_t>(f)];
        const auto want = block(ref.detach(), side(notation, true), *m, {});
        REQUIRE(y.sizes() == want.sizes());
        CHECK(at::allclose(y.detach(), want, 1e-9, 1e-9));
        loss = loss + at::real(at::sum(y * block(G, side(notation, true), *m, {}).conj()));
        ref_loss = ref_loss + at::real(at::sum(ref * G.conj()));
      }
      loss.backward();
      ref_loss.backward();
      for (std::size_t f = 0; f < 3; ++f) {
        REQUIRE(xs[f].grad().defined());
        CHECK(at::allclose(xs[f].grad(), block(leaves[f].grad(), side(notation, false), *m, {}), 1e-9, 1e-9));
      }
    }
  }
}

TEST_CASE("einfft distributed: bad output tensors and real-transform inputs raise the same error on every rank",
          "[spectral][fft]") {
  const auto w = es::testing::world();
  const auto& m = mesh_of({w.size});
  const es::Options o{.mesh = m, .axes = {{"x", "kx"}, {"y", "ky"}}};
  // y of 4 split over the ranks in and out (so an output block is an input block's shape).
  const auto rows = es::compute_split_shapes(4, w.size)[static_cast<std::size_t>(w.rank)];
  const auto x = at::randn({3, rows}, at::kComplexDouble);
  // A wrong shape on the last rank only.
  es::testing::expect_error_everywhere(
      [&] {
        auto out = at::empty({3, rows + (w.rank == w.size - 1 ? 1 : 0)}, at::kComplexDouble);
        es::einfft_out("x y/dp -> kx ky/dp", out, x, o);
      },
      "the output tensor on rank " + std::to_string(w.size - 1) + " is");
  // A wrong dtype on rank 0 only.
  es::testing::expect_error_everywhere(
      [&] {
        auto out = at::empty({3, rows}, w.rank == 0 ? at::kComplexFloat : at::kComplexDouble);
        es::einfft_out("x y/dp -> kx ky/dp", out, x, o);
      },
      "the output tensor on rank 0 is");
  // An output that would be recorded by autograd.
  es::testing::expect_error_everywhere(
      [&] {
        auto out = at::empty({3, rows}, at::kComplexDouble);
        if (w.rank == 0) out.requires_grad_(true);
        es::einfft_out("x y/dp -> kx ky/dp", out, x, o);
      },
      "under autograd");
  // An output overlapping the input without being it.
  es::testing::expect_error_everywhere(
      [&] {
        auto big = at::randn({3, 8}, at::kComplexDouble);
        auto in = big.narrow(1, 0, rows);
        auto out = w.rank == w.size - 1 ? big.narrow(1, 1, rows) : at::empty({3, rows}, at::kComplexDouble);
        es::einfft_out("x y/dp -> kx ky/dp", out, in, o);
      },
      "overlaps the input");
  // A c2r whose half axis has a single bin gives a signal of length 2(1-1) = 0 unless one is given.
  es::testing::expect_error_everywhere(
      [&] {
        const auto spectrum = at::randn({3, 1}, at::kComplexDouble);
        (void)es::einfft("kx/dp ky -> x/dp y", {spectrum},
                         {.mesh = m, .axes = {{"kx", "x"}, {"ky", "y"}}, .inverse = true, .real = true});
      },
      "give .signal_sizes");
  // Fields of different shapes (on the last rank).
  es::testing::expect_error_everywhere(
      [&] {
        const auto u = at::randn({3, rows}, at::kComplexDouble);
        const auto v = at::randn({3, rows + (w.rank == w.size - 1 ? 1 : 0)}, at::kComplexDouble);
        (void)es::einfft_many("x y/dp -> kx ky/dp", {u, v}, o);
      },
      "differs from field 1");
}

}  // namespace test_fft_distributed
