#pragma once
/// @file
/// `ParameterState`: what a parameter of a sharded model owes the mesh. Its layout (which axes are
/// sharded over which groups), the groups its `.grad` must be summed over (and by whom), and the
/// groups whose replicas must start equal. Pure values and the rules of the original
/// (reference/torch-einshard.md §2.10); no tensors, no MPI, so every rule is unit-testable.
///
/// Rules, checked whenever a state is made or merged:
///   - a layout does not shard two axes over overlapping mesh components (`a/tp b/tp`,
///     `a/dp-tp b/tp`): each rank would hold a diagonal block, which no optimizer step keeps;
///   - init-sync groups do not overlap the layout's shard footprint (shards differ by design);
///   - native and ddp gradient groups do not overlap the footprint and are disjoint (a sum over a
///     dimension twice multiplies by its size); external groups are the owner's business;
///   - every group names mesh dimensions (a compound is known when every component is).

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/group.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/plan/layout.hpp"

namespace einshard {

/// Where the gradient groups come from. `pending`: to be inferred by a later `[param]` notation
/// (`grad=async`, `ddp`, `external` on a bare layout).
enum class GradMode { none, pending, inferred, given };
/// Who sums the gradient: einshard (`native`, and `ddp`, which einshard's DDP-style hooks serve
/// too), or somebody else (`external`: recorded, never reduced by einshard).
enum class GradBackend { native, ddp, external };
/// `async` asks for reductions overlapped with backward (the hooks); `backend_default` leaves it
/// to the caller's choice of `reduce_grads` or hooks.
enum class GradSchedule { backend_default, synchronous, async };
/// Init sync: broadcast over the groups (`given` or `inferred` from the footprint), nothing, or
/// somebody else's job.
enum class InitSyncMode { none, external, inferred, given };

struct GradComm {
  GradMode mode = GradMode::none;
  std::vector<std::string> groups;  ///< canonical mesh groups; empty unless inferred or given
  std::optional<GradBackend> backend;  ///< unset: native, and a later registration may name one
  GradSchedule schedule = GradSchedule::backend_default;
  bool explicit_none = false;  ///< `grad=none` was written, as opposed to nothing

  [[nodiscard]] bool concrete() const noexcept {
    return mode == GradMode::inferred || mode == GradMode::given;
  }
  [[nodiscard]] GradBackend backend_or_native() const noexcept {
    return backend.value_or(GradBackend::native);
  }
  friend bool operator==(const GradComm&, const GradComm&) = default;
};

struct InitSync {
  InitSyncMode mode = InitSyncMode::inferred;
  std::vector<std::string> groups;  ///< canonical; empty unless inferred or given
  friend bool operator==(const InitSync&, const InitSync&) = default;
};

/// The state attached to a parameter (model/parameter_registry.hpp).
struct ParameterState {
  std::vector<plan::Placement> axes;  ///< named axes in order, each with its canonical shard group
  bool ellipsis = false;
  std::size_t ellipsis_at = 0;  ///< index in `axes` the ellipsis stands before
  MeshShape mesh;               ///< the mesh the groups refer to
  GradComm grad;
  InitSync init_sync;
  std::string source;  ///< what registered it ("register_parameter_layout", a notation, ...)

  /// The layout in notation form: `out/tp in`, `... c/tp`.
  [[nodiscard]] std::string layout() const {
    std::string out;
    auto put = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
    for (std::size_t i = 0; i <= axes.size(); ++i) {
      if (ellipsis && i == ellipsis_at) put("...");
      if (i == axes.size()) break;
      put(axes[i].axis + (axes[i].group.empty() ? "" : "/" + axes[i].group.name()));
    }
    return out;
  }
  /// The groups that shard some axis, in axis order, once each.
  [[nodiscard]] std::vector<std::string> shard_groups() const {
    std::vector<std::string> g;
    for (const auto& a : axes)
      if (!a.group.empty() && std::find(g.begin(), g.end(), a.group.name()) == g.end()) g.push_back(a.group.name());
    return g;
  }
  /// The original's name for `shard_groups()`.
  [[nodiscard]] std::vector<std::string> shard_dims() const { return shard_groups(); }
  /// The mesh dimensions some axis is sharded over.
  [[nodiscard]] Group footprint() const {
    std::uint32_t bits = 0;
    for (const auto& a : axes) bits |= a.group.bits();
    return mesh.group(bits);
  }
  /// Groups einshard sums the gradient over (`reduce_grads`, hooks): concrete native or ddp ones.
  [[nodiscard]] std::vector<std::string> reduce() const {
    if (!grad.concrete() || grad.backend_or_native() == GradBackend::external) return {};
    return grad.groups;
  }
  /// Groups whose replicas must start equal (`init_params`).
  [[nodiscard]] std::vector<std::string> shared() const {
    if (init_sync.mode == InitSyncMode::inferred || init_sync.mode == InitSyncMode::given)
      return init_sync.groups;
    return {};
  }
  /// Gradient groups still to be inferred from a notation.
  [[nodiscard]] bool pending() const noexcept { return grad.mode == GradMode::pending; }

  /// The operand spec that registers this state again: `out/tp in [param, grad=dp, init_sync=dp]`.
  /// It parses back (as an input of a notation) to an equal state.
  [[nodiscard]] std::string spec() const;
};

namespace detail {

/// Splits "a,b" (the options form lists several groups) into trimmed parts.
inline std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t begin = 0;
  while (true) {
    const auto end = s.find(',', begin);
    auto part = s.substr(begin, end == std::string_view::npos ? end : end - begin);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    out.push_back(part);
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  return out;
}

/// Canonical groups of a list, each known to the mesh; `what` names the field in messages.
inline std::vector<std::string> parse_groups(std::string_view list, const MeshShape& mesh,
                                             std::string_view what, std::string_view op) {
  std::vector<std::string> groups;
  for (auto part : split_list(list)) {
    if (part.empty())
      throw Error(std::string(op) + ": invalid " + std::string(what) + " '" + std::string(list) +
                  "': empty group");
    // Resolved once, by the mesh's own parser; the state keeps the canonical names.
    const auto g = mesh.find_group(part);
    if (!g)
      throw Error(std::string(op) + ": parameter " + std::string(what) +
                  " references unknown mesh dimensions: " + std::string(part) + " (mesh has " +
                  (mesh.names.empty() ? std::string("none") : mesh.joined_names()) + ")");
    groups.push_back(g->name());
  }
  return groups;
}

/// The union of named groups, resolved once: the names stay at the public surface (grad=,
/// init_sync=), the checks work on the value.
inline Group union_of(const std::vector<std::string>& groups, const MeshShape& mesh) {
  std::uint32_t bits = 0;
  for (const auto& g : groups) bits |= mesh.group(g).bits();
  return mesh.group(bits);
}

/// The first mesh dimension two of `groups` share, or "".
inline std::string shared_component(const std::vector<Group>& groups, const MeshShape& mesh) {
  std::uint32_t seen = 0;
  for (const auto& g : groups) {
    if (const auto common = seen & g.bits()) return mesh.names[static_cast<std::size_t>(std::countr_zero(common))];
    seen |= g.bits();
  }
  return {};
}
inline std::string shared_component(const std::vector<std::string>& groups, const MeshShape& mesh) {
  std::vector<Group> resolved;
  for (const auto& g : groups) resolved.push_back(mesh.group(g));
  return shared_component(resolved, mesh);
}

/// The first of `groups` that overlaps `g`, or "".
inline std::string overlap_with(const std::vector<std::string>& groups, const Group& g, const MeshShape& mesh) {
  for (const auto& name : groups)
    if (mesh.group(name).overlaps(g)) return name;
  return {};
}

inline std::string group_list(const std::vector<std::string>& v, const char* sep = ",") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace detail

/// Parses a gradient value: `none`, `async`, `ddp`, `external` (infer later), or groups with an
/// optional suffix (`dp`, `dp-sp:async`, `dp:ddp`, `dp:external`; the options form also takes a
/// list, `dp,sp`). An absent value is `none` on a bare layout and "infer" in a notation.
inline GradComm parse_grad(std::optional<std::string_view> value, const MeshShape& mesh,
                           bool in_notation, std::string_view op = "register_parameter_layout") {
  GradComm g;
  if (!value) {
    if (in_notation) g.mode = GradMode::pending;
    return g;
  }
  const auto v = *value;
  const auto fail = [&](const std::string& why) -> GradComm {
    throw Error(std::string(op) + ": invalid grad annotation '" + std::string(v) + "': " + why);
  };
  if (v == "none") {
    g.explicit_none = true;
    return g;
  }
  if (v == "async" || v == "ddp" || v == "external") {
    g.mode = GradMode::pending;
    if (v == "async") g.schedule = GradSchedule::async;
    if (v == "ddp") g.backend = GradBackend::ddp;
    if (v == "external") g.backend = GradBackend::external;
    return g;
  }
  const auto colon = v.find(':');
  const auto head = v.substr(0, colon);
  if (colon != std::string_view::npos) {
    const auto suffix = v.substr(colon + 1);
    if (head.empty() || suffix.empty()) return fail("expected a group before ':' and a suffix after it");
    if (head == "async" || head == "ddp" || head == "external" || head == "none")
      return fail("a grad annotation suffix requires an explicit mesh group");
    if (suffix == "async") g.schedule = GradSchedule::async;
    else if (suffix == "ddp") g.backend = GradBackend::ddp;
    else if (suffix == "external") g.backend = GradBackend::external;
    else return fail("unknown grad annotation suffix '" + std::string(suffix) + "' (expected async, ddp or external)");
  }
  g.mode = GradMode::given;
  g.groups = detail::parse_groups(head, mesh, "grad", op);
  return g;
}

/// Parses an init-sync value: `none`, `external` or groups (`dp`, `dp-sp`, `dp,sp`). Absent:
/// inferred from the layout when the state is made.
inline InitSync parse_init_sync(std::optional<std::string_view> value, const MeshShape& mesh,
                                std::string_view op = "register_parameter_layout") {
  InitSync s;
  if (!value) return s;
  const auto v = *value;
  if (v.find(':') != std::string_view::npos)
    throw Error(std::string(op) + ": init_sync annotations do not accept suffixes, got '" +
                std::string(v) + "'");
  if (v == "none") s.mode = InitSyncMode::none;
  else if (v == "external") s.mode = InitSyncMode::external;
  else {
    s.mode = InitSyncMode::given;
    s.groups = detail::parse_groups(v, mesh, "init_sync", op);
  }
  return s;
}

/// Checks a state against the rules of the file comment; `op` opens the message.
inline void validate(const ParameterState& s, std::string_view op) {
  const auto& mesh = s.mesh;
  const std::string where = std::string(op) + ": parameter layout '" + s.layout() + "'";
  for (std::size_t i = 0; i < s.axes.size(); ++i)
    for (std::size_t j = i + 1; j < s.axes.size(); ++j) {
      const auto& a = s.axes[i];
      const auto& b = s.axes[j];
      if (a.axis == b.axis)
        throw Error(where + " names axis '" + a.axis + "' twice; parameter axes must be distinct");
      if (a.group.overlaps(b.group))
        throw Error(where + " shards axes '" + a.axis + "' and '" + b.axis +
                    "' over overlapping mesh groups '" + a.group.name() + "' and '" + b.group.name() +
                    "'; expected each mesh dimension to shard at most one axis");
    }
  const auto foot = s.footprint();
  if (s.init_sync.mode == InitSyncMode::given) {
    if (auto c = detail::shared_component(s.init_sync.groups, mesh); !c.empty())
      throw Error(where + ": init_sync groups '" + detail::group_list(s.init_sync.groups) +
                  "' share the mesh dimension '" + c + "'");
    if (auto g = detail::overlap_with(s.init_sync.groups, foot, mesh); !g.empty())
      throw Error(where + ": init_sync group '" + g +
                  "' overlaps the shard dimensions of the layout; shards differ by design, so "
                  "expected init_sync over mesh dimensions the layout does not shard");
  }
  if (s.grad.concrete() && s.grad.backend_or_native() != GradBackend::external) {
    if (auto c = detail::shared_component(s.grad.groups, mesh); !c.empty())
      throw Error(where + ": gradient groups '" + detail::group_list(s.grad.groups) +
                  "' share the mesh dimension '" + c +
                  "'; expected disjoint groups (a sum over one dimension twice scales the gradient)");
    if (auto g = detail::overlap_with(s.grad.groups, foot, mesh); !g.empty())
      throw Error(where + ": gradient group '" + g +
                  "' overlaps the shard dimensions of the layout; each shard's gradient belongs "
                  "to its own rank, so expected gradient groups over other mesh dimensions");
  }
}

/// The shard groups of every axis of `layout` (`out/tp in`, `... c/tp`), checked against `mesh`.
/// An annotation (`out/tp in [param, grad=dp]`) may follow; its values are returned through
/// `grad` and `init_sync` when given.
inline ParameterState parse_layout(std::string_view layout, const MeshShape& mesh, std::string_view op,
                                   std::optional<std::string>* grad = nullptr,
                                   std::optional<std::string>* init_sync = nullptr) {
  const auto bracket = layout.find('[');
  const auto axes_text = layout.substr(0, bracket);
  // A layout is one operand of the notation `layout -> axes`: the one parser checks it.
  const std::string source = std::string(layout) + "->" + std::string(axes_text);
  const auto result = notation::parse(source);
  if (!result.ok) {
    std::string message;
    notation::write_message(result.error, [&](char c) { message += c; });
    throw Error(std::string(op) + ": invalid parameter layout '" + std::string(layout) + "': " +
                message + " (column " + std::to_string(result.error.column + 1) + ")");
  }
  const auto e = result.expression.view(source);
  if (e.input_count() != 1)
    throw Error(std::string(op) + ": a parameter layout is one operand, got '" + std::string(layout) + "'");
  const auto& spec = e.input(0);
  if (spec.partial_count != 0)
    throw Error(std::string(op) + ": parameter layout '" + std::string(layout) +
                "' is partial ('//'); a parameter holds its values, not partial sums");
  ParameterState s;
  s.mesh = mesh;
  std::string unknown;
  for (const auto& item : e.items_of(spec)) {
    if (item.kind == notation::ItemKind::ellipsis) {
      s.ellipsis = true;
      s.ellipsis_at = s.axes.size();
      continue;
    }
    if (item.kind == notation::ItemKind::group)
      throw Error(std::string(op) + ": parameter layout '" + std::string(layout) +
                  "' has a factored group; name the parameter's dimensions one axis each");
    const auto& a = e.axes_of(item)[0];
    Group group;
    if (!a.mesh.empty()) {
      if (auto g = mesh.find_group(e.mesh(a))) group = std::move(*g);
      else unknown += (unknown.empty() ? "" : ", ") + std::string(e.mesh(a));
    }
    s.axes.push_back({std::string(e.name(a)), std::move(group)});
  }
  if (!unknown.empty())
    throw Error(std::string(op) + ": parameter layout references unknown mesh dimensions: " + unknown +
                " (mesh has " + (mesh.names.empty() ? std::string("none") : mesh.joined_names()) + ")");
  const auto& ann = spec.annotation;
  if (grad && !ann.grad.empty()) *grad = std::string(e.text(ann.grad));
  if (init_sync && !ann.init_sync.empty()) *init_sync = std::string(e.text(ann.init_sync));
  return s;
}

/// The init-sync groups a layout implies: every mesh dimension it does not shard, as one group.
inline std::vector<std::string> inferred_init_sync(const ParameterState& s) {
  const std::uint32_t all = s.mesh.names.empty() ? 0u : ~0u >> (32 - s.mesh.names.size());
  const auto g = s.mesh.group(all & ~s.footprint().bits());
  return g.empty() ? std::vector<std::string>{} : std::vector<std::string>{g.name()};
}

/// A checked state from a layout and the values of `grad=` and `init_sync=`. `in_notation`: an
/// absent grad means "infer from the plan" rather than "none".
inline ParameterState make_parameter_state(std::string_view layout, const MeshShape& mesh,
                                           std::optional<std::string_view> grad,
                                           std::optional<std::string_view> init_sync,
                                           std::string_view op = "register_parameter_layout",
                                           bool in_notation = false) {
  std::optional<std::string> g_ann, i_ann;
  auto s = parse_layout(layout, mesh, op, &g_ann, &i_ann);
  if (g_ann && grad) throw Error(std::string(op) + ": grad given both in the layout and as an option");
  if (i_ann && init_sync)
    throw Error(std::string(op) + ": init_sync given both in the layout and as an option");
  if (g_ann) grad = *g_ann;
  if (i_ann) init_sync = *i_ann;
  s.grad = parse_grad(grad, mesh, in_notation, op);
  s.init_sync = parse_init_sync(init_sync, mesh, op);
  if (s.init_sync.mode == InitSyncMode::inferred) s.init_sync.groups = inferred_init_sync(s);
  s.source = std::string(op);
  validate(s, op);
  return s;
}

inline std::string ParameterState::spec() const {
  std::string out = layout() + " [param";
  const std::string suffix = grad.backend == GradBackend::ddp        ? "ddp"
                             : grad.backend == GradBackend::external ? "external"
                             : grad.schedule == GradSchedule::async  ? "async"
                                                                     : "";
  if (grad.explicit_none) {
    out += ", grad=none";
  } else if (grad.concrete() && !grad.groups.empty()) {
    out += ", grad=" + detail::group_list(grad.groups) + (suffix.empty() ? "" : ":" + suffix);
  } else if (grad.mode != GradMode::none && !suffix.empty()) {
    out += ", grad=" + suffix;  // to be inferred: a notation without grad= infers too
  }
  if (init_sync.mode == InitSyncMode::none) out += ", init_sync=none";
  else if (init_sync.mode == InitSyncMode::external) out += ", init_sync=external";
  else if (init_sync.mode == InitSyncMode::given) out += ", init_sync=" + detail::group_list(init_sync.groups);
  return out + "]";
}

/// `later` registered over `earlier` (the same parameter): the combined state, or an Error that
/// names the conflict. Rules:
///   - layouts (axes, their groups, the ellipsis) and meshes must be equal;
///   - gradient: nothing given yields to anything; an explicit `none` conflicts with any later or
///     earlier non-none; pending yields to concrete (given or inferred from a plan); two concrete
///     ones must name the same mesh dimensions (given wins over inferred as the record); backends
///     must agree where both name one; `async` refines the default schedule;
///   - init sync: inferred yields to anything given; two given values must be equal.
inline ParameterState merge(const ParameterState& earlier, const ParameterState& later,
                            std::string_view op = "register_parameter_state") {
  const std::string where = std::string(op) + ": parameter registered as '" + earlier.spec() +
                            "' (by " + earlier.source + ")";
  if (earlier.axes != later.axes || earlier.ellipsis != later.ellipsis ||
      (earlier.ellipsis && earlier.ellipsis_at != later.ellipsis_at))
    throw Error(where + " cannot be registered with the layout '" + later.layout() + "'");
  if (earlier.mesh.names != later.mesh.names || earlier.mesh.sizes != later.mesh.sizes)
    throw Error(where + " on a mesh (" + earlier.mesh.joined_names() +
                ") cannot be registered again on a different mesh (" + later.mesh.joined_names() + ")");
  ParameterState out = earlier;
  out.source = earlier.source + "; " + later.source;
  const auto& a = earlier.grad;
  const auto& b = later.grad;
  auto conflict = [&](const std::string& why) { throw Error(where + " conflicts with '" + later.spec() + "': " + why); };
  if (a.backend && b.backend && *a.backend != *b.backend)
    conflict("the gradient backends differ");
  if ((a.schedule == GradSchedule::synchronous && b.schedule == GradSchedule::async) ||
      (a.schedule == GradSchedule::async && b.schedule == GradSchedule::synchronous))
    conflict("synchronous and async gradient schedules differ");
  const bool a_some = a.mode != GradMode::none, b_some = b.mode != GradMode::none;
  if ((a.explicit_none && b_some) || (b.explicit_none && a_some))
    conflict("an explicit grad=none excludes any gradient reduction");
  GradComm g = a;
  if (!a_some && !a.explicit_none) g = b;  // nothing given yields
  else if (a.mode == GradMode::pending && b.concrete()) g = b;
  else if (a.concrete() && b.concrete()) {
    if (detail::union_of(a.groups, earlier.mesh) != detail::union_of(b.groups, earlier.mesh))
      conflict("gradient groups '" + detail::group_list(a.groups) + "' and '" + detail::group_list(b.groups) +
               "' differ");
    if (b.mode == GradMode::given) g = b;
  }
  g.backend = a.backend ? a.backend : b.backend;
  g.schedule = a.schedule != GradSchedule::backend_default ? a.schedule : b.schedule;
  g.explicit_none = a.explicit_none || b.explicit_none;
  out.grad = g;
  const auto& x = earlier.init_sync;
  const auto& y = later.init_sync;
  if (x.mode == InitSyncMode::inferred) out.init_sync = y;
  else if (y.mode != InitSyncMode::inferred &&
           (x.mode != y.mode ||
            detail::union_of(x.groups, earlier.mesh) != detail::union_of(y.groups, earlier.mesh)))
    conflict("init_sync values differ");
  validate(out, op);
  return out;
}

}  // namespace einshard
