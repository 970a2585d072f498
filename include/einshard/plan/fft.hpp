#pragma once
/// @file
/// The distributed FFT planner: in which order the transform axes are transformed, and which
/// transposes make each of them local first. Pure (no MPI, no tensors): a function of the axes,
/// their lengths, their input and output sharding and the mesh shape, so every rank derives the same
/// plan and `tests/unit` checks it directly.
///
/// A multi-dimensional FFT is a product of 1-D FFTs, one per transform axis, in any order. An axis
/// can be transformed only while every rank holds all of it, so the plan alternates local FFTs of
/// every transform axis that is local with transposes: each sharded transform axis hands its mesh
/// group to a partner axis that is local (one all-to-all(v), every element moved once). Partners are
/// chosen so that the layout after the last FFT is the output's whenever possible, which skips the
/// final transpose when the output notation asks for the transposed layout (FFTW_MPI_TRANSPOSED_OUT,
/// heFFTe). Then one last layout change (`plan_unary`) reaches the output. Nothing is gathered
/// except where the output itself is whole.
///
/// A tensor whose only axis is sharded has no partner to transpose with: that axis is transformed
/// in place by a factored (six-step or Bluestein) transform over its group.
///
/// Real transforms add order constraints: a forward (r2c) transform starts with the half-spectrum
/// axis (the data is real only until then); an inverse (c2r) transform ends with it.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/step.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard::plan {

/// What a local FFT stage computes over its axes (torch's fftn / ifftn / rfftn / irfftn).
enum class FftOp { forward, inverse, real_forward, real_inverse };

constexpr const char* fft_op_name(FftOp op) noexcept {
  switch (op) {
    case FftOp::forward: return "fft";
    case FftOp::inverse: return "ifft";
    case FftOp::real_forward: return "rfft";
    case FftOp::real_inverse: return "irfft";
  }
  return "?";
}

/// One dimension of the tensor (in input order).
struct FftAxis {
  std::string in, out;                ///< its name in the input and in the output
  bool transform = false;
  bool half = false;                  ///< the real transform's half-spectrum axis
  std::int64_t in_length = 0, out_length = 0;
  Group in_group, out_group;          ///< mesh groups (empty = whole)
};

struct FftProblem {
  std::vector<FftAxis> axes;           ///< input order
  std::vector<std::string> out_order;  ///< output axis names, in output order
  bool inverse = false;
  bool real = false;
};

/// A stage of the plan: a local FFT over `dims` (tensor dimensions; the half axis last), a layout
/// change (`steps`, from `plan_unary`; a transpose is one redistribute step), or the factored
/// transform of the one axis of the tensor while it stays sharded (plan/fft_factored.hpp).
struct FftStage {
  enum class Kind { fft, move, factored } kind = Kind::fft;
  FftOp op = FftOp::forward;
  std::vector<std::int64_t> dims;
  std::vector<Step> steps;
  Layout before, after;
  /// Which dimensions are transformed already (names and lengths are the output's for those).
  std::vector<bool> done;
};

struct FftPlan {
  std::vector<FftStage> stages;
  Layout in, out;
  /// Number of transposes (all-to-all(v) steps) the plan runs, the final layout change included.
  [[nodiscard]] int transposes() const {
    int n = 0;
    for (const auto& s : stages)
      for (const auto& st : s.steps) n += st.kind == StepKind::redistribute ? 1 : 0;
    return n;
  }
};

namespace detail {

inline void require_disjoint(const Layout& l, const char* side) {
  for (std::size_t i = 0; i < l.axes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (l.axes[i].group.overlaps(l.axes[j].group))
        throw Error(std::string("einfft: axes '") + l.axes[j].axis + "' and '" + l.axes[i].axis +
                    "' of the " + side + " are sharded over the same mesh dimension ('" + l.str() +
                    "'); each mesh dimension may shard one axis");
}

}  // namespace detail

/// The form in which einfft parses `in -> out`: `in ,  out -> out` ("->" becomes ", ", so every
/// column of the written notation stays where it was). The einsum grammar rejects output axes that
/// no input has, and the transformed axes are exactly that; as a second input the output spec is
/// checked by the same grammar. Empty when there is no "->".
inline std::string fft_parse_form(std::string_view notation) {
  const auto arrow = notation.find("->");
  if (arrow == std::string_view::npos) return {};
  std::string out(notation);
  out[arrow] = ',';
  out[arrow + 1] = ' ';
  return out + " -> " + std::string(notation.substr(arrow + 2));
}

/// The problem a notation states. `e` is the notation's parse form (`fft_parse_form`): the input,
/// the output as a second input, then the output. `source` is the notation as written. `axes` are
/// the transform axes (input name, output name; with `real`, the last pair is the half-spectrum
/// axis). Lengths are left 0 for the caller to fill in. Without a mesh (`mesh == nullptr`) no axis
/// may be sharded. Pure; every fault is an `Error` naming the notation.
inline FftProblem fft_problem(const notation::ExpressionView& e, std::string_view source,
                              const std::vector<std::pair<std::string, std::string>>& axes,
                              bool inverse, bool real, const MeshShape* mesh) {
  const auto what = "einfft '" + std::string(source) + "'";
  if (e.input_count() != 2)
    throw Error(what + ": einfft takes one tensor, but the notation has " +
                std::to_string(e.input_count() - 1) + " inputs");
  struct Named {
    std::string name;
    Group group;
  };
  auto read = [&](const notation::Spec& s, const char* side) {
    if (s.partial_count != 0)
      throw Error(what + ": partial sums ('//') are not allowed in an FFT; reduce them first");
    std::vector<Named> out;
    for (const auto& item : e.items_of(s)) {
      if (item.kind != notation::ItemKind::axis)
        throw Error(what + ": the " + side + " uses '" +
                    (item.kind == notation::ItemKind::ellipsis ? std::string("...") : std::string("( )")) +
                    "'; einfft names every axis plainly (reshape first)");
      const auto& a = e.axes_of(item)[0];
      Group g;
      if (!a.mesh.empty()) {
        if (mesh == nullptr)
          throw Error(what + " shards axis '" + std::string(e.name(a)) +
                      "'; a distributed einfft needs a mesh (.mesh = ...)");
        g = mesh->group(e.mesh(a));
      }
      for (const auto& o : out)
        if (o.name == e.name(a))
          throw Error(what + ": axis '" + o.name + "' appears twice in the " + side);
      out.push_back({std::string(e.name(a)), std::move(g)});
    }
    return out;
  };
  const auto in = read(e.input(0), "input");
  const auto out = read(e.output(), "output");
  if (axes.empty())
    throw Error(what + ": no transform axes given (.axes = {{\"x\", \"kx\"}, ...})");
  auto find = [](const std::vector<Named>& l, const std::string& n) {
    for (std::size_t i = 0; i < l.size(); ++i)
      if (l[i].name == n) return i;
    return l.size();
  };
  FftProblem p;
  p.inverse = inverse;
  p.real = real;
  for (const auto& a : in) p.axes.push_back({a.name, a.name, false, false, 0, 0, a.group, {}});
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const auto& [from, to] = axes[k];
    const auto i = find(in, from);
    if (i == in.size())
      throw Error(what + ": transform axis '" + from + "' is not an axis of the input");
    if (find(out, to) == out.size())
      throw Error(what + ": transform axis '" + from + "' becomes '" + to +
                  "', which is not an axis of the output");
    auto& a = p.axes[i];
    if (a.transform) throw Error(what + ": transform axis '" + from + "' is listed twice");
    a.transform = true;
    a.out = to;
    a.half = real && k + 1 == axes.size();
  }
  for (const auto& a : p.axes) {
    if (a.transform && a.out != a.in && find(in, a.out) != in.size())
      throw Error(what + ": transform axis '" + a.in + "' becomes '" + a.out +
                  "', which names another input axis; use fresh names for the transformed axes");
    const auto o = find(out, a.out);
    if (o == out.size())
      throw Error(what + ": input axis '" + a.in + "' is not transformed, so the output must keep it as '" +
                  a.in + "'");
  }
  if (out.size() != in.size())
    throw Error(what + ": the output must be the input with the transform axes renamed (" +
                std::to_string(in.size()) + " axes in, " + std::to_string(out.size()) + " out)");
  for (auto& a : p.axes) {
    a.out_group = out[find(out, a.out)].group;
    if (!a.transform && a.out_group != a.in_group)
      throw Error(what + ": axis '" + a.in + "' is not transformed, so it must keep its sharding ('" +
                  (a.in_group.empty() ? a.in : a.in + "/" + a.in_group.name()) + "' in, '" +
                  (a.out_group.empty() ? a.in : a.in + "/" + a.out_group.name()) +
                  "' out); change it with einshard before or after");
  }
  for (const auto& o : out) p.out_order.push_back(o.name);
  return p;
}

/// The stages that compute the transform of `p` on a mesh of shape `mesh`.
inline FftPlan plan_fft(const FftProblem& p, const MeshShape& mesh) {
  const auto n = p.axes.size();
  std::vector<Group> group(n);
  std::vector<bool> done(n, false);
  for (std::size_t d = 0; d < n; ++d) group[d] = p.axes[d].in_group;

  auto layout = [&] {
    Layout l;
    for (std::size_t d = 0; d < n; ++d) l.axes.push_back({done[d] ? p.axes[d].out : p.axes[d].in, group[d]});
    return l;
  };
  FftPlan plan;
  plan.in = layout();
  for (const auto& name : p.out_order)
    for (const auto& a : p.axes)
      if (a.out == name) plan.out.axes.push_back({a.out, a.out_group});
  detail::require_disjoint(plan.in, "input");
  detail::require_disjoint(plan.out, "output");

  std::size_t half = n;
  for (std::size_t d = 0; d < n; ++d)
    if (p.axes[d].half) half = d;
  auto pending = [&] {
    std::vector<std::size_t> out;
    for (std::size_t d = 0; d < n; ++d)
      if (p.axes[d].transform && !done[d]) out.push_back(d);
    return out;
  };
  auto length = [&](std::size_t d) { return done[d] ? p.axes[d].out_length : p.axes[d].in_length; };

  for (auto todo = pending(); !todo.empty(); todo = pending()) {
    // The axes that may be transformed next.
    std::vector<std::size_t> eligible = todo;
    const bool half_pending = half < n && !done[half];
    if (half_pending && !p.inverse && !group[half].empty()) {
      eligible = {half};  // r2c comes first: free the half axis before anything else
    } else if (half_pending && p.inverse) {
      const bool all_local = std::all_of(todo.begin(), todo.end(), [&](std::size_t d) { return group[d].empty(); });
      if (!all_local && todo.size() > 1) std::erase(eligible, half);  // c2r comes last
    }
    std::vector<std::int64_t> local;
    for (auto d : eligible)
      if (group[d].empty()) local.push_back(static_cast<std::int64_t>(d));
    if (!local.empty()) {
      const bool with_half = half_pending && std::find(local.begin(), local.end(), static_cast<std::int64_t>(half)) != local.end();
      if (with_half) {  // torch's rfftn/irfftn take the half axis last
        std::erase(local, static_cast<std::int64_t>(half));
        local.push_back(static_cast<std::int64_t>(half));
      }
      FftStage s;
      s.kind = FftStage::Kind::fft;
      s.op = with_half ? (p.inverse ? FftOp::real_inverse : FftOp::real_forward)
                       : (p.inverse ? FftOp::inverse : FftOp::forward);
      s.dims = local;
      s.before = layout();
      for (auto d : local) done[static_cast<std::size_t>(d)] = true;
      s.after = layout();
      plan.stages.push_back(std::move(s));
      continue;
    }

    // Every eligible axis is sharded: transpose. Each hands its group to a partner axis.
    auto rank = [&](std::size_t c, const Group& g) {
      const auto& a = p.axes[c];
      const int kind = done[c] && a.transform ? (a.out_group == g ? 0 : 1) : !a.transform ? 2 : 3;
      return std::tuple{group[c].empty() ? 0 : 1, kind, -length(c), c};
    };
    std::vector<std::size_t> taken;
    auto is_taken = [&](std::size_t c) { return std::find(taken.begin(), taken.end(), c) != taken.end(); };
    std::vector<Group> next = group;
    for (auto f : eligible) {
      std::size_t best = n;
      for (std::size_t c = 0; c < n; ++c) {
        if (!group[c].empty() || is_taken(c) || std::find(eligible.begin(), eligible.end(), c) != eligible.end())
          continue;
        if (best == n || rank(c, group[f]) < rank(best, group[f])) best = c;
      }
      if (best == n) continue;  // no local partner left: this axis waits for a later transpose
      taken.push_back(best);
      taken.push_back(f);
      next[best] = group[f];
      next[f] = {};
    }
    if (taken.empty()) {
      // No axis is local: the first eligible axis joins its group to a sharded one (a compound
      // group), which frees it; the partner is freed in a later transpose.
      const auto f = eligible.front();
      std::size_t best = n;
      for (std::size_t c = 0; c < n; ++c)
        if (c != f && (best == n || rank(c, group[f]) < rank(best, group[f]))) best = c;
      if (best == n) {
        // The only axis: no partner to transpose into, so it is transformed in place over its
        // group by a factored transform (plan/fft_factored.hpp).
        FftStage s;
        s.kind = FftStage::Kind::factored;
        s.op = p.real ? (p.inverse ? FftOp::real_inverse : FftOp::real_forward)
                      : (p.inverse ? FftOp::inverse : FftOp::forward);
        s.dims = {static_cast<std::int64_t>(f)};
        s.before = layout();
        done[f] = true;
        s.after = layout();
        plan.stages.push_back(std::move(s));
        continue;
      }
      next[best] = mesh.unite(group[best], group[f]);
      next[f] = {};
    }
    FftStage s;
    s.kind = FftStage::Kind::move;
    s.done = done;
    s.before = layout();
    group = next;
    s.after = layout();
    s.steps = plan_unary(s.before, s.after, mesh, "einfft");
    plan.stages.push_back(std::move(s));
  }

  FftStage last;
  last.kind = FftStage::Kind::move;
  last.done = done;
  last.before = layout();
  last.after = plan.out;
  last.steps = plan_unary(last.before, last.after, mesh, "einfft");
  if (!last.steps.empty()) plan.stages.push_back(std::move(last));
  return plan;
}

}  // namespace einshard::plan
