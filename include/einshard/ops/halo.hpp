#pragma once
/// @file
/// `einhalo`: ghost rows around the shards of named axes, with constant, periodic or replicate
/// boundaries, and the machinery the other stencil operations (`einwindow`, `einconv`, `einroll`)
/// share: single-operand notations, their run-time cache, and resolving an operand's shards.
///
/// ```cpp
/// auto g = es::einhalo<"b h/sp w c">(x, {{"h", 2}, {"w", {1, 0}}},
///                                    {.mesh = mesh, .boundary = es::Boundary::periodic});
/// ```

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/notation/fixed_string.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/config.hpp"
#include "einshard/ops/einshard.hpp"

// Compiled (config.hpp), only einshard_compiled parses the executor behind this operation.
#if !EINSHARD_DECLARE_ONLY
#include "einshard/comm/agreement.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/exec/halo.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/plan/halo.hpp"
#include "einshard/plan/layout.hpp"
#endif

namespace einshard {

/// Widths before and after along one axis: `{"h", 2}` (both sides) or `{"h", {1, 3}}`.
struct Halo {
  std::int64_t left = 0, right = 0;
  Halo(std::int64_t both) : left(both), right(both) {}                      // NOLINT
  Halo(std::int64_t l, std::int64_t r) : left(l), right(r) {}
};
/// Halo widths (or window radii) by axis name.
using Halos = std::map<std::string, Halo, std::less<>>;

namespace detail {

/// `S->S`: a single-operand notation (`"b h/sp w c"`) in the form the one parser reads.
template <fixed_string S>
constexpr auto self_map() {
  fixed_string<2 * S.size() + 2> out;
  for (std::size_t i = 0; i < S.size(); ++i) out.data[i] = out.data[S.size() + 2 + i] = S.data[i];
  out.data[S.size()] = '-';
  out.data[S.size() + 1] = '>';
  return out;
}
template <fixed_string S>
inline constexpr auto self_map_v = self_map<S>();

template <fixed_string S>
constexpr std::size_t arrow_of() {
  constexpr auto arrow = S.view().find("->");
  static_assert(arrow != std::string_view::npos, "einshard: expected '->' in this notation, found none");
  return arrow;
}
template <fixed_string S, std::size_t Begin, std::size_t End>
constexpr auto substring() {
  fixed_string<End - Begin> part;
  for (std::size_t i = Begin; i < End; ++i) part.data[i - Begin] = S.data[i];
  return part;
}
/// The spec before (`In`) or after (`!In`) the arrow of `S`, as its own `spec->spec` notation.
template <fixed_string S, bool In>
inline constexpr auto side_spec =
    substring<S, In ? 0 : arrow_of<S>() + 2, In ? arrow_of<S>() : S.size()>();
template <fixed_string S, bool In>
inline constexpr auto side_v = self_map<side_spec<S, In>>();

/// The operation's entry points (defined with its executor, below or in einshard_compiled).
EINSHARD_INLINE at::Tensor run_halo(const notation::ExpressionView& e, std::string_view written,
                                    const at::Tensor& x, const Halos& halos, const Options& o);
EINSHARD_INLINE Plan explain_halo(const notation::ExpressionView& e, std::string_view written,
                                  const at::Tensor& x, const Halos& halos, const Options& o);
/// A stencil call prepared once (`PreparedHalo`, `PreparedRoll`, `PreparedWindow`, `PreparedConv`):
/// the call's plan with what a call checks on its rank (defined with the executor).
template <class Call>
struct Prepared;
struct StencilCall;
/// A prepared exchange alone: einhalo's, and einroll's (its periodic fetch of a moved interval).
using PreparedHaloState = Prepared<StencilCall>;
EINSHARD_INLINE std::shared_ptr<const PreparedHaloState> prepare_halo_state(const notation::ExpressionView& e,
                                                                            std::string_view written,
                                                                            const at::Tensor& x, const Halos& halos,
                                                                            const Options& o);
EINSHARD_INLINE at::Tensor run_prepared_halo(const std::shared_ptr<const PreparedHaloState>& state, const at::Tensor& x);
EINSHARD_INLINE Plan explain_prepared(const PreparedHaloState& state);

#if !EINSHARD_DECLARE_ONLY
/// A run-time notation, or with `self` one operand spec as `spec->spec`, families expanded;
/// parsed once (the process-wide NotationCache).
inline std::shared_ptr<const CompiledNotation> parse_cached(std::string_view text, bool self,
                                                           const Families& families) {
  return NotationCache::instance().get(text, families, self);
}

/// A window notation `in -> out` as two single-operand notations (the output names window axes no
/// input has, which the einsum grammar's checks reject).
inline std::pair<std::shared_ptr<const CompiledNotation>, std::shared_ptr<const CompiledNotation>>
parse_sides(std::string_view text, const Families& families) {
  const auto arrow = text.find("->");
  if (arrow == std::string_view::npos) throw NotationError(text, text.size() + 1, "expected '->'");
  return {parse_cached(text.substr(0, arrow), true, families),
          parse_cached(text.substr(arrow + 2), true, families)};
}

inline plan::Edge edge_of(Boundary b) {
  switch (b) {
    case Boundary::periodic: return plan::Edge::periodic;
    case Boundary::replicate: return plan::Edge::replicate;
    case Boundary::constant: break;
  }
  return plan::Edge::constant;
}

/// The boundary options of a stencil operation: `.fill` belongs to the constant boundary.
inline std::pair<plan::Edge, double> boundary_of(const Options& o, const std::string& what) {
  const auto b = o.boundary.value_or(Boundary::constant);
  if (o.fill && b != Boundary::constant)
    throw Error(what + ": '.fill' is the value of the constant boundary, but the boundary is " +
                (b == Boundary::periodic ? "periodic" : "replicate"));
  return {edge_of(b), o.fill.value_or(0.0)};
}

/// The axis names of an operand spec, in order (checked before anything moves).
inline std::vector<std::string> axis_names(const notation::ExpressionView& e, const notation::Spec& spec) {
  std::vector<std::string> names;
  for (const auto& a : e.axes_of(spec)) names.emplace_back(e.name(a));
  return names;
}

inline std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

inline bool has_name(const std::vector<std::string>& names, std::string_view n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

/// The first operand of a stencil operation resolved: its layout and every axis's shards, agreed
/// over the mesh when any axis is sharded (then `agreed` holds every rank's description of every
/// operand; `extra` operands must be whole, such as a convolution's weight).
struct StencilInput {
  plan::Layout layout;
  std::vector<exec::StencilAxis> axes;
  bool distributed = false;
  exec::AgreedOperands agreed;

  [[nodiscard]] const exec::StencilAxis& axis(std::string_view name) const {
    return axes[static_cast<std::size_t>(layout.find(name))];
  }
};

/// Checks the operand spec and, when an axis is sharded, agrees with the other ranks on every
/// operand (`key` describes the call's parameters, so that ranks calling with different ones fail
/// alike). Whole-axis calls learn their sizes here; sharded ones in `measure_input`.
inline StencilInput agree_input(const notation::ExpressionView& e, const notation::Spec& spec,
                                std::span<const at::Tensor> xs, std::span<const std::int64_t> extra_dims,
                                const Options& o, const std::string& what, const std::string& key) {
  if (spec.has_ellipsis) throw Error(what + ": stencil operations need every axis named (no '...')");
  bool sharded = false;
  for (const auto& a : e.axes_of(spec)) sharded = sharded || !a.mesh.empty();
  if (sharded && !o.mesh)
    throw Error(what + ": the notation shards axes, so the operation needs a mesh (.mesh = ...)");
  StencilInput in;
  in.distributed = sharded;
  in.layout = plan::layout_of(e, spec, 0, sharded ? o.mesh.shape() : MeshShape{}, what);
  if (!in.layout.partial.empty()) throw Error(what + ": stencil operations take no partial sums ('//')");
  const auto ndim = static_cast<std::int64_t>(in.layout.axes.size());
  if (!sharded) {
    if (xs[0].dim() != ndim)
      throw Error(what + ": the tensor has " + std::to_string(xs[0].dim()) +
                  " dimensions, but the notation names " + std::to_string(ndim));
    for (std::int64_t d = 0; d < ndim; ++d)
      in.axes.push_back({in.layout.axes[static_cast<std::size_t>(d)].axis, d, {}, {xs[0].size(d)}});
    return in;
  }
  const Mesh& mesh = o.mesh;
  // An exchange along one axis runs within its group, among ranks holding the same rows of every
  // other axis: that needs the groups of different axes to share no mesh dimension.
  for (std::size_t d = 0; d < in.layout.axes.size(); ++d)
    for (std::size_t e = 0; e < d; ++e)
      if (const auto& g = in.layout.axes[d].group; g.overlaps(in.layout.axes[e].group))
        throw Error(what + ": axes '" + in.layout.axes[e].axis + "' and '" + in.layout.axes[d].axis +
                    "' are both sharded over mesh dimension '" +
                    mesh.shape().minus(g, mesh.shape().minus(g, in.layout.axes[e].group)).name() +
                    "'; stencil axes need disjoint groups");
  std::vector<std::int64_t> dims{ndim};
  dims.insert(dims.end(), extra_dims.begin(), extra_dims.end());
  in.agreed = exec::agree_stencil(mesh, xs, in.layout, dims, exec::fingerprint(what + key, 0), o.shapes, what);
  return in;
}

/// Every sharded axis's shards from the agreed shapes (checked against each other and `.shapes`);
/// the other operands must be the same whole tensor everywhere.
inline void measure_input(StencilInput& in, const Options& o, const std::string& what) {
  if (!in.distributed) return;
  exec::SizeTable sizes;
  exec::measure(sizes, in.layout, in.agreed, 0, o.mesh, o.shapes, what);
  in.axes = exec::stencil_axes(in.layout, sizes);
  if (in.agreed.summarized()) return;  // the other operands are whole and alike by construction
  const auto& ranks = in.agreed.ranks;
  for (std::size_t i = 1; i < in.agreed.mine.size(); ++i)
    for (std::size_t r = 1; r < ranks.size(); ++r)
      if (!std::equal(ranks[r][i].sizes.begin(), ranks[r][i].sizes.end(), ranks[0][i].sizes.begin()))
        throw Error(what + ": input " + std::to_string(i + 1) + " must be the same whole tensor on every rank, "
                    "but its shape on rank " + std::to_string(r) + " differs from rank 0's");
}

/// The exchanges of a halo-like call (one per axis that moves, in the order they run), planned
/// once per distinct call: the notation and parameters, the mesh, the shapes metadata and every
/// rank's shapes. A repeated call (a stencil loop) then costs the agreement (one small all-reduce when
/// the shards are cut the usual way) and the messages.
struct PreparedAxis {
  exec::StencilAxis axis;
  std::shared_ptr<const plan::AxisExchange> exchange;  ///< null: einroll's local roll of a whole axis
  std::int64_t outputs = 0;  ///< einwindow, einconv: this rank's output positions (plan::plan_window)
  std::int64_t shift = 0;    ///< einroll's whole axis: what it rolls by
};
using PreparedExchanges = std::vector<PreparedAxis>;

/// `plan(in)` plans the exchanges of a call whose sizes are measured. `source` is the notation as
/// parsed: with families, one written text may expand to different axes.
template <class Make>
std::shared_ptr<const PreparedExchanges> prepare_exchanges(StencilInput& in, const Options& o, std::string_view source,
                                                           const std::string& what, const std::string& key,
                                                           Make&& plan) {
  if (!in.distributed) return std::make_shared<const PreparedExchanges>(plan(in));
  // The mesh's shape too: a freed communicator's handle may come back for a differently shaped mesh.
  std::string cache_key = what + '\x1f' + std::string(source) + '\x1f' + key + '\x1f' +
                          std::to_string(comm::to_handle(o.mesh.comm())) + ':' + o.shapes.key();
  for (std::size_t d = 0; d < o.mesh.names().size(); ++d)
    cache_key += o.mesh.names()[d] + '=' + std::to_string(o.mesh.sizes()[d]) + ';';
  in.agreed.append_key(cache_key);
  return exec::CallCache<PreparedExchanges>::instance().get(cache_key, [&] {
    measure_input(in, o, what);
    return plan(in);
  });
}

/// A prepared stencil call as its plan is described from: `last_plan()` keeps it and describes it
/// only when asked.
struct StencilPlan {
  std::string source;
  Mesh mesh;
  std::shared_ptr<const PreparedExchanges> exchanges;
  std::vector<std::int64_t> shape;  ///< this rank's input
  std::int64_t element = 0;
  plan::Layout input{}, output{};   ///< output: after `local`
  std::string local{};              ///< the local computation after the exchanges, if any
  /// Whole operands whose gradients are partial sums over `partial_group` (einconv's weight and
  /// bias): their layouts and bytes.
  Group partial_group{};
  std::vector<std::pair<plan::Layout, std::int64_t>> partials{};

  [[nodiscard]] Plan describe() const {
    Plan p{source, {}, {}};
    auto extended = shape;
    const auto layout = input.str();
    for (const auto& [axis, exchange, outputs, shift] : *exchanges)
      p.steps.push_back(exchange ? exec::describe_exchange(axis, *exchange, mesh, extended, element, layout)
                                 : PlanStep{"roll", "", axis.name, layout, layout, {}, {}, -1});
    if (!local.empty()) p.steps.push_back({local, "", "", layout, output.str(), {}, {}, -1});
    const std::int64_t P = partial_group.empty() ? 1 : mesh.size(partial_group);
    for (std::size_t i = 0; i < partials.size(); ++i) {
      // Costed as einshard's identity/all-reduce pair: a copy forward, a ring all-reduce backward.
      const auto& [operand, bytes] = partials[i];
      p.steps.push_back({"identity_forward_allreduce_backward", partial_group.name(), "", operand.str(), operand.str(),
                         {0, 0, 0, bytes}, ring_all_reduce(bytes, P), static_cast<int>(i) + 1});
    }
    return p;
  }
};

/// The plan of a call prepared on `x`; the caller adds its operation's parts (`output`, `local`,
/// partials).
inline StencilPlan stencil_plan(std::string_view written, const at::Tensor& x, const Options& o,
                                std::shared_ptr<const PreparedExchanges> exchanges, plan::Layout input) {
  return {std::string(written), o.mesh, std::move(exchanges), x.sizes().vec(),
          static_cast<std::int64_t>(x.element_size()), std::move(input)};
}

/// Keeps a call for `last_plan()`, described only when asked.
inline void remember_plan(StencilPlan&& call) {
  remember_lazy_plan([call = std::move(call)] { return call.describe(); });
}

/// Keeps a call on a mesh for `last_plan()` (moved in: this runs on every call).
inline void remember_plan(const Options& o, StencilPlan&& call) {
  if (!o.mesh) return;
  remember_plan(std::move(call));
}

/// Halo widths checked against the operand's axes (in the operand's order, as the exchange runs).
inline std::string halo_key(const Halos& halos, const std::vector<std::string>& names,
                            const std::string& what, std::string_view label) {
  std::string key;
  for (const auto& [axis, h] : halos) {
    if (!has_name(names, axis))
      throw Error(what + ": " + std::string(label) + " axis '" + axis + "' is not an axis of the notation (" +
                  joined(names) + ")");
    if (h.left < 0 || h.right < 0)
      throw Error(what + ": " + std::string(label) + " widths of axis '" + axis + "' must not be negative (got " +
                  std::to_string(h.left) + ", " + std::to_string(h.right) + ")");
    key += axis + ':' + std::to_string(h.left) + ',' + std::to_string(h.right) + ';';
  }
  return key;
}

/// A per-axis option (`.stride`, `.dilation`) for each of `axes`: the value for every axis, the
/// axis's own, or 1. Keys naming other axes are errors.
inline std::vector<std::int64_t> per_axis(const std::optional<PerAxis>& v, const std::vector<std::string>& axes,
                                          const std::string& what, std::string_view label) {
  std::vector<std::int64_t> out(axes.size(), v && v->all ? *v->all : 1);
  if (v)
    for (const auto& [axis, value] : v->by_axis) {
      const auto it = std::find(axes.begin(), axes.end(), axis);
      if (it == axes.end())
        throw Error(what + ": '." + std::string(label) + "' names axis '" + axis +
                    "', which is not a window axis (" + joined(axes) + ")");
      out[static_cast<std::size_t>(it - axes.begin())] = value;
    }
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (out[i] < 1)
      throw Error(what + ": '." + std::string(label) + "' of axis '" + axes[i] + "' must be positive (got " +
                  std::to_string(out[i]) + ")");
  return out;
}

/// A stencil call agreed (collective over the mesh when an axis is sharded) and planned: its
/// exchanges with the boundary they pad by. einhalo's whole call; the others add their local part.
struct StencilCall {
  StencilPlan plan;
  plan::Edge edge = plan::Edge::constant;
  double fill = 0;
};

/// Runs a call's exchanges [from, to) on `y`, in order (einroll's whole axes roll locally);
/// `fault`: a prepared call's.
inline at::Tensor run_exchanges(const StencilCall& call, at::Tensor y,
                                const std::shared_ptr<exec::ExchangeFault>& fault = {}, std::size_t from = 0,
                                std::size_t to = static_cast<std::size_t>(-1)) {
  const auto& exchanges = *call.plan.exchanges;
  for (std::size_t i = from; i < std::min(to, exchanges.size()); ++i) {
    const auto& p = exchanges[i];
    y = p.exchange ? exec::exchange_axis(y, p.axis, call.plan.mesh, p.exchange, call.edge, call.fill, fault)
                   : at::roll(y, {p.shift}, {p.axis.dim});
  }
  return y;
}

inline StencilCall halo_call(const notation::ExpressionView& e, std::string_view written, const at::Tensor& x,
                             const Halos& halos, const Options& o) {
  const auto what = "einhalo '" + std::string(written) + "'";
  check_unused_options(o, "einhalo", {"shapes", "families", "boundary", "fill"});
  const auto [edge, fill] = boundary_of(o, what);
  const auto& spec = e.input(0);
  const auto key = halo_key(halos, axis_names(e, spec), what, "halo") + std::to_string(static_cast<int>(edge)) + ':' +
                   std::to_string(fill);
  auto in = agree_input(e, spec, {&x, 1}, {}, o, what, key);
  // `edge = edge`: clang 14 cannot capture a structured binding (C++20 allows it; clang 16 does).
  auto prepared = prepare_exchanges(in, o, e.source, what, key, [&, edge = edge](const StencilInput& measured) {
    PreparedExchanges p;
    for (const auto& axis : measured.axes)
      if (const auto h = halos.find(axis.name); h != halos.end())
        p.push_back({axis, exec::plan_axis(axis, o.mesh, plan::halo_requests(axis.shards, h->second.left, h->second.right),
                                           edge, what)});
    return p;
  });
  return {stencil_plan(written, x, o, std::move(prepared), std::move(in.layout)), edge, fill};
}

EINSHARD_INLINE at::Tensor run_halo(const notation::ExpressionView& e, std::string_view written,
                           const at::Tensor& x, const Halos& halos, const Options& o) {
  auto call = halo_call(e, written, x, halos, o);
  auto y = run_exchanges(call, x);
  remember_plan(o, std::move(call.plan));
  return y;
}

EINSHARD_INLINE Plan explain_halo(const notation::ExpressionView& e, std::string_view written,
                                  const at::Tensor& x, const Halos& halos, const Options& o) {
  return halo_call(e, written, x, halos, o).plan.describe();
}

inline std::string shard_text(at::IntArrayRef sizes, at::ScalarType dtype, at::Device device) {
  std::string s = "(";
  for (std::size_t d = 0; d < sizes.size(); ++d) s += (d ? ", " : "") + std::to_string(sizes[d]);
  return s + (sizes.size() == 1 ? ",) " : ") ") + c10::toString(dtype) + " on " + device.str();
}

/// What a prepared call checks on its own rank: each operand's shape, dtype and device as it was
/// prepared. The ranks agreed on these once; a call that keeps them needs no agreement again.
struct PreparedCheck {
  struct Operand {
    std::string name;  ///< in errors: "tensor", "weight"
    std::vector<std::int64_t> shape;
    at::ScalarType dtype;
    at::Device device;
    [[nodiscard]] bool fits(const at::Tensor& t) const {
      return t.sizes() == at::IntArrayRef(shape) && t.scalar_type() == dtype && t.device() == device;
    }
    [[nodiscard]] std::string text() const { return shard_text(shape, dtype, device); }
  };
  std::string what;
  std::vector<Operand> operands;

  /// `what` as "prepared einconv '...'", with operands named and prepared like `xs`.
  PreparedCheck(std::string w, std::initializer_list<std::pair<std::string, const at::Tensor*>> xs)
      : what("prepared " + std::move(w)) {
    for (const auto& [name, t] : xs) operands.push_back({name, t->sizes().vec(), t->scalar_type(), t->device()});
  }
};

template <class Call>
struct Prepared {
  Call call;
  PreparedCheck check;
};

/// Starts a prepared call with no collective: its operands checked on this rank alone. A rank
/// whose operands are not the prepared ones still runs every exchange of `call`, with markers in
/// place of its rows, so that no peer waits for rows that never come (and those the rows were for
/// raise too), then raises. Returns the fault the call's exchanges share.
inline std::shared_ptr<exec::ExchangeFault> start_prepared(
    const StencilCall& call, const PreparedCheck& check,
    std::initializer_list<std::reference_wrapper<const at::Tensor>> xs) {
  const auto* bad = check.operands.data();
  for (const at::Tensor& t : xs) {
    if (!bad->fits(t)) {
      const auto& x = check.operands.front();
      const auto fault = std::make_shared<exec::ExchangeFault>(exec::ExchangeFault{true});
      (void)run_exchanges(call, at::zeros(x.shape, at::TensorOptions().dtype(x.dtype).device(x.device)), fault);
      throw Error(check.what + ": this rank's " + bad->name + " is " + shard_text(t.sizes(), t.scalar_type(), t.device()) +
                  ", but the call was prepared for " + bad->text() + "; the ranks it exchanges rows with raise too");
    }
    ++bad;
  }
  return std::make_shared<exec::ExchangeFault>();
}

/// Ends a prepared call's exchanges: raises when a peer's markers came in place of rows, else keeps
/// the prepared plan itself, shared, for `last_plan()` (no copy on every call).
template <class Call>
void end_prepared(const std::shared_ptr<const Prepared<Call>>& state, const exec::ExchangeFault& fault) {
  if (fault.any)
    throw Error(state->check.what + ": a rank this one exchanges rows with was called with operands other than "
                "the ones the call was prepared for; this rank's ghost rows are not valid");
  if (state->call.plan.mesh) remember_lazy_plan([state] { return state->call.plan.describe(); });
}

EINSHARD_INLINE std::shared_ptr<const PreparedHaloState> prepare_halo_state(const notation::ExpressionView& e,
                                                                            std::string_view written,
                                                                            const at::Tensor& x, const Halos& halos,
                                                                            const Options& o) {
  return std::make_shared<const PreparedHaloState>(
      PreparedHaloState{halo_call(e, written, x, halos, o), {"einhalo '" + std::string(written) + "'", {{"tensor", &x}}}});
}

EINSHARD_INLINE at::Tensor run_prepared_halo(const std::shared_ptr<const PreparedHaloState>& state,
                                             const at::Tensor& x) {
  const auto fault = start_prepared(state->call, state->check, {x});
  auto y = run_exchanges(state->call, x, fault);
  end_prepared(state, *fault);
  return y;
}

EINSHARD_INLINE Plan explain_prepared(const PreparedHaloState& s) { return s.call.plan.describe(); }
#endif  // !EINSHARD_DECLARE_ONLY
}  // namespace detail

/// `einhalo<"b h/sp w c">(x, {{"h", 2}}, {.mesh = mesh, .boundary = es::Boundary::periodic})`: each
/// rank's shard extended by ghost rows along the named axes (`{"h", 2}` both sides, `{"h", {1, 3}}`
/// before and after). Sharded axes fetch their ghosts from the shards that hold them (any width,
/// uneven and empty shards, wrapping for periodic); whole axes are padded locally. Axes are extended
/// one after another in the notation's order, so corners are right. Differentiable: ghost gradients
/// are returned to and added into their owners. Options: `mesh`, `shapes`, `boundary` (default
/// constant), `fill` (default 0), `families` (run-time form).
template <fixed_string S>
at::Tensor einhalo(const at::Tensor& x, const Halos& halos, const Options& o = {}) {
  return detail::run_halo(notation::static_expression<detail::self_map_v<S>>.view(), S.view(), x, halos, o);
}

/// The run-time form: `einhalo("b h/sp w c", x, {{"h", 2}}, {...})`.
EINSHARD_INLINE at::Tensor einhalo(std::string_view spec, const at::Tensor& x, const Halos& halos, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE at::Tensor einhalo(std::string_view spec, const at::Tensor& x, const Halos& halos, const Options& o) {
  const auto parsed = detail::parse_cached(spec, true, o.families);
  return detail::run_halo(parsed->view(), spec, x, halos, o);
}
#endif

namespace detail {
/// What the prepared operations share (`PreparedHalo`, `PreparedRoll`, `PreparedWindow`,
/// `PreparedConv`): the prepared call, which copies share, and its plan.
template <class State>
class PreparedOp {
 public:
  /// What each call runs (as the operation's `explain_*`); moves no data.
  [[nodiscard]] Plan plan() const { return explain_prepared(*state_); }

  /// Made by the operation's `prepare_*`.
  explicit PreparedOp(std::shared_ptr<const State> state) : state_(std::move(state)) {}

 protected:
  std::shared_ptr<const State> state_;
};
}  // namespace detail

/// An `einhalo` prepared once for one shard, for a stencil loop that exchanges ghost rows every
/// step: construction agrees and plans (collective over the mesh, as an `einhalo` call), and each
/// call then sends and receives the ghost rows only, with no collective (as a PETSc DMDA's
/// `DMGlobalToLocal`). A call takes a tensor of the shape, dtype and device it was prepared for
/// and returns what `einhalo` would, differentiable alike. A call with another tensor raises
/// `es::Error` on its rank and on the ranks whose ghost rows it would have sent (they receive
/// markers in place of rows), while the ranks it does not touch return normally: the exchange's
/// peers complete either way, and no rank waits for a collective. Copies share the prepared
/// exchange.
///
/// ```cpp
/// const auto halo = es::prepare_halo<"x/p y/q">(u, {{"x", 1}, {"y", 1}},
///                                               {.mesh = mesh, .boundary = es::Boundary::periodic});
/// for (int step = 0; step < steps; ++step) u = update(halo(u));  // u keeps its shape
/// ```
class PreparedHalo : public detail::PreparedOp<detail::PreparedHaloState> {
 public:
  using PreparedOp::PreparedOp;
  /// `x`'s shard with its ghost rows, as `einhalo` with the prepared notation, widths and options.
  at::Tensor operator()(const at::Tensor& x) const { return detail::run_prepared_halo(state_, x); }
};

/// `prepare_halo<"b h/sp w c">(x, {{"h", 2}}, {.mesh = mesh})`: `einhalo`'s arguments, prepared
/// for shards like `x` (collective over the mesh when an axis is sharded).
template <fixed_string S>
PreparedHalo prepare_halo(const at::Tensor& x, const Halos& halos, const Options& o = {}) {
  return PreparedHalo(
      detail::prepare_halo_state(notation::static_expression<detail::self_map_v<S>>.view(), S.view(), x, halos, o));
}

/// The run-time form: `prepare_halo("b h/sp w c", x, {{"h", 2}}, {...})`.
EINSHARD_INLINE PreparedHalo prepare_halo(std::string_view spec, const at::Tensor& x, const Halos& halos,
                                          const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE PreparedHalo prepare_halo(std::string_view spec, const at::Tensor& x, const Halos& halos,
                                          const Options& o) {
  const auto parsed = detail::parse_cached(spec, true, o.families);
  return PreparedHalo(detail::prepare_halo_state(parsed->view(), spec, x, halos, o));
}
#endif

/// What `einhalo<S>(x, halos, o)` would run: one step per extended axis, in order ("pad" for a
/// whole axis, "halo_forward_accumulate_backward" for a sharded one), with this rank's bytes sent
/// and received forward and backward. Collective over the mesh when an axis is sharded; moves no
/// data.
template <fixed_string S>
Plan explain_halo(const at::Tensor& x, const Halos& halos, const Options& o = {}) {
  return detail::explain_halo(notation::static_expression<detail::self_map_v<S>>.view(), S.view(), x, halos, o);
}

EINSHARD_INLINE Plan explain_halo(std::string_view spec, const at::Tensor& x, const Halos& halos, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE Plan explain_halo(std::string_view spec, const at::Tensor& x, const Halos& halos, const Options& o) {
  const auto parsed = detail::parse_cached(spec, true, o.families);
  return detail::halo_call(parsed->view(), spec, x, halos, o).plan.describe();
}
#endif

}  // namespace einshard
