#pragma once
/// @file
/// `einroll`: `torch::roll` along named axes, sharded ones included. A sharded axis rolls by moving
/// slices directly between the ranks that hold them (one point-to-point exchange, the fetch of each
/// rank's range shifted back and wrapped), for any shift, uneven and empty shards; nothing is
/// gathered.
///
/// ```cpp
/// auto r = es::einroll<"a/sp b">(x, {{"a", 5}, {"b", -4}}, {.mesh = mesh});
/// ```

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "einshard/error.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/ops/halo.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/config.hpp"

// Compiled (config.hpp), only einshard_compiled parses the executor behind this operation.
#if !EINSHARD_DECLARE_ONLY
#include "einshard/exec/halo.hpp"
#include "einshard/plan/halo.hpp"
#endif

namespace einshard {

/// Shifts by axis name: `{{"a", 5}, {"b", -4}}` (element i moves to i + shift, modulo the extent).
using Shifts = std::map<std::string, std::int64_t, std::less<>>;

namespace detail {

/// The operation's entry points (defined with its executor, below or in einshard_compiled).
EINSHARD_INLINE at::Tensor run_roll(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                                    const Shifts& shifts, const Options& o);
EINSHARD_INLINE Plan explain_roll(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                                  const Shifts& shifts, const Options& o);

EINSHARD_INLINE std::shared_ptr<const PreparedHaloState> prepare_roll_state(const notation::ExpressionView& e,
                                                                            std::string_view written,
                                                                            const at::Tensor& x, const Shifts& shifts,
                                                                            const Options& o);

#if !EINSHARD_DECLARE_ONLY
/// Checks and plans an einroll call (collective over the mesh when an axis is sharded): a periodic
/// exchange, whose whole axes roll locally.
inline StencilCall roll_call(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                             const Shifts& shifts, const Options& o) {
  const auto what = "einroll '" + std::string(written) + "'";
  check_unused_options(o, "einroll", {"shapes", "families"});
  const auto& spec = e.input(0);
  const auto names = axis_names(e, spec);
  std::string key;
  for (const auto& [axis, shift] : shifts) {
    if (!has_name(names, axis))
      throw Error(what + ": roll axis '" + axis + "' is not an axis of the notation (" + joined(names) + ")");
    key += axis + ':' + std::to_string(shift) + ';';
  }
  auto in = agree_input(e, spec, {&x, 1}, {}, o, what, key);
  auto prepared = prepare_exchanges(in, o, e.source, what, key, [&](const StencilInput& measured) {
    PreparedExchanges p;
    for (const auto& axis : measured.axes) {
      const auto s = shifts.find(axis.name);
      const auto n = plan::shard_offsets(axis.shards).back();
      if (s == shifts.end() || n == 0 || s->second % n == 0) continue;
      // A whole axis rolls locally (at::roll); a sharded one fetches its rows moved back.
      p.push_back({axis,
                   axis.group.empty() ? nullptr
                                      : exec::plan_axis(axis, o.mesh, plan::roll_requests(axis.shards, s->second),
                                                        plan::Edge::periodic, what),
                   0, s->second});
    }
    return p;
  });
  return {stencil_plan(written, x, o, std::move(prepared), std::move(in.layout)), plan::Edge::periodic, 0.0};
}

EINSHARD_INLINE at::Tensor run_roll(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                           const Shifts& shifts, const Options& o) {
  auto call = roll_call(e, written, x, shifts, o);
  auto y = run_exchanges(call, x);
  remember_plan(o, std::move(call.plan));
  return y;
}

EINSHARD_INLINE Plan explain_roll(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                                  const Shifts& shifts, const Options& o) {
  return roll_call(e, written, x, shifts, o).plan.describe();
}

EINSHARD_INLINE std::shared_ptr<const PreparedHaloState> prepare_roll_state(const notation::ExpressionView& e,
                                                                            std::string_view written,
                                                                            const at::Tensor& x, const Shifts& shifts,
                                                                            const Options& o) {
  return std::make_shared<const PreparedHaloState>(
      PreparedHaloState{roll_call(e, written, x, shifts, o), {"einroll '" + std::string(written) + "'", {{"tensor", &x}}}});
}
#endif  // !EINSHARD_DECLARE_ONLY
}  // namespace detail

/// `einroll<"a/sp b">(x, {{"a", 5}, {"b", -4}}, {.mesh = mesh})`: `torch::roll` by the given shift
/// along each named axis (negative and larger-than-extent shifts wrap). A sharded axis keeps its
/// shards; the rows each rank needs move directly from their owners. Backward rolls the gradient
/// back the same way. Options: `mesh`, `shapes`, `families` (run-time form).
template <fixed_string S>
at::Tensor einroll(const at::Tensor& x, const Shifts& shifts, const Options& o = {}) {
  return detail::run_roll(notation::static_expression<detail::self_map_v<S>>.view(), S.view(), x, shifts, o);
}

/// The run-time form: `einroll("a/sp b", x, {{"a", 5}}, {...})`.
EINSHARD_INLINE at::Tensor einroll(std::string_view spec, const at::Tensor& x, const Shifts& shifts, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE at::Tensor einroll(std::string_view spec, const at::Tensor& x, const Shifts& shifts, const Options& o) {
  const auto parsed = detail::parse_cached(spec, true, o.families);
  return detail::run_roll(parsed->view(), spec, x, shifts, o);
}
#endif

/// An `einroll` prepared once for one shard, for a loop that rolls the same shards every step (a
/// shifted stencil, a periodic convolution by rolls): construction agrees and plans (collective
/// over the mesh, as an `einroll` call), and each call then fetches the shifted rows only, with no
/// collective. A call takes a tensor of the shape, dtype and device it was prepared for and returns
/// what `einroll` would, differentiable alike; another tensor raises as a `PreparedHalo`'s call
/// does. Copies share the prepared exchange.
class PreparedRoll : public detail::PreparedOp<detail::PreparedHaloState> {
 public:
  using PreparedOp::PreparedOp;
  /// `x`'s shard rolled, as `einroll` with the prepared notation, shifts and options.
  at::Tensor operator()(const at::Tensor& x) const { return detail::run_prepared_halo(state_, x); }
};

/// `prepare_roll<"a/sp b">(x, {{"a", 5}}, {.mesh = mesh})`: `einroll`'s arguments, prepared for
/// shards like `x` (collective over the mesh when an axis is sharded).
template <fixed_string S>
PreparedRoll prepare_roll(const at::Tensor& x, const Shifts& shifts, const Options& o = {}) {
  return PreparedRoll(
      detail::prepare_roll_state(notation::static_expression<detail::self_map_v<S>>.view(), S.view(), x, shifts, o));
}

/// The run-time form: `prepare_roll("a/sp b", x, {{"a", 5}}, {...})`.
EINSHARD_INLINE PreparedRoll prepare_roll(std::string_view spec, const at::Tensor& x, const Shifts& shifts,
                                          const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE PreparedRoll prepare_roll(std::string_view spec, const at::Tensor& x, const Shifts& shifts,
                                          const Options& o) {
  const auto parsed = detail::parse_cached(spec, true, o.families);
  return PreparedRoll(detail::prepare_roll_state(parsed->view(), spec, x, shifts, o));
}
#endif

/// What `einroll<S>(x, shifts, o)` would run: per rolled axis, a local "roll" (whole axis) or the
/// periodic fetch of the shifted range, "halo_forward_accumulate_backward" (sharded axis), with
/// this rank's bytes sent and received forward and backward. Collective over the mesh when an axis
/// is sharded; moves no data.
template <fixed_string S>
Plan explain_roll(const at::Tensor& x, const Shifts& shifts, const Options& o = {}) {
  return detail::explain_roll(notation::static_expression<detail::self_map_v<S>>.view(), S.view(), x, shifts, o);
}

EINSHARD_INLINE Plan explain_roll(std::string_view spec, const at::Tensor& x, const Shifts& shifts, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE Plan explain_roll(std::string_view spec, const at::Tensor& x, const Shifts& shifts, const Options& o) {
  const auto parsed = detail::parse_cached(spec, true, o.families);
  return detail::roll_call(parsed->view(), spec, x, shifts, o).plan.describe();
}
#endif

}  // namespace einshard
