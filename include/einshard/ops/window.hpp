#pragma once
/// @file
/// `einwindow`: a sharding-aware `unfold` (im2col). Each position of the named axes gets the window
/// of rows around it as new axes; the rows a shard's windows need beyond its own come from the
/// ranks holding them (the halo exchange of `einhalo`), boundaries resolve the rows outside the
/// axis.
///
/// ```cpp
/// auto patches = es::einwindow<"b h/sp w c -> b h/sp w kh kw c">(
///     x, {{"h", "kh"}, {"w", "kw"}}, {{"h", 1}, {"w", 1}}, {.mesh = mesh});
/// ```
///
/// Window axis `kh` of radius (l, r), dilation d and stride s: output position j of `h` holds rows
/// `j*s + d*t` for t in [-l, r]. With stride 1 the output keeps the input's shards; with a larger
/// stride output j belongs to the rank owning input row j*s (plan::plan_window).

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/ops/halo.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/config.hpp"

// Compiled (config.hpp), only einshard_compiled parses the executor behind this operation.
#if !EINSHARD_DECLARE_ONLY
#include "einshard/exec/halo.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/plan/halo.hpp"
#endif

namespace einshard {

namespace detail {

/// The operation's entry points (defined with its executor, below or in einshard_compiled).
EINSHARD_INLINE at::Tensor run_window(const notation::ExpressionView& in_e, const notation::ExpressionView& out_e,
                                      std::string_view written, const at::Tensor& x, const AxisMap& windows,
                                      const Halos& radius, const Options& o);
EINSHARD_INLINE Plan explain_window(const notation::ExpressionView& in_e, const notation::ExpressionView& out_e,
                                    std::string_view written, const at::Tensor& x, const AxisMap& windows,
                                    const Halos& radius, const Options& o);
/// An einwindow call prepared once (`PreparedWindow`).
struct WindowCall;
using PreparedWindowState = Prepared<WindowCall>;
EINSHARD_INLINE std::shared_ptr<const PreparedWindowState> prepare_window_state(
    const notation::ExpressionView& in_e, const notation::ExpressionView& out_e, std::string_view written,
    const at::Tensor& x, const AxisMap& windows, const Halos& radius, const Options& o);
EINSHARD_INLINE at::Tensor run_prepared_window(const std::shared_ptr<const PreparedWindowState>& state,
                                               const at::Tensor& x);
EINSHARD_INLINE Plan explain_prepared(const PreparedWindowState& state);

#if !EINSHARD_DECLARE_ONLY
/// The sharding of every axis of a spec, by name.
inline std::vector<std::string> meshes_of(const notation::ExpressionView& e, const notation::Spec& spec) {
  std::vector<std::string> m;
  for (const auto& a : e.axes_of(spec)) m.emplace_back(e.mesh(a));
  return m;
}

/// Positions of `names` in `order` (`order` holds every name once).
inline std::vector<std::int64_t> positions(const std::vector<std::string>& order,
                                           const std::vector<std::string>& names) {
  std::vector<std::int64_t> p;
  for (const auto& n : names)
    p.push_back(std::find(order.begin(), order.end(), n) - order.begin());
  return p;
}

/// Checks that `out` names exactly `expected` (any order), each axis of `expected` keeping the
/// sharding `sharding[i]`; returns the permutation from `expected` order to `out` order.
inline std::vector<std::int64_t> output_order(const notation::ExpressionView& e, const notation::Spec& out,
                                              const std::vector<std::string>& expected,
                                              const std::vector<std::string>& sharding, const std::string& what) {
  if (out.has_ellipsis) throw Error(what + ": stencil operations need every axis named (no '...')");
  if (out.partial_count > 0) throw Error(what + ": stencil operations take no partial sums ('//')");
  const auto names = axis_names(e, out);
  const auto meshes = meshes_of(e, out);
  for (const auto& item : e.items_of(out))
    if (item.kind != notation::ItemKind::axis)
      throw Error(what + ": factored groups such as '(h p)' are not supported by stencil operations");
  if (names.size() != expected.size() ||
      !std::all_of(expected.begin(), expected.end(), [&](const auto& n) { return has_name(names, n); }))
    throw Error(what + ": the output must name the axes " + joined(expected) + " (each once), but names " +
                joined(names));
  const auto perm = positions(expected, names);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& want = sharding[static_cast<std::size_t>(perm[i])];
    if (!notation::detail::same_mesh(meshes[i], want))
      throw Error(what + ": output axis '" + names[i] + "' must be " +
                  (want.empty() ? std::string("whole") : "sharded over '" + want + "'") +
                  " as it is in the input" + (want.empty() && !meshes[i].empty() ? " (window axes are whole)" : ""));
  }
  return perm;
}

/// The layout of an output naming `expected[perm[i]]` at position i: the input's axes keep their
/// groups, the others are whole.
inline plan::Layout output_layout(const plan::Layout& in, const std::vector<std::string>& expected,
                                  const std::vector<std::int64_t>& perm) {
  plan::Layout out;
  for (const auto p : perm) {
    const auto& name = expected[static_cast<std::size_t>(p)];
    const auto d = in.find(name);
    out.axes.push_back({name, d < 0 ? Group() : in.axes[static_cast<std::size_t>(d)].group});
  }
  return out;
}

/// An einwindow call prepared: agreed (collective over the mesh when an axis is sharded) and
/// planned. Per window axis, in `windows` order: taps (left + right + 1), stride, dilation.
struct WindowCall : StencilCall {
  std::vector<std::int64_t> taps, strides, dilations, perm;
};

inline WindowCall window_call(const notation::ExpressionView& in_e, const notation::ExpressionView& out_e,
                              std::string_view written, const at::Tensor& x, const AxisMap& windows,
                              const Halos& radius, const Options& o) {
  const auto what = "einwindow '" + std::string(written) + "'";
  check_unused_options(o, "einwindow", {"shapes", "families", "boundary", "fill", "stride", "dilation"});
  const auto [edge, fill] = boundary_of(o, what);
  const auto& spec = in_e.input(0);
  const auto names = axis_names(in_e, spec);
  std::vector<std::string> sources, kernels;
  std::vector<std::int64_t> taps;
  for (const auto& [source, window] : windows) {
    if (!has_name(names, source))
      throw Error(what + ": window axis '" + source + "' is not an axis of the input (" + joined(names) + ")");
    if (has_name(sources, source)) throw Error(what + ": axis '" + source + "' has two windows");
    if (has_name(names, window) || has_name(kernels, window))
      throw Error(what + ": window name '" + window + "' must be new and distinct");
    const auto r = radius.find(source);
    if (r == radius.end()) throw Error(what + ": window axis '" + source + "' has no radius");
    sources.push_back(source);
    kernels.push_back(window);
    taps.push_back(r->second.left + r->second.right + 1);
  }
  for (const auto& [axis, r] : radius)
    if (!has_name(sources, axis)) throw Error(what + ": radius of '" + axis + "', which has no window");
  auto strides = per_axis(o.stride, sources, what, "stride");
  auto dilations = per_axis(o.dilation, sources, what, "dilation");
  auto expected = names;
  expected.insert(expected.end(), kernels.begin(), kernels.end());
  auto sharding = meshes_of(in_e, spec);
  sharding.resize(expected.size());
  auto perm = output_order(out_e, out_e.input(0), expected, sharding, what);
  std::string key = halo_key(radius, names, what, "radius") + std::to_string(static_cast<int>(edge)) + ':' +
                    std::to_string(fill);
  for (std::size_t i = 0; i < sources.size(); ++i)
    key += sources[i] + '>' + kernels[i] + ':' + std::to_string(strides[i]) + ',' + std::to_string(dilations[i]) + ';';
  auto in = agree_input(in_e, spec, {&x, 1}, {}, o, what, key);
  // `edge = edge`: clang 14 cannot capture a structured binding (C++20 allows it; clang 16 does).
  auto prepared = prepare_exchanges(in, o, in_e.source, what, key, [&, edge = edge](const StencilInput& measured) {
    PreparedExchanges p;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const auto& axis = measured.axis(sources[i]);
      const auto& r = radius.at(sources[i]);
      const auto d = dilations[i];
      const auto wp = plan::plan_window(axis.shards, {taps[i], d, strides[i], d * r.left, d * r.right, d * r.left},
                                        axis.name, what);
      p.push_back({axis, exec::plan_axis(axis, o.mesh, wp.requests, edge, what),
                   wp.shards[static_cast<std::size_t>(exec::coordinate(axis, o.mesh))]});
    }
    return p;
  });
  auto output = output_layout(in.layout, expected, perm);
  WindowCall call{{stencil_plan(written, x, o, std::move(prepared), std::move(in.layout)), edge, fill},
                  std::move(taps), std::move(strides), std::move(dilations), std::move(perm)};
  call.plan.output = std::move(output);
  call.plan.local = "unfold";
  return call;
}

/// The windows of `y`, extended by the call's exchanges.
inline at::Tensor unfold_windows(const WindowCall& call, at::Tensor y) {
  const auto& prepared = *call.plan.exchanges;
  for (std::size_t i = 0; i < prepared.size(); ++i) {
    const auto& p = prepared[i];
    const auto k = call.taps[i];
    const auto span = call.dilations[i] * (k - 1) + 1;
    if (p.outputs == 0) {  // no windows here: an empty axis, still in the graph for the backward
      auto empty = y.narrow(p.axis.dim, 0, 0).unsqueeze(-1);
      auto sizes = empty.sizes().vec();
      sizes.back() = k;
      y = empty.expand(sizes);
      continue;
    }
    y = y.unfold(p.axis.dim, span, call.strides[i]);
    if (call.dilations[i] > 1) y = y.slice(-1, 0, span, call.dilations[i]);
  }
  return y.permute(call.perm);
}

EINSHARD_INLINE at::Tensor run_window(const notation::ExpressionView& in_e, const notation::ExpressionView& out_e,
                             std::string_view written, const at::Tensor& x, const AxisMap& windows,
                             const Halos& radius, const Options& o) {
  auto call = window_call(in_e, out_e, written, x, windows, radius, o);
  auto y = unfold_windows(call, run_exchanges(call, x));
  remember_plan(o, std::move(call.plan));
  return y;
}

EINSHARD_INLINE Plan explain_window(const notation::ExpressionView& in_e, const notation::ExpressionView& out_e,
                                    std::string_view written, const at::Tensor& x, const AxisMap& windows,
                                    const Halos& radius, const Options& o) {
  return window_call(in_e, out_e, written, x, windows, radius, o).plan.describe();
}

EINSHARD_INLINE std::shared_ptr<const PreparedWindowState> prepare_window_state(
    const notation::ExpressionView& in_e, const notation::ExpressionView& out_e, std::string_view written,
    const at::Tensor& x, const AxisMap& windows, const Halos& radius, const Options& o) {
  return std::make_shared<const PreparedWindowState>(PreparedWindowState{
      window_call(in_e, out_e, written, x, windows, radius, o), {"einwindow '" + std::string(written) + "'", {{"tensor", &x}}}});
}

EINSHARD_INLINE at::Tensor run_prepared_window(const std::shared_ptr<const PreparedWindowState>& state,
                                               const at::Tensor& x) {
  const auto fault = start_prepared(state->call, state->check, {x});
  auto y = run_exchanges(state->call, x, fault);
  end_prepared(state, *fault);
  return unfold_windows(state->call, std::move(y));
}

EINSHARD_INLINE Plan explain_prepared(const PreparedWindowState& s) { return s.call.plan.describe(); }
#endif  // !EINSHARD_DECLARE_ONLY
}  // namespace detail

/// `einwindow<"b h/sp w c -> b h/sp w kh kw c">(x, {{"h", "kh"}, {"w", "kw"}}, {{"h", 1}, {"w", 1}},
/// {.mesh = mesh})`: for every position of each window axis, the rows within its radius (`{"h", 1}`
/// both sides, `{"h", {0, 2}}` before and after) as a new whole axis of l + r + 1 taps. The output
/// names the input's axes, with their sharding, and the window axes, in any order. Options: `mesh`,
/// `shapes`, `boundary` (default constant), `fill`, `stride` and `dilation` (one value or per axis),
/// `families` (run-time form). Differentiable.
template <fixed_string S>
at::Tensor einwindow(const at::Tensor& x, const AxisMap& windows, const Halos& radius, const Options& o = {}) {
  return detail::run_window(notation::static_expression<detail::side_v<S, true>>.view(),
                            notation::static_expression<detail::side_v<S, false>>.view(), S.view(), x, windows,
                            radius, o);
}

/// The run-time form: `einwindow("b h/sp w c -> b h/sp w kh c", x, {{"h", "kh"}}, {{"h", 1}}, {...})`.
EINSHARD_INLINE at::Tensor einwindow(std::string_view notation, const at::Tensor& x, const AxisMap& windows,
                            const Halos& radius, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE at::Tensor einwindow(std::string_view notation, const at::Tensor& x, const AxisMap& windows,
                            const Halos& radius, const Options& o) {
  const auto [in, out] = detail::parse_sides(notation, o.families);
  return detail::run_window(in->view(), out->view(), notation, x, windows, radius, o);
}
#endif

/// An `einwindow` prepared once for one shard, for a loop that takes the windows of same-shaped
/// shards every step: construction agrees and plans (collective over the mesh, as an `einwindow`
/// call), and each call then exchanges the rows its windows need beyond the shard and unfolds,
/// with no collective. A call takes a tensor of the shape, dtype and device it was prepared for
/// and returns what `einwindow` would, differentiable alike; another tensor raises as a
/// `PreparedHalo`'s call does. Copies share the prepared exchange.
class PreparedWindow : public detail::PreparedOp<detail::PreparedWindowState> {
 public:
  using PreparedOp::PreparedOp;
  /// `x`'s windows, as `einwindow` with the prepared notation, windows, radius and options.
  at::Tensor operator()(const at::Tensor& x) const { return detail::run_prepared_window(state_, x); }
};

/// `prepare_window<"b h/sp w c -> b h/sp w kh c">(x, {{"h", "kh"}}, {{"h", 1}}, {.mesh = mesh})`:
/// `einwindow`'s arguments, prepared for shards like `x` (collective over the mesh when an axis is
/// sharded).
template <fixed_string S>
PreparedWindow prepare_window(const at::Tensor& x, const AxisMap& windows, const Halos& radius, const Options& o = {}) {
  return PreparedWindow(detail::prepare_window_state(notation::static_expression<detail::side_v<S, true>>.view(),
                                                     notation::static_expression<detail::side_v<S, false>>.view(),
                                                     S.view(), x, windows, radius, o));
}

/// The run-time form: `prepare_window("b h/sp w c -> b h/sp w kh c", x, {{"h", "kh"}}, {{"h", 1}}, {...})`.
EINSHARD_INLINE PreparedWindow prepare_window(std::string_view notation, const at::Tensor& x, const AxisMap& windows,
                                              const Halos& radius, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE PreparedWindow prepare_window(std::string_view notation, const at::Tensor& x, const AxisMap& windows,
                                              const Halos& radius, const Options& o) {
  const auto [in, out] = detail::parse_sides(notation, o.families);
  return PreparedWindow(detail::prepare_window_state(in->view(), out->view(), notation, x, windows, radius, o));
}
#endif

/// What `einwindow<S>(x, windows, radius, o)` would run: the exchange of each window axis, in
/// `windows` order ("pad" for a whole axis, "halo_forward_accumulate_backward" for a sharded one),
/// with this rank's bytes sent and received forward and backward, then the local "unfold".
/// Collective over the mesh when an axis is sharded; moves no data.
template <fixed_string S>
Plan explain_window(const at::Tensor& x, const AxisMap& windows, const Halos& radius, const Options& o = {}) {
  return detail::explain_window(notation::static_expression<detail::side_v<S, true>>.view(),
                                notation::static_expression<detail::side_v<S, false>>.view(), S.view(), x, windows,
                                radius, o);
}

EINSHARD_INLINE Plan explain_window(std::string_view notation, const at::Tensor& x, const AxisMap& windows, const Halos& radius,
                           const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE Plan explain_window(std::string_view notation, const at::Tensor& x, const AxisMap& windows, const Halos& radius,
                           const Options& o) {
  const auto [in, out] = detail::parse_sides(notation, o.families);
  return detail::window_call(in->view(), out->view(), notation, x, windows, radius, o).plan.describe();
}
#endif

}  // namespace einshard
