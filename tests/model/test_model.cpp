// Sharded models on MPI: registration on a mesh (module registration, dotted names, atomicity),
// init_params, reduce_grads and the DDP-style hooks against one process, [param] notations with
// gradient groups inferred from the plan, einshard_like, and errors that are the same on every rank.
// Every mesh shape that factors the world size is tried; shards are uneven.

#include <ATen/ATen.h>
#include <mpi.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <einshard/einshard.hpp>

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <functional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace test_model {

namespace es = einshard;

namespace {

using es::testing::error_of;
using es::testing::factorizations;

/// True on every rank when every rank has the same text.
bool same_everywhere(const std::string& s) {
  const auto h = static_cast<long long>(std::hash<std::string>{}(s) >> 2);
  long long lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/// The error of `f`, checked to be the same on every rank and to contain `fragment`.
void require_error_everywhere(const std::function<void()>& f, const std::string& fragment) {
  const auto e = error_of(f);
  CHECK_THAT(e, Catch::Contains(fragment));
  CHECK(same_everywhere(e));
}

/// Rows [begin, end) of the split rule's shard `c` of `n` over `p`.
std::pair<std::int64_t, std::int64_t> shard(std::int64_t n, int p, int c) {
  const auto sizes = es::compute_split_shapes(n, p);
  std::int64_t b = 0;
  for (int i = 0; i < c; ++i) b += sizes[static_cast<std::size_t>(i)];
  return {b, b + sizes[static_cast<std::size_t>(c)]};
}

at::Tensor slice(const at::Tensor& t, std::int64_t dim, std::pair<std::int64_t, std::int64_t> r) {
  return t.narrow(dim, r.first, r.second - r.first);
}

bool close(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && at::allclose(a, b, 1e-10, 1e-10);
}

at::TensorOptions f64() { return at::TensorOptions().dtype(at::kDouble); }

/// A parameter holding `value` (a leaf that requires grad).
at::Tensor param(const at::Tensor& value) { return value.clone().set_requires_grad(true); }

struct Block : torch::nn::Module {};

// ---- a DP x SP x TP MLP block in plain torch on local pieces, against one process ------------
//
//   xn = LayerNorm(x) (weight g, bias beta, replicated)   tokens: batch over dp, sequence over sp
//   h  = gelu(xn w1^T + b1)                                w1, b1: hidden rows over tp
//   z  = sum_tp (h w2^T) + b2                              w2: hidden columns over tp; b2 replicated
// The gradient obligations: every parameter sums over the token shards (dp, sp); the norm's also
// over tp, because xn feeds tp shards of the next layer (its gradient arrives partial over tp).

constexpr std::int64_t B = 5, T = 7, C = 6, H = 9;

struct Globals {
  at::Tensor x1, x2, w1, b1, g, beta, w2, b2;
  Globals() {
    at::manual_seed(1234);
    auto r = [&](at::IntArrayRef s) { return at::randn(s, f64()); };
    x1 = r({B, T, C}), x2 = r({B, T, C});
    w1 = r({H, C}), b1 = r({H}), g = 1 + 0.1 * r({C}), beta = r({C}), w2 = r({C, H}), b2 = r({C});
  }
};

struct NormView {
  at::Tensor weight, bias;
};

struct Mlp : torch::nn::Module {
  at::Tensor w1, b1, g, beta, w2, b2;
};

at::Tensor mlp_loss(const Mlp& m, const at::Tensor& x, const es::Mesh* mesh) {
  auto xn = at::layer_norm(x, {C}, m.g, m.beta);
  auto h = at::gelu(at::matmul(xn, m.w1.t()) + m.b1);
  auto z = at::matmul(h, m.w2.t());
  if (mesh) z = es::einshard<"b/dp t/sp c // tp -> b/dp t/sp c">(z, {.mesh = *mesh});
  z = z + m.b2;
  return (z * z).sum();
}

struct Reference {
  at::Tensor w1, b1, g, beta, w2, b2;
};

Reference reference_grads(const Globals& G, bool both) {
  Mlp m;
  m.w1 = param(G.w1), m.b1 = param(G.b1), m.g = param(G.g), m.beta = param(G.beta), m.w2 = param(G.w2),
  m.b2 = param(G.b2);
  auto loss = mlp_loss(m, G.x1, nullptr);
  if (both) loss = loss + mlp_loss(m, G.x2, nullptr);
  loss.backward();
  return {m.w1.grad(), m.b1.grad(), m.g.grad(), m.beta.grad(), m.w2.grad(), m.b2.grad()};
}

struct Sharded {
  std::shared_ptr<Mlp> m = std::make_shared<Mlp>();
  std::pair<std::int64_t, std::int64_t> rb, rt, rh;
  at::Tensor x1, x2;
};

Sharded sharded_mlp(const Globals& G, const es::Mesh& mesh) {
  Sharded s;
  s.rb = shard(B, mesh.size("dp"), mesh.coordinate("dp"));
  s.rt = shard(T, mesh.size("sp"), mesh.coordinate("sp"));
  s.rh = shard(H, mesh.size("tp"), mesh.coordinate("tp"));
  s.x1 = slice(slice(G.x1, 0, s.rb), 1, s.rt);
  s.x2 = slice(slice(G.x2, 0, s.rb), 1, s.rt);
  auto& m = *s.m;
  m.w1 = m.register_parameter("w1", slice(G.w1, 0, s.rh).clone());
  m.b1 = m.register_parameter("b1", slice(G.b1, 0, s.rh).clone());
  m.g = m.register_parameter("g", G.g.clone());
  m.beta = m.register_parameter("beta", G.beta.clone());
  m.w2 = m.register_parameter("w2", slice(G.w2, 1, s.rh).clone());
  m.b2 = m.register_parameter("b2", G.b2.clone());
  es::register_parameter_layout(m.w1, "h/tp c", {.mesh = mesh, .grad = "dp,sp"});
  es::register_parameter_layout(m.b1, "h/tp", {.mesh = mesh, .grad = "dp-sp"});
  NormView norm{m.g, m.beta};  // the same tensors, under the names the registration reads
  es::register_norm_parameters(norm, {.layout = "c", .grad = "dp,sp,tp"}, mesh);
  es::register_parameter_layout(m.w2, "c h/tp", {.mesh = mesh, .grad = "sp-dp"});
  es::register_parameter_layout(m.b2, "c", {.mesh = mesh, .grad = "dp-sp"});
  return s;
}

void check_grads(const Sharded& s, const Reference& r, double scale_dp_sp, double scale_all) {
  const auto& m = *s.m;
  CHECK(close(m.w1.grad(), slice(r.w1, 0, s.rh) * scale_dp_sp));
  CHECK(close(m.b1.grad(), slice(r.b1, 0, s.rh) * scale_dp_sp));
  CHECK(close(m.g.grad(), r.g * scale_all));
  CHECK(close(m.beta.grad(), r.beta * scale_all));
  CHECK(close(m.w2.grad(), slice(r.w2, 1, s.rh) * scale_dp_sp));
  CHECK(close(m.b2.grad(), r.b2 * scale_dp_sp));
}

/// The block's one-process gradients of the first batch's loss and of both batches' losses.
struct BlockCase {
  Globals G;
  Reference ref = reference_grads(G, false), ref2 = reference_grads(G, true);
};

/// Runs `f(case, mesh, sizes)` on every (dp, sp, tp) mesh of the world.
template <class F>
void each_block_mesh(F&& f) {
  const BlockCase c;
  for (const auto& sizes : factorizations(es::testing::world().size, 3)) {
    es::Mesh mesh(MPI_COMM_WORLD, sizes, {"dp", "sp", "tp"});
    f(c, mesh, sizes);
  }
}

/// Steps of a plan that all-reduce the second operand's gradient in backward.
int weight_reductions(const es::Plan& p) {
  int n = 0;
  for (const auto& s : p.steps) n += s.operand == 1 && s.name == "identity_forward_allreduce_backward";
  return n;
}

void zero_grads(Mlp& m) {
  for (auto& p : m.parameters()) p.mutable_grad() = at::Tensor();
}

}  // namespace

TEST_CASE("registration on a mesh: options, errors the same on every rank", "[model]") {
  const auto w = es::testing::world();
  for (const auto& f : factorizations(w.size, 2)) {
    es::Mesh mesh(MPI_COMM_WORLD, f, {"dp", "tp"});
    auto p = param(at::zeros({4, 3}, f64()));
    es::register_parameter_layout(p, "out/tp in", {.mesh = mesh, .grad = "dp", .init_sync = "dp"});
    const auto& s = es::parameter_state(p);
    CHECK(s.reduce() == std::vector<std::string>{"dp"});
    CHECK(s.shared() == std::vector<std::string>{"dp"});
    CHECK(s.shard_groups() == std::vector<std::string>{"tp"});
    // This rank's slice, from its mesh coordinates, through any shape form.
    const auto full = at::zeros({10, 3});
    const auto m = es::param_shard_metadata(s, full.sizes(), mesh);
    const auto r = shard(10, f[1], mesh.coordinate("tp"));
    CHECK(m.local_slices[0] == r);
    CHECK(m.local_shape == std::vector<std::int64_t>{r.second - r.first, 3});
    CHECK(es::param_shard_metadata(s, {10, 3}, mesh).local_slices == m.local_slices);
    auto q = param(at::zeros({4}, f64()));
    require_error_everywhere([&] { es::register_parameter_layout(q, "a/foo", {.mesh = mesh}); },
                             "unknown mesh dimensions: foo");
    require_error_everywhere([&] { es::register_parameter_layout(q, "a/tp", {.mesh = mesh, .grad = "tp"}); },
                             "overlaps the shard dimensions");
    CHECK_FALSE(es::has_parameter_state(q));
  }
}

TEST_CASE("module registration: Linear, Conv (grouped, transposed), norms, dotted names, atomicity", "[model]") {
  const auto w = es::testing::world();
  es::Mesh mesh(MPI_COMM_WORLD, {1, w.size}, {"dp", "tp"});
  torch::nn::Linear lin(4, 6);
  es::register_linear_parameters(*lin, {.weight = "out/tp in", .grad = "dp"}, mesh);
  CHECK(es::parameter_state(lin->bias).layout() == "out/tp");
  CHECK(es::parameter_state(lin->bias).reduce() == std::vector<std::string>{"dp"});
  torch::nn::Linear nobias(torch::nn::LinearOptions(4, 6).bias(false));
  es::register_linear_parameters(*nobias, {.weight = "out in/tp"}, mesh);
  CHECK(es::parameter_state(nobias->weight).layout() == "out in/tp");
  CHECK(es::parameter_state(nobias->weight).shared() == std::vector<std::string>{"dp"});

  torch::nn::Conv2d grouped(torch::nn::Conv2dOptions(4, 8, 3).groups(2));
  es::register_conv_parameters(*grouped, {.grad = "dp-tp"}, mesh);
  CHECK(es::parameter_state(grouped->weight).layout() == "out in kh kw");
  CHECK(es::parameter_state(grouped->bias).layout() == "out");
  torch::nn::Conv1d c1(torch::nn::Conv1dOptions(4, 8, 3).groups(4));  // depthwise-like
  es::register_conv_parameters(*c1, {.weight = "out/tp in k"}, mesh);
  CHECK(es::parameter_state(c1->bias).layout() == "out/tp");
  torch::nn::Conv3d c3(2, 2, 1);
  es::register_conv_parameters(*c3, {}, mesh);
  CHECK(es::parameter_state(c3->weight).layout() == "out in kd kh kw");
  torch::nn::ConvTranspose1d ct(4, 6, 3);
  es::register_conv_parameters(*ct, {}, mesh);
  CHECK(es::parameter_state(ct->weight).layout() == "in out k");
  CHECK(es::parameter_state(ct->bias).layout() == "out");

  torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({6}));
  es::register_norm_parameters(*ln, {.layout = "c", .grad = "dp-tp"}, mesh);
  CHECK(es::parameter_state(ln->weight).reduce() == std::vector<std::string>{"dp-tp"});
  CHECK(es::parameter_state(ln->bias).reduce() == std::vector<std::string>{"dp-tp"});
  torch::nn::LayerNorm plain(torch::nn::LayerNormOptions({6}).elementwise_affine(false));
  CHECK_NOTHROW(es::register_norm_parameters(*plain, {}, mesh));  // nothing to register
  torch::nn::BatchNorm2d bn(8);
  es::register_norm_parameters(*bn, {.layout = "c/tp"}, mesh);
  CHECK(es::parameter_state(bn->weight).shard_groups() == std::vector<std::string>{"tp"});
  torch::nn::GroupNorm gn(2, 8);
  es::register_norm_parameters(*gn, {.grad = "dp"}, mesh);
  CHECK(es::has_parameter_state(gn->bias));
  // A norm registered against its rank fails on both parameters.
  torch::nn::LayerNorm ln2(torch::nn::LayerNormOptions({2, 3}));
  require_error_everywhere([&] { es::register_norm_parameters(*ln2, {}, mesh); }, "names 1 dimensions, but the parameter has 2");
  CHECK_FALSE(es::has_parameter_state(ln2->weight));

  // Dotted names through a module tree; a bad name leaves nothing attached.
  auto block = std::make_shared<Block>();
  auto fc1 = block->register_module("fc1", torch::nn::Linear(4, 6));
  auto fc2 = block->register_module("fc2", torch::nn::Linear(6, 4));
  require_error_everywhere(
      [&] {
        es::register_module_parameter_layouts(*block, {{"fc1.weight", "out/tp in"}, {"fc3.weight", "out in"}},
                                              {.mesh = mesh, .grad = "dp"});
      },
      "no parameter 'fc3.weight' (it has fc1.weight, fc1.bias, fc2.weight, fc2.bias)");
  CHECK_FALSE(es::has_parameter_state(fc1->weight));
  es::register_module_parameter_layouts(*block,
                                        {{"fc1.weight", "out/tp in"}, {"fc1.bias", "out/tp"}, {"fc2.weight", "out in/tp"}},
                                        {.mesh = mesh, .grad = "dp"});
  CHECK(es::parameter_state(fc1->weight).layout() == "out/tp in");
  CHECK(es::parameter_states(*block).size() == 3);
  // A conflicting second registration leaves the first.
  require_error_everywhere([&] { es::register_linear_parameters(*fc1, {.weight = "out in"}, mesh); },
                           "cannot be registered with the layout 'out in'");
  CHECK(es::parameter_state(fc1->weight).layout() == "out/tp in");
}

TEST_CASE("init_params broadcasts over init-sync groups and keeps shards", "[model]") {
  const auto w = es::testing::world();
  for (const auto& f : factorizations(w.size, 2)) {
    es::Mesh mesh(MPI_COMM_WORLD, f, {"dp", "tp"});
    auto block = std::make_shared<Block>();
    const double me = w.rank;
    auto a = block->register_parameter("a", at::full({3, 2}, me, f64()));   // out/tp in: sync over dp
    auto r = block->register_parameter("r", at::full({5}, me, f64()));      // replicated: over dp-tp
    auto k = block->register_parameter("k", at::full({2}, me, f64()));      // init_sync = none
    auto i = block->register_parameter("i", at::full({4}, me, at::TensorOptions().dtype(at::kFloat)));
    block->register_parameter("unregistered", at::full({2}, me, f64()));
    es::register_parameter_layout(a, "out/tp in", {.mesh = mesh});
    es::register_parameter_layout(r, "c", {.mesh = mesh});
    es::register_parameter_layout(k, "c", {.mesh = mesh, .init_sync = "none"});
    es::register_parameter_layout(i, "c/dp", {.mesh = mesh});  // sync over tp
    es::init_params(*block, mesh, {.bucket_bytes = 16});      // several buckets per group
    const int dp = mesh.coordinate("dp"), tp = mesh.coordinate("tp"), T = mesh.size("tp");
    CHECK(at::equal(a, at::full({3, 2}, double(tp), f64())));     // rank (0, tp) is tp
    CHECK(at::equal(r, at::zeros({5}, f64())));
    CHECK(at::equal(k, at::full({2}, me, f64())));
    CHECK(at::equal(i, at::full({4}, float(dp * T), at::TensorOptions().dtype(at::kFloat))));
    CHECK(at::equal(block->named_parameters()["unregistered"], at::full({2}, me, f64())));
    CHECK(a.requires_grad());
  }
}

TEST_CASE("reduce_grads: every gradient of a DP x SP x TP block equals one process's", "[model]") {
  const auto w = es::testing::world();
  each_block_mesh([&](const BlockCase& c, const es::Mesh& mesh, const std::vector<int>& f) {
    auto s = sharded_mlp(c.G, mesh);
    mlp_loss(*s.m, s.x1, &mesh).backward();
    es::reduce_grads(*s.m, mesh);
    check_grads(s, c.ref, 1, 1);
    // Gradient accumulation: two backward passes, one reduction.
    zero_grads(*s.m);
    mlp_loss(*s.m, s.x1, &mesh).backward();
    mlp_loss(*s.m, s.x2, &mesh).backward();
    es::reduce_grads(*s.m, mesh, {.bucket_bytes = 40});
    check_grads(s, c.ref2, 1, 1);
    // DDP's habit: average over dp.
    zero_grads(*s.m);
    mlp_loss(*s.m, s.x1, &mesh).backward();
    es::reduce_grads(*s.m, mesh, {.average = "dp"});
    check_grads(s, c.ref, 1.0 / f[0], 1.0 / f[0]);
    // A gradient only some ranks have counts as zeros on the others; one nobody has stays undefined.
    zero_grads(*s.m);
    if (w.rank == 0) s.m->b2.sum().backward();
    es::reduce_grads(*s.m, mesh);
    // b2 sums over dp-sp: the ranks that share rank 0's tp coordinate (0) see its ones.
    CHECK(close(s.m->b2.grad(), at::full({C}, mesh.coordinate("tp") == 0 ? 1.0 : 0.0, f64())));
    CHECK_FALSE(s.m->w1.grad().defined());
  });
}

TEST_CASE("grad reduction hooks: overlap with backward, accumulation, wait, remove", "[model]") {
  each_block_mesh([&](const BlockCase& c, const es::Mesh& mesh, const std::vector<int>& f) {
    for (std::int64_t bucket : {std::int64_t{25} << 20, std::int64_t{48}}) {
      auto s = sharded_mlp(c.G, mesh);
      auto hooks = es::register_grad_reduction_hooks(*s.m, mesh, {.bucket_bytes = bucket});
      // Buckets: one per (group, dtype) with the default size; small buckets split them.
      CHECK(hooks.bucket_count() >= 2);
      mlp_loss(*s.m, s.x1, &mesh).backward();
      hooks.wait();
      check_grads(s, c.ref, 1, 1);
      hooks.wait();  // nothing ran since: a no-op
      check_grads(s, c.ref, 1, 1);
      zero_grads(*s.m);
      mlp_loss(*s.m, s.x1, &mesh).backward();
      mlp_loss(*s.m, s.x2, &mesh).backward();  // accumulation before one wait
      hooks.wait();
      check_grads(s, c.ref2, 1, 1);
      // Accumulating into existing gradients across waits adds the reduced sums.
      zero_grads(*s.m);
      mlp_loss(*s.m, s.x1, &mesh).backward();
      hooks.wait();
      mlp_loss(*s.m, s.x2, &mesh).backward();
      hooks.wait();
      check_grads(s, c.ref2, 1, 1);
      hooks.remove();
      CHECK(hooks.bucket_count() == 0);
      zero_grads(*s.m);
      mlp_loss(*s.m, s.x1, &mesh).backward();
      es::reduce_grads(*s.m, mesh);  // the hooks are gone: this is the only reduction
      check_grads(s, c.ref, 1, 1);
    }
    auto s = sharded_mlp(c.G, mesh);
    auto hooks = es::register_grad_reduction_hooks(*s.m, mesh, {.average = "dp"});
    mlp_loss(*s.m, s.x1, &mesh).backward();
    hooks.wait();
    check_grads(s, c.ref, 1.0 / f[0], 1.0 / f[0]);
  });
}

TEST_CASE("reductions refuse bad states and options on every rank, without hanging", "[model]") {
  const auto w = es::testing::world();
  es::Mesh mesh(MPI_COMM_WORLD, {w.size, 1}, {"dp", "tp"});
  auto block = std::make_shared<Block>();
  auto p = block->register_parameter("p", at::ones({3}, f64()));
  es::register_parameter_layout(p, "c", {.mesh = mesh, .grad = "async"});
  require_error_everywhere([&] { es::reduce_grads(*block, mesh); }, "'p' ('c [param, grad=async]') has gradient groups pending inference");
  require_error_everywhere([&] { (void)es::register_grad_reduction_hooks(*block, mesh); }, "pending inference");
  require_error_everywhere([&] { es::validate_parameter_states(*block, mesh); }, "'p' ('c [param, grad=async]')");
  CHECK_NOTHROW(es::validate_parameter_states(*block, mesh, /*allow_pending=*/true));
  es::register_parameter_layout(p, "c", {.mesh = mesh, .grad = "dp"});  // resolves the pending groups
  require_error_everywhere([&] { es::reduce_grads(*block, mesh, {.bucket_bytes = 0}); }, "expected .bucket_bytes > 0");
  require_error_everywhere([&] { es::reduce_grads(*block, mesh, {.average = "zz"}); }, "unknown mesh dimensions: zz");
  es::Mesh other(MPI_COMM_WORLD, {1, w.size}, {"a", "b"});
  require_error_everywhere([&] { es::reduce_grads(*block, other); }, "'p' is registered on a different mesh");
  auto frozen = std::make_shared<Block>();
  auto q = frozen->register_parameter("q", at::ones({3}, f64()), /*requires_grad=*/false);
  es::register_parameter_layout(q, "c", {.mesh = mesh, .grad = "dp"});
  require_error_everywhere([&] { (void)es::register_grad_reduction_hooks(*frozen, mesh); }, "does not require grad");
  if (w.size > 1) {
    // Ranks that registered different parameters fail together instead of hanging.
    auto extra = block->register_parameter("extra", at::ones({2}, f64()));
    if (w.rank == 0) es::register_parameter_layout(extra, "c", {.mesh = mesh, .grad = "dp"});
    p.mutable_grad() = at::ones({3}, f64());
    require_error_everywhere([&] { es::reduce_grads(*block, mesh); }, "ranks registered different parameters");
    require_error_everywhere([&] { es::init_params(*block, mesh); }, "ranks registered different parameters");
  }
}

TEST_CASE("[param] notations infer gradient groups from the plan and leave the reduction to the model", "[model][param]") {
  const auto w = es::testing::world();
  constexpr std::int64_t b = 7, c = 4, h = 5;
  at::manual_seed(99);
  const auto X = at::randn({b, c}, f64()), W1 = at::randn({h, c}, f64()), B1 = at::randn({h}, f64()),
             W2 = at::randn({c, h}, f64());
  // One process.
  auto rw1 = param(W1), rb1 = param(B1), rw2 = param(W2);
  auto rz = at::matmul(at::tanh(at::matmul(X, rw1.t()) + rb1), rw2.t());
  (rz * rz).sum().backward();
  for (const auto& f : factorizations(w.size, 2)) {
    es::Mesh mesh(MPI_COMM_WORLD, f, {"dp", "tp"});
    const auto rb = shard(b, f[0], mesh.coordinate("dp")), rh = shard(h, f[1], mesh.coordinate("tp"));
    const auto x = slice(X, 0, rb);
    auto model = std::make_shared<Block>();
    auto w1 = model->register_parameter("w1", slice(W1, 0, rh).clone());
    auto b1 = model->register_parameter("b1", slice(B1, 0, rh).clone());
    auto w2 = model->register_parameter("w2", slice(W2, 1, rh).clone());
    es::register_parameter_layout(b1, "h/tp", {.mesh = mesh, .grad = "dp"});
    const es::Options o{.mesh = mesh};
    auto step = [&] {
      auto y = es::einshard<"b/dp c, h/tp c [param] -> b/dp h/tp">(x, w1, o);
      const auto trace = weight_reductions(es::last_plan());
      auto z = es::einshard("b/dp h/tp, c h/tp [param] -> b/dp c", {at::tanh(y + b1), w2}, o);
      (z * z).sum().backward();
      return trace;
    };
    const auto trace = step();
    // The weights' gradients arrive partial over dp; the plan no longer all-reduces them.
    CHECK(es::parameter_state(w1).reduce() == std::vector<std::string>{"dp"});
    CHECK(es::parameter_state(w1).grad.mode == es::GradMode::inferred);
    CHECK(es::parameter_state(w2).reduce() == std::vector<std::string>{"dp"});
    CHECK(es::parameter_state(w1).shared() == std::vector<std::string>{"dp"});
    CHECK(trace == 0);
    es::reduce_grads(*model, mesh);
    CHECK(close(w1.grad(), slice(rw1.grad(), 0, rh)));
    CHECK(close(b1.grad(), slice(rb1.grad(), 0, rh)));
    CHECK(close(w2.grad(), slice(rw2.grad(), 1, rh)));
    // The same step under the hooks (the states are already attached: a second use merges).
    for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
    {
      auto hooks = es::register_grad_reduction_hooks(*model, mesh, {.bucket_bytes = 64});
      step();
      hooks.wait();
    }
    CHECK(close(w1.grad(), slice(rw1.grad(), 0, rh)));
    CHECK(close(w2.grad(), slice(rw2.grad(), 1, rh)));
    // Three operands: the parameter's deferral is found in whichever stage it is contracted.
    {
      auto m3 = std::make_shared<Block>();
      auto u = m3->register_parameter("u", W1.t().clone());  // c h, replicated
      auto z = es::einshard<"b/dp c, c h [param], e h -> b/dp e">(x, u, at::tanh(W2), o);
      (z * z).sum().backward();
      // Contracted with x first, u's gradient is left partial over dp; contracted with the third
      // operand first, the intermediate's is, and the plan reduces that one: either way it sums once.
      const auto groups = es::parameter_state(u).reduce();
      CHECK((groups.empty() || groups == std::vector<std::string>{"dp"}));
      es::reduce_grads(*m3, mesh);
      auto ru = param(W1.t());
      auto rz = at::matmul(at::matmul(X, ru), at::tanh(W2).t());
      (rz * rz).sum().backward();
      CHECK(close(u.grad(), ru.grad()));
    }
    // Without [param] the plan keeps the all-reduce in backward: the same gradient, no obligation.
    auto v = param(slice(W1, 0, rh));
    (void)es::einshard<"b/dp c, h/tp c -> b/dp h/tp">(x, v, o);
    CHECK(weight_reductions(es::last_plan()) == 1);
    CHECK_FALSE(es::has_parameter_state(v));
    // grad=none keeps the plan's reduction, and says so.
    auto n = param(slice(W1, 0, rh));
    (void)es::einshard<"b/dp c, h/tp c [param, grad=none] -> b/dp h/tp">(x, n, o);
    CHECK(weight_reductions(es::last_plan()) == 1);
    CHECK(es::parameter_state(n).grad.explicit_none);
    // einshard_like: the same state, nothing computed, no tensor but the parameter.
    auto like = param(slice(W1, 0, rh));
    es::einshard_like<"b/dp c, h/tp c [param] -> b/dp h/tp">(like, o);
    CHECK(es::parameter_state(like).reduce() == std::vector<std::string>{"dp"});
    CHECK_FALSE(like.grad().defined());
    auto like2 = param(slice(W2, 1, rh));
    es::einshard_like("b/dp h/tp, c h/tp [param, init_sync=none] -> b/dp c", {at::Tensor(), like2}, o);
    CHECK(es::parameter_state(like2).reduce() == std::vector<std::string>{"dp"});
    CHECK(es::parameter_state(like2).shared().empty());
  }
}

TEST_CASE("[param] errors: before computing, nothing attached, the same on every rank", "[model][param]") {
  const auto w = es::testing::world();
  es::Mesh mesh(MPI_COMM_WORLD, {w.size, 1}, {"dp", "tp"});
  const es::Options o{.mesh = mesh};
  const auto x = at::ones({2, 3}, f64());
  auto p = param(at::ones({4, 3}, f64()));
  require_error_everywhere([&] { (void)es::einshard<"b/dp c, h/tp c [param, grad=tp] -> b/dp h/tp">(x, p, o); },
                           "gradient group 'tp' overlaps the shard dimensions");
  CHECK_FALSE(es::has_parameter_state(p));
  require_error_everywhere([&] { (void)es::einshard<"b/dp c, h c [param, grad=tp] -> b/dp h">(x, p, o); },
                           "arrives partial over 'dp' in this plan; expected gradient groups that include 'dp'");
  CHECK_FALSE(es::has_parameter_state(p));
  require_error_everywhere([&] { (void)es::einshard<"b/dp c, h c [param] -> b/dp h">(x, x, o); },
                           "is not a parameter");
  auto p3 = param(at::ones({4, 3, 2}, f64()));
  require_error_everywhere([&] { (void)es::einshard<"b/dp c, h/tp c [param] -> b/dp h/tp">(x, p3, o); },
                           "names 2 dimensions, but the parameter has 3");
  require_error_everywhere([&] { es::einshard_like<"b/dp c, h/tp c -> b/dp h/tp">(p, o); }, "found none");
  require_error_everywhere([&] { es::einshard_like<"b/dp c, h/zz c [param] -> b/dp h/zz">(p, o); },
                           "unknown mesh dimensions: zz");
  // Two [param] operands: one fails, neither is attached.
  auto px = param(at::ones({2, 3}, f64()));
  auto pw = param(at::ones({4, 3}, f64()));
  require_error_everywhere([&] { (void)es::einshard<"b/dp c [param], h c [param, grad=tp] -> b/dp h">(px, pw, o); },
                           "include 'dp'");
  CHECK_FALSE(es::has_parameter_state(px));
  CHECK_FALSE(es::has_parameter_state(pw));
  // A local notation (no communication, no mesh needed): nothing arrives partial.
  auto local = param(at::ones({3, 5}, f64()));
  (void)es::einshard<"a b, b c [param] -> a c">(at::ones({2, 3}, f64()), local);
  CHECK(es::parameter_state(local).grad.mode == es::GradMode::inferred);
  CHECK(es::parameter_state(local).reduce().empty());
  // A registration that conflicts with an earlier one fails before computing.
  es::register_parameter_layout(p, "h c", {.mesh = mesh, .grad = "none"});
  require_error_everywhere([&] { (void)es::einshard<"b/dp c, h c [param] -> b/dp h">(x, p, o); }, "explicit grad=none");
  CHECK(es::parameter_state(p).grad.explicit_none);
}

TEST_CASE("policies in calls: scope, default, call option; last_candidates", "[model][policy]") {
  const auto w = es::testing::world();
  es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  const auto x = at::ones({6, 8}, f64()), y = at::ones({8, 5}, f64());
  const auto f = shard(8, w.size, w.rank);
  const auto xl = slice(x, 1, f), yl = slice(y, 0, f);
  auto compute_of = [&](const es::Options& o) {
    (void)es::einshard<"l f/tp, f/tp e -> l/tp e">(xl, yl, o);
    return es::last_candidates();
  };
  const auto plain = compute_of({.mesh = mesh});
  REQUIRE_FALSE(plain.empty());
  CHECK(plain.front().status == "selected");
  for (std::size_t i = 1; i < plain.size(); ++i) {
    CHECK(plain[i].status != "selected");
    if (plain[i].status == "ranked") CHECK(plain[i].score >= plain.front().score);
    if (plain[i].status == "rejected") CHECK_FALSE(plain[i].reason.empty());
  }
  // Each way of asking for a policy plans the same as the call option.
  const auto by_option = compute_of({.mesh = mesh, .policy = es::Policy::memory});
  std::vector<es::Candidate> by_scope, by_default, by_weights;
  {
    es::PolicyScope scope(es::Policy::memory);
    by_scope = compute_of({.mesh = mesh});
    es::PolicyScope inner(es::Policy::training);
    CHECK(compute_of({.mesh = mesh}).front().score == Approx(plain.front().score));
  }
  es::set_default_policy(es::Policy::memory);
  by_default = compute_of({.mesh = mesh});
  es::set_default_policy(es::Policy::training);
  {
    es::PolicyScope scope(es::PolicyWeights{.forward = 0, .backward = 0, .peak_bytes = 1});
    by_weights = compute_of({.mesh = mesh});
  }
  CHECK(by_scope.front().compute == by_option.front().compute);
  CHECK(by_scope.front().score == Approx(by_option.front().score));
  CHECK(by_default.front().score == Approx(by_option.front().score));
  // Peak bytes alone rank like the memory mode's leading term.
  CHECK(by_weights.front().compute == by_option.front().compute);
}

}  // namespace test_model
