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
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/exec/halo.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/ops/halo.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/halo.hpp"

namespace einshard {

namespace detail {

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

inline at::Tensor run_window(const notation::ExpressionView& in_e, const notation::ExpressionView& out_e,
                             std::string_view written, const at::Tensor& x, const AxisMap& windows,
                             const Halos& radius, const Options& o) {
  const auto what = "einwindow '" + std::string(written) + "'";
  check_unused_options(o, "einwindow", {"shapes", "families", "boundary", "fill", "stride", "dilation"});
  const auto [edge, fill] = boundary_of(o, what);
  const auto& spec = in_e.input(0);
  const auto names = axis_names(in_e, spec);
  std::vector<std::string> sources, kernels;
  for (const auto& [source, window] : windows) {
    if (!has_name(names, source))
      throw Error(what + ": window axis '" + source + "' is not an axis of the input (" + joined(names) + ")");
    if (has_name(sources, source)) throw Error(what + ": axis '" + source + "' has two windows");
    if (has_name(names, window) || has_name(kernels, window))
      throw Error(what + ": window name '" + window + "' must be new and distinct");
    if (!radius.contains(source)) throw Error(what + ": window axis '" + source + "' has no radius");
    sources.push_back(source);
    kernels.push_back(window);
  }
  for (const auto& [axis, r] : radius)
    if (!has_name(sources, axis)) throw Error(what + ": radius of '" + axis + "', which has no window");
  const auto strides = per_axis(o.stride, sources, what, "stride");
  const auto dilations = per_axis(o.dilation, sources, what, "dilation");
  auto expected = names;
  expected.insert(expected.end(), kernels.begin(), kernels.end());
  auto sharding = meshes_of(in_e, spec);
  sharding.resize(expected.size());
  const auto perm = output_order(out_e, out_e.input(0), expected, sharding, what);
  std::string key = halo_key(radius, names, what, "radius") + std::to_string(static_cast<int>(edge)) + ':' +
                    std::to_string(fill);
  for (std::size_t i = 0; i < sources.size(); ++i)
    key += sources[i] + '>' + kernels[i] + ':' + std::to_string(strides[i]) + ',' + std::to_string(dilations[i]) + ';';
  const auto in = resolve_input(in_e, spec, {&x, 1}, {}, o, what, key);

  auto y = x;
  std::vector<std::int64_t> counts(sources.size());  // this rank's output positions per window axis
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& axis = in.axis(sources[i]);
    const auto& r = radius.at(sources[i]);
    const auto d = dilations[i];
    const auto wp = plan::plan_window(axis.shards, {r.left + r.right + 1, d, strides[i], d * r.left, d * r.right, d * r.left},
                                      axis.name);
    counts[i] = wp.shards[static_cast<std::size_t>(axis.group.empty() ? 0 : o.mesh.coordinate(axis.group))];
    y = exec::fetch_axis(y, axis, o.mesh, wp.requests, edge, fill);
  }
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& axis = in.axis(sources[i]);
    const auto& r = radius.at(sources[i]);
    const auto k = r.left + r.right + 1;
    const auto span = dilations[i] * (k - 1) + 1;
    if (counts[i] == 0) {  // no windows here: an empty axis, still in the graph for the backward
      auto empty = y.narrow(axis.dim, 0, 0).unsqueeze(-1);
      auto sizes = empty.sizes().vec();
      sizes.back() = k;
      y = empty.expand(sizes);
      continue;
    }
    y = y.unfold(axis.dim, span, strides[i]);
    if (dilations[i] > 1) y = y.slice(-1, 0, span, dilations[i]);
  }
  return y.permute(perm);
}

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
inline at::Tensor einwindow(std::string_view notation, const at::Tensor& x, const AxisMap& windows,
                            const Halos& radius, const Options& o = {}) {
  const auto [in, out] = detail::parse_sides(notation, o.families);
  return detail::run_window(in->view(), out->view(), notation, x, windows, radius, o);
}

}  // namespace einshard
