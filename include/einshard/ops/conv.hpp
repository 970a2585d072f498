#pragma once
/// @file
/// `einconv`: a 1-3-D convolution over named axes, sharded spatial axes included. Each rank fetches
/// the input rows its outputs read (the halo exchange of `einhalo`, boundaries for the padding) and
/// runs `at::convolution` on its extended shard; the weight and bias are whole on every rank and
/// their gradients, partial sums over the ranks that split the input, are all-reduced in backward
/// (Megatron's f), so they equal the one-process gradients.
///
/// ```cpp
/// auto y = es::einconv<"b h/sp w c, o c kh kw -> b h/sp w o">(x, weight, {{"h", "kh"}, {"w", "kw"}},
///                                                           {.mesh = mesh, .bias = b});
/// ```
///
/// Output ownership along a sharded spatial axis: output j reads input rows
/// `j*stride - pad_left + dilation*t` (t < k) and belongs to the rank owning the window's centre row
/// `j*stride - pad_left + dilation*(k-1)/2` (clamped to the axis). With stride 1 and same padding the
/// output keeps the input's shards; otherwise shards follow the input's (uneven, possibly empty).

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/ops/halo.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/config.hpp"

// Compiled (config.hpp), only einshard_compiled parses the executor behind this operation.
#if !EINSHARD_DECLARE_ONLY
#include "einshard/comm/autograd.hpp"
#include "einshard/exec/halo.hpp"
#include "einshard/exec/steps.hpp"
#include "einshard/ops/window.hpp"
#include "einshard/plan/halo.hpp"
#endif

namespace einshard {

namespace detail {

/// The operation's entry points (defined with its executor, below or in einshard_compiled).
EINSHARD_INLINE at::Tensor run_conv(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                                    const at::Tensor& weight, const AxisMap& windows, const Options& o);
EINSHARD_INLINE Plan explain_conv(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                                  const at::Tensor& weight, const AxisMap& windows, const Options& o);
/// An einconv call prepared once (`PreparedConv`).
struct ConvCall;
using PreparedConvState = Prepared<ConvCall>;
EINSHARD_INLINE std::shared_ptr<const PreparedConvState> prepare_conv_state(const notation::ExpressionView& e,
                                                                            std::string_view written,
                                                                            const at::Tensor& x,
                                                                            const at::Tensor& weight,
                                                                            const AxisMap& windows, const Options& o);
EINSHARD_INLINE at::Tensor run_prepared_conv(const std::shared_ptr<const PreparedConvState>& state,
                                             const at::Tensor& x, const at::Tensor& weight);
EINSHARD_INLINE Plan explain_prepared(const PreparedConvState& state);

#if !EINSHARD_DECLARE_ONLY
/// The roles of the axes of `x, w -> y`, checked.
struct ConvAxes {
  std::vector<std::string> x, w, batch, spatial, kernels;
  std::string in_channel, out_channel;
};

inline ConvAxes conv_axes(const notation::ExpressionView& e, const AxisMap& windows, const std::string& what) {
  if (e.input_count() != 2) throw Error(what + ": a convolution takes two inputs, the tensor and the weight");
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& s = e.specs[i];
    if (s.has_ellipsis) throw Error(what + ": stencil operations need every axis named (no '...')");
    if (s.partial_count > 0) throw Error(what + ": stencil operations take no partial sums ('//')");
    for (const auto& item : e.items_of(s))
      if (item.kind != notation::ItemKind::axis)
        throw Error(what + ": factored groups such as '(h p)' are not supported by stencil operations");
  }
  ConvAxes a;
  a.x = axis_names(e, e.input(0));
  a.w = axis_names(e, e.input(1));
  const auto y = axis_names(e, e.output());
  for (const auto& [source, kernel] : windows) {
    if (!has_name(a.x, source))
      throw Error(what + ": window axis '" + source + "' is not an axis of the input (" + joined(a.x) + ")");
    if (has_name(a.spatial, source)) throw Error(what + ": axis '" + source + "' has two windows");
    if (!has_name(a.w, kernel) || has_name(a.x, kernel) || has_name(y, kernel) || has_name(a.kernels, kernel))
      throw Error(what + ": kernel axis '" + kernel + "' must be an axis of the weight only, for one window");
    a.spatial.push_back(source);
    a.kernels.push_back(kernel);
  }
  if (a.spatial.empty() || a.spatial.size() > 3)
    throw Error(what + ": a convolution has 1 to 3 spatial axes, but " + std::to_string(a.spatial.size()) +
                " windows were given");
  // Spatial axes in the input's order (the order at::convolution sees them in), kernels alike.
  std::vector<std::pair<std::int64_t, std::string>> order;
  for (std::size_t i = 0; i < a.spatial.size(); ++i)
    order.emplace_back(positions(a.x, {a.spatial[i]})[0], a.kernels[i]);
  std::sort(order.begin(), order.end());
  for (std::size_t i = 0; i < order.size(); ++i) {
    a.spatial[i] = a.x[static_cast<std::size_t>(order[i].first)];
    a.kernels[i] = order[i].second;
  }
  std::vector<std::string> in_channels, out_channels;
  for (const auto& n : a.x)
    if (has_name(a.w, n) && !has_name(y, n)) in_channels.push_back(n);
  for (const auto& n : a.w)
    if (!has_name(a.x, n) && has_name(y, n)) out_channels.push_back(n);
  if (in_channels.size() != 1)
    throw Error(what + ": exactly one input channel axis (in the input and the weight, not the output) is "
                "needed, found " + std::to_string(in_channels.size()));
  if (out_channels.size() != 1)
    throw Error(what + ": exactly one output channel axis (in the weight and the output, not the input) is "
                "needed, found " + std::to_string(out_channels.size()));
  a.in_channel = in_channels[0];
  a.out_channel = out_channels[0];
  if (a.w.size() != 2 + a.kernels.size())
    throw Error(what + ": the weight must name only the channel axes and the kernel axes, but names " +
                joined(a.w));
  for (const auto& n : a.x)
    if (n != a.in_channel && !has_name(a.spatial, n)) a.batch.push_back(n);
  return a;
}

/// An einconv call prepared: checked, agreed (collective over the mesh when an axis is sharded) and
/// planned. Per spatial axis (in the input's order): stride, dilation.
struct ConvCall : StencilCall {
  ConvAxes axes;
  std::vector<std::int64_t> strides, dilations, perm;
  std::int64_t groups;
  at::Tensor bias;  ///< `.bias`, or undefined
};

inline ConvCall conv_call(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                          const at::Tensor& weight, const AxisMap& windows, const Options& o) {
  const auto what = "einconv '" + std::string(written) + "'";
  check_unused_options(o, "einconv",
                       {"shapes", "families", "boundary", "fill", "bias", "stride", "padding", "dilation", "groups"});
  const auto [edge, fill] = boundary_of(o, what);
  auto a = conv_axes(e, windows, what);
  for (const auto& m : meshes_of(e, e.input(1)))
    if (!m.empty()) throw Error(what + ": the weight must be whole on every rank (no sharded axes)");
  const auto x_mesh = meshes_of(e, e.input(0));
  if (!x_mesh[static_cast<std::size_t>(positions(a.x, {a.in_channel})[0])].empty())
    throw Error(what + ": the input channel axis '" + a.in_channel + "' must be whole");
  // The output: batch axes, the output channels, spatial axes; input axes keep their sharding.
  std::vector<std::string> expected = a.batch, sharding;
  expected.push_back(a.out_channel);
  expected.insert(expected.end(), a.spatial.begin(), a.spatial.end());
  for (const auto& n : expected)
    sharding.push_back(n == a.out_channel ? std::string() : x_mesh[static_cast<std::size_t>(positions(a.x, {n})[0])]);
  auto perm = output_order(e, e.output(), expected, sharding, what);

  auto strides = per_axis(o.stride, a.spatial, what, "stride");
  auto dilations = per_axis(o.dilation, a.spatial, what, "dilation");
  const auto groups = o.groups.value_or(1);
  if (groups < 1) throw Error(what + ": '.groups' must be positive (got " + std::to_string(groups) + ")");
  std::vector<std::optional<std::pair<std::int64_t, std::int64_t>>> pads(a.spatial.size());
  if (o.padding) {
    for (auto& p : pads)
      if (o.padding->all) p = std::pair{*o.padding->all, *o.padding->all};
    for (const auto& [axis, p] : o.padding->by_axis) {
      if (!has_name(a.spatial, axis))
        throw Error(what + ": '.padding' names axis '" + axis + "', which is not a spatial axis (" +
                    joined(a.spatial) + ")");
      pads[static_cast<std::size_t>(positions(a.spatial, {axis})[0])] = p;
    }
  }
  std::string key = std::to_string(static_cast<int>(edge)) + ':' + std::to_string(fill) + ':' +
                    std::to_string(groups) + (o.bias ? "b" : "") + ';';
  for (std::size_t i = 0; i < a.spatial.size(); ++i)
    key += a.spatial[i] + '>' + a.kernels[i] + ':' + std::to_string(strides[i]) + ',' +
           std::to_string(dilations[i]) + ',' + (pads[i] ? std::to_string(pads[i]->first) + ',' + std::to_string(pads[i]->second) : "same") + ';';
  std::vector<at::Tensor> operands{x, weight};
  std::vector<std::int64_t> extra{static_cast<std::int64_t>(a.w.size())};
  if (o.bias) {
    operands.push_back(*o.bias);
    extra.push_back(1);
  }
  auto in = agree_input(e, e.input(0), operands, extra, o, what, key);
  if (!in.distributed) {
    if (weight.dim() != static_cast<std::int64_t>(a.w.size()))
      throw Error(what + ": the weight has " + std::to_string(weight.dim()) + " dimensions, but the notation names " +
                  std::to_string(a.w.size()));
    if (o.bias && o.bias->dim() != 1)
      throw Error(what + ": the bias must have one dimension, but has " + std::to_string(o.bias->dim()));
  }
  const auto w_size = [&](const std::string& n) { return weight.size(positions(a.w, {n})[0]); };
  // The halo (and boundary padding) of each spatial axis, for one local convolution without padding.
  // `edge = edge`: clang 14 cannot capture a structured binding (C++20 allows it; clang 16 does).
  auto prepared = prepare_exchanges(in, o, e.source, what, key, [&, edge = edge](const StencilInput& measured) {
    // Shapes every rank agrees on: the whole channel extent and the weight (checked equal everywhere).
    const auto C = measured.axis(a.in_channel).shards[0];
    const auto O = w_size(a.out_channel);
    if (C % groups != 0 || O % groups != 0 || w_size(a.in_channel) * groups != C)
      throw Error(what + ": with " + std::to_string(groups) + " groups, " + std::to_string(C) + " input and " +
                  std::to_string(O) + " output channels need a weight with " +
                  (C % groups == 0 ? std::to_string(C / groups) : std::string("C/groups")) + " input channels (got " +
                  std::to_string(w_size(a.in_channel)) + ") and both counts divisible by the groups");
    if (o.bias && o.bias->size(0) != O)
      throw Error(what + ": the bias has " + std::to_string(o.bias->size(0)) + " elements, but there are " +
                  std::to_string(O) + " output channels");
    PreparedExchanges p;
    for (std::size_t i = 0; i < a.spatial.size(); ++i) {
      const auto& axis = measured.axis(a.spatial[i]);
      const auto k = w_size(a.kernels[i]), d = dilations[i];
      const auto total = d * (k - 1);
      const auto [left, right] = pads[i].value_or(std::pair{total / 2, total - total / 2});
      const auto wp = plan::plan_window(axis.shards, {k, d, strides[i], left, right, total / 2}, axis.name, what);
      p.push_back({axis, exec::plan_axis(axis, o.mesh, wp.requests, edge, what),
                   wp.shards[static_cast<std::size_t>(exec::coordinate(axis, o.mesh))]});
    }
    return p;
  });
  auto output = output_layout(in.layout, expected, perm);
  ConvCall call{{stencil_plan(written, x, o, std::move(prepared), std::move(in.layout)), edge, fill},
                std::move(a),
                std::move(strides),
                std::move(dilations),
                std::move(perm),
                groups,
                o.bias ? *o.bias : at::Tensor()};
  call.plan.output = std::move(output);
  call.plan.local = "convolution";
  if (in.distributed) {
    // The weight and bias gradients of this rank are its share of the sum over every mesh dimension
    // the input is split over.
    std::uint32_t split = 0;
    for (const auto& axis : call.plan.input.axes) split |= axis.group.bits();
    call.plan.partial_group = o.mesh.shape().group(split);
    plan::Layout w;
    for (const auto& n : call.axes.w) w.axes.push_back({n, {}});
    call.plan.partials.emplace_back(std::move(w), weight.numel() * static_cast<std::int64_t>(weight.element_size()));
    if (o.bias)
      call.plan.partials.emplace_back(plan::Layout{{{call.axes.out_channel, {}}}, {}},
                                      o.bias->numel() * static_cast<std::int64_t>(o.bias->element_size()));
  }
  return call;
}

/// Runs a planned convolution on this rank's shard (`fault`: a prepared call's).
inline at::Tensor convolve_call(const ConvCall& call, const at::Tensor& x, const at::Tensor& weight,
                                const std::shared_ptr<exec::ExchangeFault>& fault = {}) {
  const auto& a = call.axes;
  const auto& prepared = *call.plan.exchanges;
  const auto& mesh = call.plan.mesh;
  const auto& partial_group = call.plan.partial_group;
  const auto& strides = call.strides;
  const auto& dilations = call.dilations;
  const auto w_size = [&](const std::string& n) { return weight.size(positions(a.w, {n})[0]); };
  auto w = weight;
  auto b = call.bias;
  const bool recording = at::GradMode::is_enabled() &&
                         (x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
  if (!partial_group.empty()) {
    const auto comm = mesh.comm(partial_group);
    w = comm::apply_op(w, c10::make_intrusive<exec::AddPartialOp>(comm));
    if (b.defined()) b = comm::apply_op(b, c10::make_intrusive<exec::AddPartialOp>(comm));
  }
  // (batch..., channels, spatial...) flattened to (B, C, spatial...), as at::convolution wants it.
  std::vector<std::string> x_order = a.batch;
  x_order.push_back(a.in_channel);
  x_order.insert(x_order.end(), a.spatial.begin(), a.spatial.end());
  const auto x_perm = positions(a.x, x_order);
  std::vector<std::int64_t> batch_sizes;
  std::int64_t batch = 1;
  for (std::size_t i = 0; i < a.batch.size(); ++i) {
    batch_sizes.push_back(x.size(x_perm[i]));
    batch *= batch_sizes.back();
  }
  std::vector<std::string> w_order{a.out_channel, a.in_channel};
  w_order.insert(w_order.end(), a.kernels.begin(), a.kernels.end());
  const auto wc = w.permute(positions(a.w, w_order));
  const std::vector<std::int64_t> zeros(a.spatial.size(), 0);
  auto convolve = [&](const at::Tensor& rows) {  // (B, O, outputs...) of input rows with their halo
    auto xc = rows.permute(x_perm);
    std::vector<std::int64_t> flat{batch};
    flat.insert(flat.end(), xc.sizes().begin() + static_cast<std::ptrdiff_t>(a.batch.size()), xc.sizes().end());
    return at::convolution(xc.reshape(flat), wc, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt,
                           strides, zeros, dilations, false, zeros, call.groups);
  };
  // Without autograd, when one axis alone exchanges with other ranks, the outputs whose windows
  // lie in this rank's own rows are computed while its messages are in flight.
  std::ptrdiff_t remote = -1;
  int remotes = 0;
  for (std::size_t i = 0; i < prepared.size(); ++i) {
    const int me = exec::coordinate(prepared[i].axis, mesh);
    if (prepared[i].exchange->rows_received(me) + prepared[i].exchange->rows_sent(me) > 0) {
      remote = static_cast<std::ptrdiff_t>(i);
      ++remotes;
    }
  }
  const bool empty = std::any_of(prepared.begin(), prepared.end(), [](const auto& p) { return p.outputs == 0; });
  const bool overlap = !recording && !empty && remotes == 1;
  // Axes are extended in order on every rank (the messages of one axis carry the rows of the
  // axes before it): with overlap, the axes after the remote one (local for this rank) extend the
  // interior and the completed result separately.
  const auto last = overlap ? static_cast<std::size_t>(remote) : prepared.size();
  auto extend = [&](at::Tensor t, std::size_t from, std::size_t to) { return run_exchanges(call, t, fault, from, to); };
  auto y = extend(x, 0, last);
  at::Tensor out;
  if (empty) {
    // No outputs here; the result still depends on the fetched rows and the weight, so this rank
    // joins the backward exchanges and reductions like every other.
    std::vector<std::int64_t> shape{batch, w_size(a.out_channel)};
    for (const auto& p : prepared) shape.push_back(p.outputs);
    auto anchor = y.sum() + wc.sum();
    if (b.defined()) anchor = anchor + b.sum();
    out = at::zeros(shape, y.options()) + anchor * 0;
  } else if (!overlap) {
    out = convolve(y);
  } else {
    const auto i = static_cast<std::size_t>(remote);
    const auto& p = prepared[i];
    const auto dim = p.axis.dim;
    const int me = exec::coordinate(p.axis, mesh);
    const auto st = strides[i], n = p.outputs;
    const auto span = dilations[i] * (w_size(a.kernels[i]) - 1) + 1;  // rows one window spans
    const auto op = c10::make_intrusive<exec::AxisExchangeOp>(mesh.comm(p.axis.group), me, dim, p.exchange,
                                                              call.edge, call.fill, fault);
    auto flight = op->start(y);
    // Output jj reads fetched rows [jj*st, jj*st + span); this rank's own rows are fetched rows
    // [lo, lo + size).
    const auto lo = plan::shard_offsets(p.axis.shards)[static_cast<std::size_t>(me)] - p.exchange->fetch.request.begin;
    const auto size = y.size(dim);
    const auto j0 = std::clamp<std::int64_t>(plan::detail::ceil_div(lo, st), 0, n);
    const auto j1 = std::clamp<std::int64_t>(plan::detail::floor_div(lo + size - span, st) + 1, j0, n);
    at::Tensor interior;
    if (j1 > j0) interior = convolve(extend(y.narrow(dim, j0 * st - lo, (j1 - j0 - 1) * st + span), last + 1, prepared.size()));
    const auto full = extend(op->finish(std::move(flight)), last + 1, prepared.size());
    if (j1 == j0) {
      out = convolve(full);
    } else {
      std::vector<at::Tensor> parts;
      if (j0 > 0) parts.push_back(convolve(full.narrow(dim, 0, (j0 - 1) * st + span)));
      parts.push_back(interior);
      if (j1 < n) parts.push_back(convolve(full.narrow(dim, j1 * st, (n - 1 - j1) * st + span)));
      out = parts.size() == 1 ? interior : at::cat(parts, 2 + remote);
    }
  }
  std::vector<std::int64_t> unflat = batch_sizes;
  unflat.insert(unflat.end(), out.sizes().begin() + 1, out.sizes().end());
  return out.reshape(unflat).permute(call.perm);
}

EINSHARD_INLINE at::Tensor run_conv(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                           const at::Tensor& weight, const AxisMap& windows, const Options& o) {
  auto call = conv_call(e, written, x, weight, windows, o);
  auto y = convolve_call(call, x, weight);
  remember_plan(o, std::move(call.plan));
  return y;
}

EINSHARD_INLINE Plan explain_conv(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                                  const at::Tensor& weight, const AxisMap& windows, const Options& o) {
  return conv_call(e, written, x, weight, windows, o).plan.describe();
}

EINSHARD_INLINE std::shared_ptr<const PreparedConvState> prepare_conv_state(const notation::ExpressionView& e,
                                                                            std::string_view written,
                                                                            const at::Tensor& x,
                                                                            const at::Tensor& weight,
                                                                            const AxisMap& windows, const Options& o) {
  return std::make_shared<const PreparedConvState>(
      PreparedConvState{conv_call(e, written, x, weight, windows, o),
                        {"einconv '" + std::string(written) + "'", {{"tensor", &x}, {"weight", &weight}}}});
}

EINSHARD_INLINE at::Tensor run_prepared_conv(const std::shared_ptr<const PreparedConvState>& state,
                                             const at::Tensor& x, const at::Tensor& weight) {
  const auto fault = start_prepared(state->call, state->check, {x, weight});
  auto y = convolve_call(state->call, x, weight, fault);
  end_prepared(state, *fault);
  return y;
}

EINSHARD_INLINE Plan explain_prepared(const PreparedConvState& s) { return s.call.plan.describe(); }
#endif  // !EINSHARD_DECLARE_ONLY
}  // namespace detail

/// `einconv<"b h/sp w c, o c kh kw -> b h/sp w o">(x, weight, {{"h", "kh"}, {"w", "kw"}}, {...})`:
/// a convolution (cross-correlation, as torch's) over the window axes, which may be sharded.
/// The weight names the output channels, the input channels (C/groups of them) and one kernel axis per
/// window; any other input axes are batch axes. Options: `mesh`, `shapes`, `bias` (whole, one value
/// per output channel), `stride`, `dilation` (one value or per axis), `padding` (one width, or
/// (left, right) per axis; default "same": dilation*(k-1) split as evenly as possible, extra on
/// the right; `.padding = 0` is "valid"), `groups`, `boundary` and `fill` (what the padding
/// holds: constant fill, default 0, periodic or replicate), `families` (run-time form).
template <fixed_string S>
at::Tensor einconv(const at::Tensor& x, const at::Tensor& weight, const AxisMap& windows, const Options& o = {}) {
  return detail::run_conv(notation::static_expression<S>.view(), S.view(), x, weight, windows, o);
}

/// The run-time form: `einconv("b h/sp w c, o c kh kw -> b h/sp w o", x, weight, windows, {...})`.
EINSHARD_INLINE at::Tensor einconv(std::string_view notation, const at::Tensor& x, const at::Tensor& weight,
                          const AxisMap& windows, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE at::Tensor einconv(std::string_view notation, const at::Tensor& x, const at::Tensor& weight,
                          const AxisMap& windows, const Options& o) {
  const auto parsed = detail::parse_cached(notation, false, o.families);
  return detail::run_conv(parsed->view(), notation, x, weight, windows, o);
}
#endif

/// An `einconv` prepared once for one shard and one weight shape, for a training or time-stepping
/// loop that convolves same-shaped shards every step: construction agrees and plans (collective over
/// the mesh, as an `einconv` call), and each call then exchanges the rows its outputs read, with no
/// collective forward. A call takes a tensor and a weight of the shape, dtype and device they were
/// prepared with (the weight's values may change between calls: training) and returns what
/// `einconv` would, differentiable alike: its backward all-reduces the weight's and bias's gradients
/// as `einconv`'s does. The bias is the one prepared (a tensor handle: an optimizer's in-place steps
/// are seen). The weight's values are not compared between ranks, as `einconv` does not compare
/// them; its shape, agreed at preparation, is checked on each rank alone, and a call with another
/// tensor or weight raises as a `PreparedHalo`'s call does. Copies share the prepared exchange.
class PreparedConv : public detail::PreparedOp<detail::PreparedConvState> {
 public:
  using PreparedOp::PreparedOp;
  /// The convolution of `x`'s shard by `weight`, as `einconv` with the prepared notation, windows
  /// and options.
  at::Tensor operator()(const at::Tensor& x, const at::Tensor& weight) const {
    return detail::run_prepared_conv(state_, x, weight);
  }
};

/// `prepare_conv<"b h/sp w c, o c kh kw -> b h/sp w o">(x, weight, {{"h", "kh"}, {"w", "kw"}},
/// {.mesh = mesh})`: `einconv`'s arguments, prepared for shards like `x` and weights like `weight`
/// (collective over the mesh when an axis is sharded).
template <fixed_string S>
PreparedConv prepare_conv(const at::Tensor& x, const at::Tensor& weight, const AxisMap& windows,
                          const Options& o = {}) {
  return PreparedConv(detail::prepare_conv_state(notation::static_expression<S>.view(), S.view(), x, weight, windows, o));
}

/// The run-time form: `prepare_conv("b h/sp w c, o c kh kw -> b h/sp w o", x, weight, windows, {...})`.
EINSHARD_INLINE PreparedConv prepare_conv(std::string_view notation, const at::Tensor& x, const at::Tensor& weight,
                                          const AxisMap& windows, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE PreparedConv prepare_conv(std::string_view notation, const at::Tensor& x, const at::Tensor& weight,
                                          const AxisMap& windows, const Options& o) {
  const auto parsed = detail::parse_cached(notation, false, o.families);
  return PreparedConv(detail::prepare_conv_state(parsed->view(), notation, x, weight, windows, o));
}
#endif

/// What `einconv<S>(x, weight, windows, o)` would run: the exchange of each spatial axis, in the
/// input's order ("pad" for a whole axis, "halo_forward_accumulate_backward" for a sharded one), the
/// local "convolution", and on a split input the weight's (operand 1) and bias's (operand 2)
/// "identity_forward_allreduce_backward", with this rank's bytes sent and received forward and
/// backward. Collective over the mesh when an axis is sharded; moves no data.
template <fixed_string S>
Plan explain_conv(const at::Tensor& x, const at::Tensor& weight, const AxisMap& windows, const Options& o = {}) {
  return detail::explain_conv(notation::static_expression<S>.view(), S.view(), x, weight, windows, o);
}

EINSHARD_INLINE Plan explain_conv(std::string_view notation, const at::Tensor& x, const at::Tensor& weight,
                         const AxisMap& windows, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE Plan explain_conv(std::string_view notation, const at::Tensor& x, const at::Tensor& weight,
                         const AxisMap& windows, const Options& o) {
  const auto parsed = detail::parse_cached(notation, false, o.families);
  return detail::conv_call(parsed->view(), notation, x, weight, windows, o).plan.describe();
}
#endif

}  // namespace einshard
