// tp_dp_training: a few optimizer steps of a transformer block that is tensor-parallel (heads and
// MLP features over `tp`) and data-parallel (batch over `dp`), with the gradient obligations left
// to einshard's DDP-style hooks; its losses and final weights equal the same block trained on one
// process.
//
//   mpirun -n 4 build/release/examples/tp_dp_training        # (dp, tp) = (2, 2)
//
// What it shows:
//   - `[param]` in the notations: einshard_like registers every weight once (layout, init-sync
//     groups, gradient groups inferred from the plan: a weight that does not vary along `dp`
//     while the batch does has a gradient partial over `dp`), and the forward calls leave that
//     all-reduce to the model instead of running one per use in backward;
//   - biases and norms registered by layout (`c`, `f/tp`, with `.grad = "dp"`);
//   - init_params: the replicas of every parameter start equal (here the ranks deliberately start
//     from different values of the replicated parameters);
//   - register_grad_reduction_hooks: one all-reduce per bucket, started during backward; wait()
//     before the optimizer step.
// Uneven shards: 5 sequences over dp, 3 heads and 10 MLP features over tp.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/nn/module.h>

#include <einshard/einshard.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

namespace es = einshard;

namespace {

constexpr std::int64_t batch = 5, seq = 4, embed = 8, heads = 3, head_dim = 2, hidden = 10;
constexpr int steps = 3;
constexpr double lr = 0.05;
const double scale = 1.0 / std::sqrt(double(head_dim));

struct Params : torch::nn::Module {
  at::Tensor g1, n1, wq, wk, wv, wo, g2, n2, w1, c1, w2, c2;
};

const char* names[] = {"g1", "n1", "wq", "wk", "wv", "wo", "g2", "n2", "w1", "c1", "w2", "c2"};

std::map<std::string, at::Tensor> global_weights() {
  at::manual_seed(7);
  auto r = [](at::IntArrayRef s, double k) { return k * at::randn(s, at::TensorOptions().dtype(at::kDouble)); };
  return {{"g1", 1 + r({embed}, 0.1)}, {"n1", r({embed}, 0.1)},          {"wq", r({heads, head_dim, embed}, 0.3)},
          {"wk", r({heads, head_dim, embed}, 0.3)}, {"wv", r({heads, head_dim, embed}, 0.3)},
          {"wo", r({embed, heads, head_dim}, 0.3)}, {"g2", 1 + r({embed}, 0.1)}, {"n2", r({embed}, 0.1)},
          {"w1", r({hidden, embed}, 0.3)},          {"c1", r({hidden}, 0.1)},    {"w2", r({embed, hidden}, 0.3)},
          {"c2", r({embed}, 0.1)}};
}

/// The block on one process, in plain torch; the loss is the mean square of the output.
at::Tensor reference_loss(const at::Tensor& x, std::map<std::string, at::Tensor>& w) {
  auto xn = at::layer_norm(x, {embed}, w["g1"], w["n1"]);
  auto q = at::einsum("bse,hde->bshd", {xn, w["wq"]});
  auto k = at::einsum("bse,hde->bshd", {xn, w["wk"]});
  auto v = at::einsum("bse,hde->bshd", {xn, w["wv"]});
  auto p = at::softmax(at::einsum("bshd,bthd->bhst", {q, k}) * scale, -1);
  auto y = x + at::einsum("bshd,ehd->bse", {at::einsum("bhst,bthd->bshd", {p, v}), w["wo"]});
  auto m = at::gelu(at::einsum("bse,fe->bsf", {at::layer_norm(y, {embed}, w["g2"], w["n2"]), w["w1"]}) + w["c1"]);
  auto out = y + at::einsum("bsf,ef->bse", {m, w["w2"]}) + w["c2"];
  return (out * out).sum() / double(batch * seq * embed);
}

/// The same block on this rank's batch rows, heads and features; its loss is this rank's share.
at::Tensor parallel_loss(const at::Tensor& x, const Params& w, const es::Options& o) {
  auto xn = at::layer_norm(x, {embed}, w.g1, w.n1);
  auto q = es::einshard<"b/dp s e, h/tp d e [param] -> b/dp s h/tp d">(xn, w.wq, o);
  auto k = es::einshard<"b/dp s e, h/tp d e [param] -> b/dp s h/tp d">(xn, w.wk, o);
  auto v = es::einshard<"b/dp s e, h/tp d e [param] -> b/dp s h/tp d">(xn, w.wv, o);
  auto p = at::softmax(es::einshard<"b/dp s h/tp d, b/dp t h/tp d -> b/dp h/tp s t">(q, k, o) * scale, -1);
  auto a = es::einshard<"b/dp h/tp s t, b/dp t h/tp d -> b/dp s h/tp d">(p, v, o);
  auto y = x + es::einshard<"b/dp s h/tp d, e h/tp d [param] -> b/dp s e">(a, w.wo, o);
  auto yn = at::layer_norm(y, {embed}, w.g2, w.n2);
  auto m = at::gelu(es::einshard<"b/dp s e, f/tp e [param] -> b/dp s f/tp">(yn, w.w1, o) + w.c1);
  auto out = y + es::einshard<"b/dp s f/tp, e f/tp [param] -> b/dp s e">(m, w.w2, o) + w.c2;
  return (out * out).sum() / double(batch * seq * embed);
}

std::pair<std::int64_t, std::int64_t> rows(std::int64_t n, int parts, int c) {
  const auto s = es::compute_split_shapes(n, parts);
  std::int64_t b = 0;
  for (int i = 0; i < c; ++i) b += s[static_cast<std::size_t>(i)];
  return {b, s[static_cast<std::size_t>(c)]};
}

int run() {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int tp = world % 2 == 0 ? 2 : 1;
  es::Mesh mesh(MPI_COMM_WORLD, {world / tp, tp}, {"dp", "tp"});
  const es::Options o{.mesh = mesh};
  const auto [b0, bn] = rows(batch, mesh.size("dp"), mesh.coordinate("dp"));
  const auto [h0, hn] = rows(heads, tp, mesh.coordinate("tp"));
  const auto [f0, fn] = rows(hidden, tp, mesh.coordinate("tp"));

  auto G = global_weights();
  at::manual_seed(11);
  std::vector<at::Tensor> data;
  for (int s = 0; s < steps; ++s) data.push_back(at::randn({batch, seq, embed}, at::TensorOptions().dtype(at::kDouble)));

  // This rank's pieces. Replicated parameters start different on every rank: init_params fixes that.
  auto P = std::make_shared<Params>();
  auto& w = *P;
  const double noise = 0.01 * rank;
  w.g1 = w.register_parameter("g1", G["g1"] + noise);
  w.n1 = w.register_parameter("n1", G["n1"] + noise);
  w.wq = w.register_parameter("wq", G["wq"].narrow(0, h0, hn).clone());
  w.wk = w.register_parameter("wk", G["wk"].narrow(0, h0, hn).clone());
  w.wv = w.register_parameter("wv", G["wv"].narrow(0, h0, hn).clone());
  w.wo = w.register_parameter("wo", G["wo"].narrow(1, h0, hn).clone());
  w.g2 = w.register_parameter("g2", G["g2"] + noise);
  w.n2 = w.register_parameter("n2", G["n2"] + noise);
  w.w1 = w.register_parameter("w1", G["w1"].narrow(0, f0, fn).clone());
  w.c1 = w.register_parameter("c1", G["c1"].narrow(0, f0, fn).clone());
  w.w2 = w.register_parameter("w2", G["w2"].narrow(1, f0, fn).clone());
  w.c2 = w.register_parameter("c2", G["c2"] + noise);

  // Registration, once: the weights through their notations (nothing is computed), the rest by layout.
  es::einshard_like<"b/dp s e, h/tp d e [param] -> b/dp s h/tp d">(w.wq, o);
  es::einshard_like<"b/dp s e, h/tp d e [param] -> b/dp s h/tp d">(w.wk, o);
  es::einshard_like<"b/dp s e, h/tp d e [param] -> b/dp s h/tp d">(w.wv, o);
  es::einshard_like<"b/dp s h/tp d, e h/tp d [param] -> b/dp s e">(w.wo, o);
  es::einshard_like<"b/dp s e, f/tp e [param] -> b/dp s f/tp">(w.w1, o);
  es::einshard_like<"b/dp s f/tp, e f/tp [param] -> b/dp s e">(w.w2, o);
  // The norms' inputs feed tp-sharded projections, whose plans all-reduce those inputs' gradients
  // over tp already: only the batch shards (dp) remain.
  es::register_module_parameter_layouts(w, {{"g1", "e"}, {"n1", "e"}, {"g2", "e"}, {"n2", "e"}, {"c2", "e"}},
                                        {.mesh = mesh, .grad = "dp"});
  es::register_parameter_layout(w.c1, "f/tp", {.mesh = mesh, .grad = "dp"});
  es::validate_parameter_states(w, mesh);
  es::init_params(w, mesh);
  auto hooks = es::register_grad_reduction_hooks(w, mesh, {.bucket_bytes = 512});

  if (rank == 0) {
    std::printf("tp_dp_training: (dp, tp) = (%d, %d), %zu gradient buckets\n", mesh.size("dp"), tp,
                hooks.bucket_count());
    for (const char* n : names) {
      const auto& s = es::parameter_state(w.named_parameters()[n]);
      std::printf("  %-3s %-28s grad over %-4s init-sync over %s\n", n, s.spec().c_str(),
                  s.reduce().empty() ? "-" : s.reduce()[0].c_str(), s.shared().empty() ? "-" : s.shared()[0].c_str());
    }
  }

  std::map<std::string, at::Tensor> R;
  for (auto& [k, v] : G) R[k] = v.clone().set_requires_grad(true);
  double worst = 0;
  for (int s = 0; s < steps; ++s) {
    // One process.
    auto ref = reference_loss(data[s], R);
    ref.backward();
    // Distributed.
    auto loss = parallel_loss(data[s].narrow(0, b0, bn), w, o);
    loss.backward();
    hooks.wait();
    double mine = loss.item<double>(), total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, mesh.comm("dp"));
    const double diff = std::abs(total - ref.item<double>());
    worst = std::max(worst, diff);
    if (rank == 0) std::printf("step %d: loss %.12f   one process %.12f   |diff| %.1e\n", s, total, ref.item<double>(), diff);
    {
      at::NoGradGuard no_grad;
      for (auto& p : w.parameters()) {
        p.sub_(lr * p.grad());
        p.mutable_grad() = at::Tensor();
      }
      for (auto& [k, v] : R) {
        v.sub_(lr * v.grad());
        v.mutable_grad() = at::Tensor();
      }
    }
  }
  // The trained shards equal the trained block's slices.
  auto err = [&](const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); };
  worst = std::max({worst, err(w.wq, R["wq"].narrow(0, h0, hn)), err(w.wo, R["wo"].narrow(1, h0, hn)),
                    err(w.w1, R["w1"].narrow(0, f0, fn)), err(w.c1, R["c1"].narrow(0, f0, fn)),
                    err(w.w2, R["w2"].narrow(1, f0, fn)), err(w.g1, R["g1"]), err(w.c2, R["c2"])});
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const bool ok = worst < 1e-10;
  if (rank == 0) std::printf("largest difference from one process: %.2e (%s)\n", worst, ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  int code = 1;
  try {
    code = run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_dp_training: %s\n", e.what());
  }
  MPI_Finalize();
  return code;
}
