#pragma once
/// @file
/// `einfft`: a named-axis FFT.
/// `einfft<"b x y c -> b kx ky c">(x, {.axes = {{"x", "kx"}, {"y", "ky"}}})` transforms `x` and
/// `y` into `kx` and `ky`; the output may order and shard the axes differently from the input
/// (`b x/tp y z -> b kx ky/tp kz` leaves the result transposed, as FFTW_MPI_TRANSPOSED_OUT does).
/// Locally it is torch's fftn/ifftn/rfftn/irfftn; on a mesh the transform runs as local FFTs between
/// all-to-all(v) transposes (plan/fft.hpp), for any shard sizes and lengths, with the adjoint
/// transform as its backward. `.real` transforms (r2c forward, c2r inverse) halve the last
/// transform axis to n/2+1 before anything moves, so they move and transform half the data.
/// `einfft_out` writes into a given tensor (in place where the layout allows); `einfft_many`
/// transforms several fields with one exchange per transpose.

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <span>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/notation/static_expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/config.hpp"
#include "einshard/ops/einshard.hpp"

// Compiled (config.hpp), only einshard_compiled parses the executor behind this operation.
#if !EINSHARD_DECLARE_ONLY
#include "einshard/comm/agreement.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/exec/fft.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/plan/fft.hpp"
#endif

namespace einshard {

namespace detail {

/// The operation's entry points (defined with its executor, below or in einshard_compiled).
EINSHARD_INLINE at::Tensor run_fft(const notation::ExpressionView& e, std::string_view source, const at::Tensor& x,
                                   const Options& o);
EINSHARD_INLINE at::Tensor& run_fft_out(const notation::ExpressionView& e, std::string_view source, at::Tensor& out,
                                        const at::Tensor& x, const Options& o);
EINSHARD_INLINE std::vector<at::Tensor> run_fft_many(const notation::ExpressionView& e, std::string_view source,
                                                     at::TensorList xs, const Options& o);
EINSHARD_INLINE Plan explain_fft(const notation::ExpressionView& e, std::string_view source, const at::Tensor& x,
                                 const Options& o);

#if !EINSHARD_DECLARE_ONLY
inline void check_fft_options(const Options& o) {
  check_unused_options(o, "einfft", {"shapes", "families", "axes", "inverse", "real", "norm", "signal_sizes"});
  if (o.norm && *o.norm != "backward" && *o.norm != "forward" && *o.norm != "ortho")
    throw Error("einfft: .norm must be \"backward\" (the default, also when unset), \"forward\" or "
                "\"ortho\", got \"" + *o.norm + "\"");
}

/// `.axes` with family names expanded member by member (`{"spatial", "freq"}` with families
/// spatial = {x, y}, freq = {kx, ky} is `{{"x", "kx"}, {"y", "ky"}}`).
inline AxisMap expand_fft_axes(const AxisMap& axes, const Families& families) {
  AxisMap out;
  for (const auto& [from, to] : axes) {
    const auto f = families.find(from);
    if (f == families.end()) {
      out.emplace_back(from, to);
      continue;
    }
    const auto t = families.find(to);
    if (t == families.end() || t->second.size() != f->second.size())
      throw Error("einfft: .axes maps the family '" + from + "' to '" + to +
                  "', which must be a family with as many members (" +
                  std::to_string(f->second.size()) + ")");
    for (std::size_t i = 0; i < f->second.size(); ++i) out.emplace_back(f->second[i], t->second[i]);
  }
  return out;
}

/// What every rank's call depends on besides the notation and the tensors, as text.
inline std::string fft_options_key(const AxisMap& axes, const Options& o) {
  std::string k;
  for (const auto& [a, b] : axes) k += a + '>' + b + ',';
  k += o.inverse.value_or(false) ? "i" : "f";
  k += o.real.value_or(false) ? "r" : "c";
  k += o.norm.value_or("backward") + ';';
  for (const auto& [a, n] : o.signal_sizes) k += a + '=' + std::to_string(n) + ',';
  return k;
}

struct PreparedFft {
  std::shared_ptr<const exec::FftCall> call;
  at::ScalarType dtype;
};

/// The last agreed transform at one call site on this thread: a repeated call with the same
/// operands checks in one small all-reduce (`comm::still_agreed`) instead of agreeing, as the
/// notation's replays do (exec/replay.hpp). Every rank finds the same slot holding the same
/// prepared call, or none: a slot is chosen by the site's text, and holds a call only after an
/// agreement and checks that every rank passed (all of them functions of the agreed descriptions).
struct FftReplay {
  std::string site;  ///< notation, mesh sizes, policy, shapes and the transform's options
  std::uint64_t mesh_id = 0;
  std::vector<comm::RankInfo> mine;  ///< this rank's fields (and output tensor) as agreed
  std::int64_t out_fault = 0;
  std::int64_t fingerprint = 0;
  PreparedFft prepared;
};
inline FftReplay& fft_replay_slot(const std::string& site, std::uint64_t mesh_id) {
  thread_local std::array<FftReplay, 16> slots;
  return slots[(std::hash<std::string>{}(site) ^ mesh_id) % slots.size()];
}

/// The leading axis einfft_many stacks its fields on: not a name the notation can spell.
inline constexpr const char* fields_axis = "(fields)";

/// What a call transforms: its fields (one for einfft; einfft_many's several are stacked on a
/// leading axis and moved in one exchange per transpose) and, for einfft_out, the output tensor.
struct FftOperands {
  at::TensorList fields;
  at::Tensor out{};
  bool stacked = false;
};

/// The faults of an output tensor that one rank can see and the others cannot: carried on the
/// agreement so that every rank raises the same error.
enum class OutFault : std::int64_t { none = 0, records = 1, overlaps = 2 };

inline OutFault out_fault(const FftOperands& ops) {
  if (!ops.out.defined()) return OutFault::none;
  const auto& x = ops.fields[0];
  if (at::GradMode::is_enabled() && (ops.out.requires_grad() || x.requires_grad())) return OutFault::records;
  const bool same = ops.out.data_ptr() == x.data_ptr() && ops.out.sizes() == x.sizes() && ops.out.strides() == x.strides();
  if (ops.out.is_alias_of(x) && !same) return OutFault::overlaps;
  return OutFault::none;
}

/// Checks every rank's output tensor (`infos[r]`, `faults[r]`) against the output block the call
/// gives rank r; every rank reads the same descriptions, so every rank raises the same error.
inline void check_out(const exec::FftCall& call, const Mesh& mesh, at::ScalarType dtype,
                      const std::vector<comm::RankInfo>& infos, const std::vector<std::int64_t>& faults,
                      const std::string& what) {
  const auto want_dtype = exec::output_dtype(call, dtype);
  for (std::size_t r = 0; r < infos.size(); ++r) {
    const auto on = mesh ? " on rank " + std::to_string(r) : std::string();
    switch (static_cast<OutFault>(faults[r])) {
      case OutFault::none: break;
      case OutFault::records:
        throw Error(what + ": the output tensor" + on +
                    " would be written under autograd (the input or the output requires grad); "
                    "call einfft, which returns a new tensor, where gradients are wanted");
      case OutFault::overlaps:
        throw Error(what + ": the output tensor" + on +
                    " overlaps the input without being it; pass the input itself for a transform in place, "
                    "or a separate tensor");
    }
    const auto& info = infos[r];
    const auto want = exec::output_block(call, mesh, static_cast<int>(r));
    std::vector<std::int64_t> have(info.sizes.begin(),
                                   info.sizes.begin() + std::min<std::int64_t>(info.ndim, comm::RankInfo::max_dims));
    if (have != want || info.dtype != static_cast<std::int64_t>(want_dtype)) {
      auto text = [](const std::vector<std::int64_t>& v) {
        std::string t = "[";
        for (std::size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
        return t + "]";
      };
      throw Error(what + ": the output tensor" + on + " is " + text(have) + " " +
                  std::string(c10::toString(static_cast<at::ScalarType>(info.dtype))) + ", but the output block there is " +
                  text(want) + " " + std::string(c10::toString(want_dtype)));
    }
  }
}

/// Agrees (on a mesh; a repeat of the site's last call checks instead), checks and prepares;
/// collective over the mesh when there is one.
inline PreparedFft prepare_fft_call(const notation::ExpressionView& e, std::string_view source,
                                    const FftOperands& ops, const Options& o) {
  const auto what = "einfft '" + std::string(source) + "'";
  const auto axes = expand_fft_axes(o.axes, o.families);
  const Mesh& mesh = o.mesh;
  auto problem = plan::fft_problem(e, source, axes, o.inverse.value_or(false), o.real.value_or(false),
                                   mesh ? &mesh.shape() : nullptr);
  const auto fields = ops.fields.size();
  const auto ndim = static_cast<std::int64_t>(problem.axes.size());  // of each field
  if (ops.stacked) {
    problem.axes.insert(problem.axes.begin(), plan::FftAxis{fields_axis, fields_axis, false, false, 0, 0, {}, {}});
    problem.out_order.insert(problem.out_order.begin(), fields_axis);
  }
  auto key_text = fft_options_key(axes, o);
  if (ops.stacked) key_text += "fields=" + std::to_string(fields) + ';';
  exec::SizeTable in;
  std::vector<std::int64_t> lengths;
  at::ScalarType dtype = ops.fields[0].scalar_type();
  std::string key;
  std::vector<comm::RankInfo> out_infos;
  std::vector<std::int64_t> out_faults;
  FftReplay* replay = nullptr;  // on a mesh
  // Every field of einfft_many must be one shape and dtype (rank r's fields in `infos`).
  auto check_fields = [&](std::span<const comm::RankInfo> infos, const std::string& on) {
    for (std::size_t i = 1; i < infos.size(); ++i)
      if (infos[i].dtype != infos[0].dtype || infos[i].ndim != infos[0].ndim || infos[i].sizes != infos[0].sizes)
        throw Error(what + ": field " + std::to_string(i + 1) + on +
                    " differs from field 1 in shape or dtype; einfft_many transforms fields of one shape and dtype");
  };
  if (!mesh) {
    std::vector<comm::RankInfo> infos;
    for (const auto& x : ops.fields) {
      if (x.dim() != ndim)
        throw Error(what + ": the notation names " + std::to_string(ndim) + " dimensions, but the tensor has " +
                    std::to_string(x.dim()));
      infos.push_back(comm::describe(x, 0, comm::LocalFault::none));
    }
    check_fields(infos, "");
    if (ops.stacked) lengths.push_back(static_cast<std::int64_t>(fields));
    for (std::int64_t d = 0; d < ndim; ++d) lengths.push_back(ops.fields[0].size(d));
    for (std::size_t d = 0; d < lengths.size(); ++d) in.global[problem.axes[d].in] = lengths[d];
    key = std::string(e.source) + '\x1f' + key_text + '\x1f' + std::to_string(static_cast<int>(dtype));
    for (auto n : lengths) key += ',' + std::to_string(n);
    if (ops.out.defined()) {
      out_infos.push_back(comm::describe(ops.out, 0, comm::LocalFault::none));
      out_faults.push_back(static_cast<std::int64_t>(out_fault(ops)));
    }
  } else {
    const auto print = exec::fingerprint(std::string(e.source) + '\x1f' + key_text, 0);
    std::vector<comm::RankInfo> mine;
    for (const auto& x : ops.fields)
      mine.push_back(comm::describe(x, print, x.dim() == ndim ? comm::LocalFault::none : comm::LocalFault::rank_mismatch));
    if (ops.out.defined()) mine.push_back(comm::describe(ops.out, print, comm::LocalFault::none));
    const auto fault = static_cast<std::int64_t>(out_fault(ops));
    const auto site = exec::detail::site_key(e.source, o) + '\x1f' + key_text;
    replay = &fft_replay_slot(site, mesh.id());
    // A first call votes no in the same all-reduce (exec/replay.hpp, `still_agreed`).
    const bool hit = replay->prepared.call && replay->site == site && replay->mesh_id == mesh.id();
    if (comm::still_agreed(hit && replay->mine == mine && replay->out_fault == fault, replay->fingerprint, mesh.comm()))
      return replay->prepared;
    // The fields' layout is the input's (einfft_many's stacked axis comes after agreeing); the
    // output tensor's, the output's as the notation states it. With both, one small all-reduce
    // agrees when the shards are cut the usual way (exec/agreement.hpp).
    std::optional<std::vector<plan::Layout>> layouts;
    if (!(ops.stacked && ops.out.defined())) {
      auto in_layout = exec::input_layout(problem);
      if (ops.stacked) in_layout.axes.erase(in_layout.axes.begin());
      layouts.emplace(ops.fields.size(), in_layout);
      if (ops.out.defined()) layouts->push_back(exec::stated_output_layout(problem));
    }
    auto agreed = exec::agree_summarized(mesh, mine, std::move(layouts),
                                         static_cast<std::int64_t>(std::hash<std::string>{}(site)), o.shapes, fault);
    auto all = agreed.table(mesh, o.shapes);
    // Emptied now; it holds the prepared call again once every check below has passed on every rank.
    *replay = {site, mesh.id(), mine, fault, comm::digest(site, all), {}};
    if (ops.out.defined()) {
      for (auto& r : all) {
        out_infos.push_back(r.back());
        r.pop_back();
      }
      // Which rank's output tensor is at fault: a summary says only that one is.
      out_faults = !agreed.flagged || !agreed.flags.empty() ? std::move(agreed.flags)
                                                            : comm::all_gather_values(std::vector<std::int64_t>{fault}, mesh.comm());
      out_faults.resize(all.size(), 0);
    }
    comm::check_agreed(all, what, [&](std::size_t) { return std::to_string(ndim); });
    for (std::size_t r = 0; r < all.size(); ++r) check_fields(all[r], " on rank " + std::to_string(r));
    // The stacked tensor as every rank holds it: the fields' leading axis, then a field's axes.
    comm::Agreed ranks(all.size(), std::vector<comm::RankInfo>(1));
    for (std::size_t r = 0; r < all.size(); ++r) {
      auto& info = ranks[r][0];
      info = all[r][0];
      if (!ops.stacked) continue;
      if (info.ndim + 1 > static_cast<std::int64_t>(comm::RankInfo::max_dims))
        throw Error(what + ": einfft_many's fields have more than " +
                    std::to_string(comm::RankInfo::max_dims - 1) + " dimensions");
      std::copy_backward(info.sizes.begin(), info.sizes.end() - 1, info.sizes.end());
      info.sizes[0] = static_cast<std::int64_t>(fields);
      ++info.ndim;
    }
    dtype = static_cast<at::ScalarType>(ranks[0][0].dtype);
    exec::measure(in, exec::input_layout(problem), ranks, 0, mesh, o.shapes, what);
    for (const auto& a : problem.axes) lengths.push_back(in.global.at(a.in));
    // Keyed by what the ranks agreed on, as the notation's calls are: the summary when it
    // determines every rank's fields (a fixed size whatever P), else the all-gathered table. The
    // table rebuilt from a summary would make the cache keep O(P) bytes per call site.
    exec::Agreement keyed;
    if (agreed.summarized())
      keyed.summary = std::move(agreed.summary);
    else
      keyed.ranks = std::move(ranks);
    key = exec::cache_key(e.source, o, keyed) + '\x1f' + key_text;
  }
  exec::check_fft_dtype(dtype, problem, what);
  auto call = exec::CallCache<exec::FftCall>::instance().get(key, [&] {
    exec::set_lengths(problem, lengths, o.signal_sizes, what);
    return exec::prepare_fft(std::move(problem), in, mesh, o.shapes, o.norm, dtype, what);
  });
  if (ops.out.defined()) check_out(*call, mesh, dtype, out_infos, out_faults, what);
  if (replay) replay->prepared = {call, dtype};
  return {std::move(call), dtype};
}

/// Without transform axes einfft is the layout change `in -> out` (torch-einshard's "layout-only"
/// path): the einshard call of the same notation.
inline std::optional<Options> layout_only(std::string_view source, const Options& o) {
  if (!expand_fft_axes(o.axes, o.families).empty()) return std::nullopt;
  if (o.real.value_or(false) || !o.signal_sizes.empty())
    throw Error("einfft '" + std::string(source) +
                "': no transform axes (.axes) given, so there is no real transform or signal size; "
                "name the transform axes, or drop .real and .signal_sizes for a layout change");
  return Options{.mesh = o.mesh, .shapes = o.shapes, .families = o.families};
}

/// Keeps what `last_plan()` describes (on a mesh), then runs the call.
inline at::Tensor run_prepared(const PreparedFft& prepared, std::string_view source, const at::Tensor& x,
                               const Options& o, const at::Tensor& into = {}) {
  if (o.mesh)
    remember_lazy_plan([call = prepared.call, source = std::string(source), mesh = o.mesh,
                        element = x.element_size(), complex = x.is_complex()] {
      return exec::describe_fft(source, *call, mesh, element, complex);
    });
  return exec::run_fft(*prepared.call, x, into);
}

EINSHARD_INLINE at::Tensor run_fft(const notation::ExpressionView& e, std::string_view source, const at::Tensor& x,
                          const Options& o) {
  check_fft_options(o);
  if (const auto layout = layout_only(source, o)) return einshard(source, {x}, *layout);
  return run_prepared(prepare_fft_call(e, source, {{x}}, o), source, x, o);
}

EINSHARD_INLINE at::Tensor& run_fft_out(const notation::ExpressionView& e, std::string_view source, at::Tensor& out,
                                        const at::Tensor& x, const Options& o) {
  check_fft_options(o);
  if (expand_fft_axes(o.axes, o.families).empty())
    throw Error("einfft_out '" + std::string(source) +
                "': no transform axes (.axes) given; a layout change has no output tensor form (call einshard)");
  (void)run_prepared(prepare_fft_call(e, source, {{x}, out}, o), source, x, o, out);
  return out;
}

EINSHARD_INLINE std::vector<at::Tensor> run_fft_many(const notation::ExpressionView& e, std::string_view source,
                                                     at::TensorList xs, const Options& o) {
  check_fft_options(o);
  if (xs.empty()) throw Error("einfft_many '" + std::string(source) + "': no fields given");
  if (expand_fft_axes(o.axes, o.families).empty())
    throw Error("einfft_many '" + std::string(source) +
                "': no transform axes (.axes) given; change the fields' layout with einshard");
  const auto prepared = prepare_fft_call(e, source, {xs, {}, true}, o);
  const auto stacked = at::stack(xs);
  return run_prepared(prepared, source, stacked, o).unbind(0);
}

EINSHARD_INLINE Plan explain_fft(const notation::ExpressionView& e, std::string_view source, const at::Tensor& x,
                        const Options& o) {
  check_fft_options(o);
  if (const auto layout = layout_only(source, o)) return explain(source, {x}, *layout);
  const auto prepared = prepare_fft_call(e, source, {{x}}, o);
  return exec::describe_fft(source, *prepared.call, o.mesh, x.element_size(), x.is_complex());
}

/// A run-time notation's parse form (plan::fft_parse_form), families expanded; cached.
inline std::shared_ptr<const CompiledNotation> runtime_fft_notation(std::string_view notation, at::TensorList xs,
                                                                   const Options& o) {
  const auto form = plan::fft_parse_form(notation);
  if (form.empty())
    throw NotationError(notation, notation.size() + 1, "einfft needs 'input -> output'; expected '->'");
  auto compiled = NotationCache::instance().get(form, o.families);
  if (xs.size() != 1)
    throw Error("einfft '" + std::string(notation) + "': einfft takes one tensor, but " +
                std::to_string(xs.size()) + " were given");
  return compiled;
}
#endif  // !EINSHARD_DECLARE_ONLY

/// `S` in its parse form (plan::fft_parse_form), at compile time.
template <fixed_string S>
constexpr auto fft_form() {
  constexpr auto arrow = S.view().find("->");
  static_assert(arrow != std::string_view::npos, "einfft: the notation needs 'input -> output'");
  constexpr auto rhs = S.size() - arrow - 2;
  fixed_string<S.size() + 4 + rhs> out;
  for (std::size_t i = 0; i < S.size(); ++i) out.data[i] = S.data[i];
  out.data[arrow] = ',';
  out.data[arrow + 1] = ' ';
  const char sep[] = " -> ";
  for (std::size_t i = 0; i < 4; ++i) out.data[S.size() + i] = sep[i];
  for (std::size_t i = 0; i < rhs; ++i) out.data[S.size() + 4 + i] = S.data[arrow + 2 + i];
  return out;
}

template <fixed_string S>
inline constexpr auto fft_form_v = fft_form<S>();

}  // namespace detail

/// `einfft<"b x y -> b kx ky">(x, {.axes = {{"x", "kx"}, {"y", "ky"}}})`: the FFT of `x` over the
/// axes listed in `.axes` (input name, output name), checked at compile time; with no axes it is
/// the layout change `in -> out` (einshard). Options: `.inverse`,
/// `.real` (rfftn forward, irfftn inverse; the last pair of `.axes` is the half-spectrum axis),
/// `.norm` ("backward" when unset, "forward", "ortho"), `.signal_sizes` (inverse real: the half
/// axis's output length, default 2(n-1)), `.mesh`, `.shapes`, `.families` (family names in `.axes`).
/// With a mesh it is collective over the mesh; a fault raises the same `Error` on every rank.
template <fixed_string S>
at::Tensor einfft(const at::Tensor& x, const Options& o = {}) {
  constexpr auto e = notation::static_expression<detail::fft_form_v<S>>.view();
  static_assert(e.input_count() == 2, "einfft: the notation must have exactly one input");
  return detail::run_fft(e, S.view(), x, o);
}

/// `einfft("b x y -> b kx ky", {x}, {...})`: a notation built at run time (families expand in it);
/// a malformed one throws `NotationError`.
EINSHARD_INLINE at::Tensor einfft(std::string_view notation, at::TensorList xs, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE at::Tensor einfft(std::string_view notation, at::TensorList xs, const Options& o) {
  const auto compiled = detail::runtime_fft_notation(notation, xs, o);
  return detail::run_fft(compiled->view(), notation, xs[0], o);
}
#endif

/// `einfft_out<S>(out, x, o)`: einfft written into `out`, this rank's output block (its shape and
/// dtype, as einfft would return it), which is returned. `out` may be `x` itself when the output
/// block has the input's shape and dtype (a complex transform whose sharded axes keep their shard
/// sizes, or any complex transform on one process): the transform then runs in place, as FFTW's
/// in-place plans do. Like torch's `out=` forms it is not differentiable: with grad mode on, neither
/// `x` nor `out` may require grad. A wrong shape or dtype of `out` on any rank raises the same
/// `Error` on every rank, before any data moves.
template <fixed_string S>
at::Tensor& einfft_out(at::Tensor& out, const at::Tensor& x, const Options& o = {}) {
  constexpr auto e = notation::static_expression<detail::fft_form_v<S>>.view();
  static_assert(e.input_count() == 2, "einfft: the notation must have exactly one input");
  return detail::run_fft_out(e, S.view(), out, x, o);
}

EINSHARD_INLINE at::Tensor& einfft_out(std::string_view notation, at::Tensor& out, const at::Tensor& x,
                                       const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE at::Tensor& einfft_out(std::string_view notation, at::Tensor& out, const at::Tensor& x,
                                       const Options& o) {
  const auto compiled = detail::runtime_fft_notation(notation, {x}, o);
  return detail::run_fft_out(compiled->view(), notation, out, x, o);
}
#endif

/// `einfft_many<S>({u, v, w}, o)`: the same transform of several fields (each of one shape and
/// dtype, every field laid out as `S`'s input), with one exchange per transpose for all of them
/// instead of one per field: fewer, larger messages. Returns the transformed fields in order;
/// differentiable like einfft.
template <fixed_string S>
std::vector<at::Tensor> einfft_many(at::TensorList xs, const Options& o = {}) {
  constexpr auto e = notation::static_expression<detail::fft_form_v<S>>.view();
  static_assert(e.input_count() == 2, "einfft: the notation must have exactly one input");
  return detail::run_fft_many(e, S.view(), xs, o);
}

EINSHARD_INLINE std::vector<at::Tensor> einfft_many(std::string_view notation, at::TensorList xs,
                                                    const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE std::vector<at::Tensor> einfft_many(std::string_view notation, at::TensorList xs,
                                                    const Options& o) {
  const auto compiled = detail::runtime_fft_notation(notation, xs.empty() ? xs : xs.slice(0, 1), o);
  return detail::run_fft_many(compiled->view(), notation, xs, o);
}
#endif

/// What `einfft<S>(x, o)` would run: its local FFT stages and transposes, with this rank's bytes per
/// step forward and backward. Collective over the mesh when there is one; moves no data.
template <fixed_string S>
Plan explain_fft(const at::Tensor& x, const Options& o = {}) {
  constexpr auto e = notation::static_expression<detail::fft_form_v<S>>.view();
  static_assert(e.input_count() == 2, "einfft: the notation must have exactly one input");
  return detail::explain_fft(e, S.view(), x, o);
}

EINSHARD_INLINE Plan explain_fft(std::string_view notation, at::TensorList xs, const Options& o = {});
#if !EINSHARD_DECLARE_ONLY
EINSHARD_INLINE Plan explain_fft(std::string_view notation, at::TensorList xs, const Options& o) {
  const auto compiled = detail::runtime_fft_notation(notation, xs, o);
  return detail::explain_fft(compiled->view(), notation, xs[0], o);
}
#endif

}  // namespace einshard
