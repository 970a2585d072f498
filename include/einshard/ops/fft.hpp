#pragma once
/// @file
/// `einfft`: a named-axis FFT.
/// `einfft<"b x y c -> b kx ky c">(x, {.axes = {{"x", "kx"}, {"y", "ky"}}})` transforms `x` and
/// `y` into `kx` and `ky`; the output may order and shard the axes differently from the input
/// (`b x/tp y z -> b kx ky/tp kz` leaves the result transposed, as FFTW_MPI_TRANSPOSED_OUT does).
/// Locally it is torch's fftn/ifftn/rfftn/irfftn; on a mesh the transform runs as local FFTs between
/// all-to-all(v) transposes (plan/fft.hpp), for any shard sizes and lengths, with the adjoint
/// transform as its backward.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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

/// Agrees (on a mesh), checks and prepares; collective over the mesh when there is one.
inline PreparedFft prepare_fft_call(const notation::ExpressionView& e, std::string_view source,
                                    const at::Tensor& x, const Options& o) {
  const auto what = "einfft '" + std::string(source) + "'";
  const auto axes = expand_fft_axes(o.axes, o.families);
  const Mesh& mesh = o.mesh;
  auto problem = plan::fft_problem(e, source, axes, o.inverse.value_or(false), o.real.value_or(false),
                                   mesh ? &mesh.shape() : nullptr);
  const auto ndim = static_cast<std::int64_t>(problem.axes.size());
  const auto key_text = fft_options_key(axes, o);
  exec::SizeTable in;
  std::vector<std::int64_t> lengths;
  at::ScalarType dtype = x.scalar_type();
  std::string key;
  if (!mesh) {
    if (x.dim() != ndim)
      throw Error(what + ": the notation names " + std::to_string(ndim) + " dimensions, but the tensor has " +
                  std::to_string(x.dim()));
    for (std::int64_t d = 0; d < ndim; ++d) {
      lengths.push_back(x.size(d));
      in.global[problem.axes[static_cast<std::size_t>(d)].in] = x.size(d);
    }
    key = std::string(e.source) + '\x1f' + key_text + '\x1f' + std::to_string(static_cast<int>(dtype));
    for (auto n : lengths) key += ',' + std::to_string(n);
  } else {
    const comm::RankInfo mine = comm::describe(
        x, exec::fingerprint(std::string(e.source) + '\x1f' + key_text, 0),
        x.dim() == ndim ? comm::LocalFault::none : comm::LocalFault::rank_mismatch);
    const std::vector<std::string> expected{std::to_string(ndim)};
    const auto ranks = comm::agree(mesh.comm(), {&mine, 1}, what, expected);
    dtype = static_cast<at::ScalarType>(ranks[0][0].dtype);
    exec::measure(in, exec::input_layout(problem), ranks, 0, mesh, o.shapes, what);
    for (const auto& a : problem.axes) lengths.push_back(in.global.at(a.in));
    key = exec::cache_key(e.source, o, exec::Agreement{ranks, {false}}) + '\x1f' + key_text;
  }
  exec::check_fft_dtype(dtype, problem, what);
  auto call = exec::CallCache<exec::FftCall>::instance().get(key, [&] {
    exec::set_lengths(problem, lengths, o.signal_sizes, what);
    return exec::prepare_fft(std::move(problem), in, mesh, o.shapes, o.norm, dtype, what);
  });
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

EINSHARD_INLINE at::Tensor run_fft(const notation::ExpressionView& e, std::string_view source, const at::Tensor& x,
                          const Options& o) {
  check_fft_options(o);
  if (const auto layout = layout_only(source, o)) return einshard(source, {x}, *layout);
  const auto prepared = prepare_fft_call(e, source, x, o);
  if (o.mesh) {
    auto& last = last_plan_storage();
    last.plan.reset();
    last.make = [call = prepared.call, source = std::string(source), mesh = o.mesh,
                 element = x.element_size(), complex = x.is_complex()] {
      return exec::describe_fft(source, *call, mesh, element, complex);
    };
  }
  return exec::run_fft(*prepared.call, x);
}

EINSHARD_INLINE Plan explain_fft(const notation::ExpressionView& e, std::string_view source, const at::Tensor& x,
                        const Options& o) {
  check_fft_options(o);
  if (const auto layout = layout_only(source, o)) return explain(source, {x}, *layout);
  const auto prepared = prepare_fft_call(e, source, x, o);
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
