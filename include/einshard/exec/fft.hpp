#pragma once
/// @file
/// Runs an FFT plan (plan/fft.hpp): local FFT stages through torch's FFT ops, layout changes as the
/// distributed steps of exec/program.hpp. Every piece is differentiable on its own (torch's FFT
/// autograd; the transpose's backward is the reverse all-to-all(v)), so the backward of the whole is
/// the adjoint distributed transform — the same stages in reverse, with torch's adjoint FFTs and
/// their norm conventions — and it gathers nothing.

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/error.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/exec/fft_factored.hpp"
#include "einshard/exec/local_fft.hpp"
#include "einshard/exec/program.hpp"
#include "einshard/exec/sizes.hpp"
#include "einshard/mesh.hpp"
#include "einshard/plan/fft.hpp"
#include "einshard/plan/plan.hpp"
#include "einshard/shapes.hpp"

namespace einshard::exec {

/// A prepared FFT call: the plan, and for each layout-change stage its sizes and schedules.
struct FftCall {
  plan::FftProblem problem;
  plan::FftPlan plan;
  std::vector<SizeTable> tables;  ///< by stage (empty for FFT stages)
  std::vector<Program> programs;  ///< by stage (empty for FFT stages)
  std::vector<std::shared_ptr<const FactoredFftCall>> factored;  ///< by stage (null but for factored stages)
  std::optional<std::string> norm;
  SizeTable output;  ///< the output's lengths and shard sizes
};

/// The output block of rank `r` of the mesh (output order), or the whole output without a mesh.
inline std::vector<std::int64_t> output_block(const FftCall& call, const Mesh& mesh, int r) {
  std::vector<std::int64_t> out;
  for (const auto& [axis, group] : call.plan.out.axes) {
    if (group.empty()) {
      out.push_back(call.output.global.at(axis));
      continue;
    }
    const auto c = mesh.shape().coordinate(group, mesh.coordinates_of(r));
    out.push_back(call.output.of(axis, group)[static_cast<std::size_t>(c)]);
  }
  return out;
}

/// The output's dtype for an input of `dtype`: complex, or real after an inverse real transform.
inline at::ScalarType output_dtype(const FftCall& call, at::ScalarType dtype) {
  const auto complex = c10::isComplexType(dtype) ? dtype : c10::toComplexType(dtype);
  return call.problem.real && call.problem.inverse ? c10::toRealValueType(complex) : complex;
}

/// The input layout a problem states (input order, input names and groups).
inline plan::Layout input_layout(const plan::FftProblem& p) {
  plan::Layout l;
  for (const auto& a : p.axes) l.axes.push_back({a.in, a.in_group});
  return l;
}

/// The output layout a problem states (output order, output names and groups): what an output
/// tensor given to einfft_out must hold on each rank.
inline plan::Layout stated_output_layout(const plan::FftProblem& p) {
  plan::Layout l;
  for (const auto& name : p.out_order)
    for (const auto& a : p.axes)
      if (a.out == name) l.axes.push_back({a.out, a.out_group});
  return l;
}

/// Floating-point or complex, and real for a real forward transform. `dtype` is agreed by every rank.
inline void check_fft_dtype(at::ScalarType dtype, const plan::FftProblem& p, const std::string& what) {
  const bool complex = dtype == at::kComplexFloat || dtype == at::kComplexDouble;
  if (!complex && dtype != at::kFloat && dtype != at::kDouble)
    throw Error(what + ": einfft takes float32, float64, complex64 or complex128 tensors, got " +
                std::string(c10::toString(dtype)));
  if (p.real && !p.inverse && complex)
    throw Error(what + ": a real forward transform (.real = true) needs a real tensor, got " +
                std::string(c10::toString(dtype)) + "; leave .real unset for a complex transform");
}

/// Fills in the lengths of `p` from the input's (`in_lengths`, by dimension): the half axis of a
/// real transform has n/2+1 bins forward and `signal_sizes` (default 2(n-1)) samples inverse.
inline void set_lengths(plan::FftProblem& p, std::span<const std::int64_t> in_lengths,
                        const std::map<std::string, std::int64_t, std::less<>>& signal_sizes,
                        const std::string& what) {
  for (const auto& [name, size] : signal_sizes) {
    const plan::FftAxis* half = nullptr;
    for (const auto& a : p.axes)
      if (a.half) half = &a;
    if (!p.real || !p.inverse || half == nullptr || (name != half->in && name != half->out))
      throw Error(what + ": .signal_sizes gives '" + name +
                  "', but signal sizes are only for the half-spectrum axis of an inverse real "
                  "transform (.real = true, .inverse = true; the last entry of .axes)");
    if (size < 1)
      throw Error(what + ": the signal size of '" + name + "' must be positive, got " + std::to_string(size));
  }
  for (std::size_t d = 0; d < p.axes.size(); ++d) {
    auto& a = p.axes[d];
    a.in_length = a.out_length = in_lengths[d];
    if (a.transform && a.in_length < 1)
      throw Error(what + ": transform axis '" + a.in + "' has length 0");
    if (!a.half) continue;
    if (!p.inverse) {
      a.out_length = a.in_length / 2 + 1;
      continue;
    }
    auto it = signal_sizes.find(a.out);
    if (it == signal_sizes.end()) it = signal_sizes.find(a.in);
    a.out_length = it != signal_sizes.end() ? it->second : 2 * (a.in_length - 1);
    if (a.out_length < 1)
      throw Error(what + ": the half-spectrum axis '" + a.in +
                  "' has 1 bin, so its signal length 2(n-1) is 0; give .signal_sizes");
  }
}

/// Whether a layout-change step involves a mesh group of more than one rank.
inline bool moves_data(const plan::Step& s, const Mesh& mesh) {
  auto wide = [&](const plan::Layout& l) {
    for (const auto& a : l.axes)
      if (!a.group.empty() && mesh.size(a.group) > 1) return true;
    return !l.partial.empty() && mesh.size(l.partial) > 1;
  };
  return (!s.group.empty() && mesh.size(s.group) > 1) || wide(s.before) || wide(s.after);
}

/// Folds FFT stage `next` into `prev` when one torch call computes both: complex passes in the same
/// direction, an r2c followed by complex passes (rfftn transforms its last axis first), complex
/// inverse passes followed by a c2r (irfftn transforms its last axis last).
inline bool merge_fft(plan::FftStage& prev, const plan::FftStage& next) {
  using plan::FftOp;
  const bool forward = (prev.op == FftOp::forward || prev.op == FftOp::real_forward) && next.op == FftOp::forward;
  const bool inverse = prev.op == FftOp::inverse && (next.op == FftOp::inverse || next.op == FftOp::real_inverse);
  if (!forward && !inverse) return false;
  auto dims = next.dims;
  if (prev.op == FftOp::real_forward)
    dims.insert(dims.end(), prev.dims.begin(), prev.dims.end());  // the half axis stays last
  else
    dims.insert(dims.begin(), prev.dims.begin(), prev.dims.end());
  prev.dims = std::move(dims);
  prev.op = prev.op == FftOp::real_forward ? FftOp::real_forward : next.op;
  prev.after = next.after;
  return true;
}

/// Plans `p` (lengths set) and prepares every layout change. `in` holds the input's measured sizes;
/// the output's shard sizes come from `shapes` or the split rule, intermediate layouts' from the
/// split rule. `dtype` is the input's, agreed by every rank. Pure given its arguments (the mesh is
/// only read; its group communicators are created on first use, collectively), so every rank
/// prepares the same.
inline FftCall prepare_fft(plan::FftProblem p, const SizeTable& in, const Mesh& mesh, const Shapes& shapes,
                           std::optional<std::string> norm, at::ScalarType dtype, const std::string& what) {
  FftCall call;
  call.plan = plan::plan_fft(p, mesh ? mesh.shape() : MeshShape{});
  call.norm = std::move(norm);
  SizeTable out;
  for (const auto& a : p.axes) {
    out.global[a.out] = a.out_length;
    if (!a.transform && !a.in_group.empty()) out.shards[{a.out, a.in_group}] = in.of(a.in, a.in_group);
  }
  resolve(out, call.plan.out, mesh, shapes, what);
  std::vector<plan::FftStage> kept;
  for (auto& s : call.plan.stages) {
    if (s.kind == plan::FftStage::Kind::factored && mesh.size(s.before.axes[0].group) == 1)
      s.kind = plan::FftStage::Kind::fft;  // over one rank the axis is whole
    if (s.kind == plan::FftStage::Kind::factored) {
      const auto& a = p.axes[0];
      const auto& g = s.before.axes[0].group;
      const auto it = out.shards.find({a.out, g});
      const auto out_sizes = it != out.shards.end() ? it->second : compute_split_shapes(a.out_length, mesh.size(g));
      const auto n = s.op == plan::FftOp::real_inverse ? a.out_length : a.in_length;
      const auto complex = c10::isComplexType(dtype) ? dtype : c10::toComplexType(dtype);
      call.factored.resize(kept.size());
      call.factored.push_back(std::make_shared<const FactoredFftCall>(prepare_factored(
          s.op, n, in.of(a.in, g), out_sizes, mesh.comm(g), mesh.coordinate(g), complex, call.norm)));
      call.programs.emplace_back();
      call.tables.emplace_back();
      kept.push_back(std::move(s));
      continue;
    }
    if (s.kind == plan::FftStage::Kind::fft) {
      // FFT stages with nothing between them run as one call (torch's n-d transforms are faster
      // than their 1-d passes one by one).
      if (!kept.empty() && kept.back().kind == plan::FftStage::Kind::fft && merge_fft(kept.back(), s)) continue;
      kept.push_back(std::move(s));
      call.programs.emplace_back();
      call.tables.emplace_back();
      continue;
    }
    SizeTable t;
    auto add = [&](const plan::Layout& l) {
      for (const auto& [name, group] : l.axes) {
        std::size_t d = 0;
        while (d < p.axes.size() && (s.done[d] ? p.axes[d].out : p.axes[d].in) != name) ++d;
        const bool after = s.done[d];
        const auto length = after ? p.axes[d].out_length : p.axes[d].in_length;
        t.global[name] = length;
        if (group.empty() || t.shards.contains({name, group})) continue;
        const auto& known = after ? out.shards : in.shards;
        const auto it = known.find({name, group});
        t.shards[{name, group}] =
            it != known.end() ? it->second : compute_split_shapes(length, mesh.size(group));
      }
    };
    add(s.before);
    add(s.after);
    // A step over groups of one rank moves nothing (a shard of one is the whole axis): on a
    // single process the plan is the local FFTs alone.
    std::vector<plan::Step> steps;
    for (const auto& st : s.steps)
      if (st.kind == plan::StepKind::permute || moves_data(st, mesh)) steps.push_back(st);
    if (steps.empty()) continue;
    call.programs.push_back(make_program(std::move(steps), t, mesh));
    call.tables.push_back(std::move(t));
    kept.push_back(std::move(s));
  }
  call.plan.stages = std::move(kept);
  call.factored.resize(call.plan.stages.size());
  call.problem = std::move(p);
  call.output = std::move(out);
  return call;
}

/// The permutation a layout-change program amounts to when it only permutes (the composition of its
/// permute steps), else nothing.
inline std::optional<std::vector<std::int64_t>> final_permutation(const Program& p) {
  std::optional<std::vector<std::int64_t>> order;
  for (const auto& st : p.steps) {
    if (st.kind != plan::StepKind::permute) return std::nullopt;
    if (!order) {
      order = st.permutation;
      continue;
    }
    std::vector<std::int64_t> next;
    for (auto j : st.permutation) next.push_back((*order)[static_cast<std::size_t>(j)]);
    order = std::move(next);
  }
  return order;
}

/// Runs a prepared call on this rank's block `x`. `into`, when given, receives the result (this
/// rank's output block, of the output dtype; it may be `x` itself): the last stage writes there
/// directly where it can — a local FFT on FFTW, an all-to-all outside autograd — and copies once
/// otherwise.
inline at::Tensor run_fft(const FftCall& call, at::Tensor x, const at::Tensor& into = {}) {
  const auto input = x;
  const auto& stages = call.plan.stages;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const auto& s = stages[i];
    const bool last = i + 1 == stages.size();
    if (s.kind == plan::FftStage::Kind::fft && !comm::records(x) && i + 2 == stages.size() &&
        (into.defined() || x.is_alias_of(input))) {
      // The last FFT stage followed by nothing but a permute (the output orders its axes otherwise,
      // as FFTW_MPI_TRANSPOSED_OUT's ky-first slabs), where it writes out of place anyway (into the
      // caller's tensor, or from the caller's input): it writes in the output's order, so the
      // result is contiguous and no copy into `into` follows. A stage that could run in place on
      // its own temporary does so and leaves the permute a view: measured faster than a strided
      // out-of-place write.
      if (const auto order = final_permutation(call.programs[i + 1])) {
        auto sizes = x.sizes().vec();
        std::vector<std::int64_t> lengths;
        for (auto d : s.dims) {
          const auto n = call.problem.axes[static_cast<std::size_t>(d)].out_length;
          sizes[static_cast<std::size_t>(d)] = n;
          lengths.push_back(n);
        }
        std::vector<std::int64_t> permuted, inverse(order->size());
        for (std::size_t j = 0; j < order->size(); ++j) {
          permuted.push_back(sizes[static_cast<std::size_t>((*order)[j])]);
          inverse[static_cast<std::size_t>((*order)[j])] = static_cast<std::int64_t>(j);
        }
        const auto dtype = s.op == plan::FftOp::real_inverse ? c10::toRealValueType(x.scalar_type())
                           : x.is_complex()                   ? x.scalar_type()
                                                              : c10::toComplexType(x.scalar_type());
        const auto target = into.defined() ? into : comm::pooled_empty(permuted, x.options().dtype(dtype));
        (void)local_fft(x, s.op, s.dims, lengths, call.norm, !x.is_alias_of(input), target.permute(inverse));
        return target;
      }
    }
    if (s.kind == plan::FftStage::Kind::move) {
      const auto& p = call.programs[i];
      const bool exchange = into.defined() && !comm::records(x) && !into.is_alias_of(x) && p.steps.size() == 1 &&
                            p.steps[0].kind == plan::StepKind::redistribute;
      const auto* op = exchange ? static_cast<const RedistributeOp*>(p.ops[0].get()) : nullptr;
      // The exchange writes into the caller's tensor when it is the last stage, or when a complex
      // FFT of the same shape follows and ends the call: that FFT then runs in place there, and no
      // copy into `into` follows.
      const bool before_last_fft = exchange && i + 2 == stages.size() &&
                                   stages[i + 1].kind == plan::FftStage::Kind::fft &&
                                   (stages[i + 1].op == plan::FftOp::forward || stages[i + 1].op == plan::FftOp::inverse) &&
                                   into.scalar_type() == x.scalar_type() &&
                                   into.sizes() == at::IntArrayRef(op->forward_schedule.out_shape);
      x = exchange && (last || before_last_fft) ? op->forward_into(x, into) : run(p, x);
      continue;
    }
    if (s.kind == plan::FftStage::Kind::factored) {
      x = (*call.factored[i])(x);
      continue;
    }
    std::vector<std::int64_t> lengths;
    for (auto d : s.dims) lengths.push_back(call.problem.axes[static_cast<std::size_t>(d)].out_length);
    // A stage's own result (not the input, nor a view of it) may be transformed in place, and so may
    // the caller's output tensor (which may be the input: einfft_out in place).
    x = local_fft(x, s.op, s.dims, lengths, call.norm,
                  !comm::records(x) && (!x.is_alias_of(input) || x.is_same(into)), last ? into : at::Tensor());
  }
  if (into.defined() && !x.is_same(into)) return into.copy_(x);
  return x;
}

/// The exchanges of a factored stage (the same names and costs as the other transposes), then its
/// local FFTs as one step. `element` is the input's element size, `complex` the working one's.
inline void describe_factored(const FactoredFftCall& c, const plan::FftStage& s, std::int64_t element,
                              std::int64_t complex, std::vector<PlanStep>& out) {
  const auto& group = s.before.axes[0].group;
  const auto me = static_cast<int>(c.me);
  auto add = [&](const detail::Exchange& e, std::int64_t bytes, const std::string& before, const std::string& after) {
    if (!e.op) return;
    const auto& f = e.op->forward_schedule;
    PlanStep ps{plan::step_name(plan::StepKind::redistribute), group.name(), s.before.axes[0].axis, before, after, {}, {}, -1};
    std::tie(ps.forward, ps.backward) = detail::redistribute_cost(
        *e.op, me, bytes, c10::multiply_integers(f.out_shape) * bytes, c10::multiply_integers(f.in_shape) * bytes);
    out.push_back(std::move(ps));
  };
  const auto in = s.before.str(), done = s.after.str();
  add(c.enter, element, in, in + " (six-step rows)");
  add(c.mirror, element, in, in + " (mirrored half spectrum)");
  auto six = [&](const SixStep& t, bool real_out) {
    add(t.to_columns, complex, "rows", "columns");
    add(t.to_rows, complex, "columns", "rows");
    add(t.to_output, real_out ? complex / 2 : complex, "rows", "k2 blocks");
  };
  const bool real_out = s.op == plan::FftOp::real_inverse;
  if (c.factors.bluestein()) {
    six(*c.first, false);
    six(*c.second, false);
  } else {
    six(*c.first, real_out);
  }
  add(c.leave, real_out ? complex / 2 : complex, "k2 blocks", done);
  const auto how = (c.factors.bluestein() ? "bluestein m=" + std::to_string(c.factors.m) + " " : std::string()) +
                   std::to_string(c.factors.m1) + "x" + std::to_string(c.factors.m2);
  out.push_back({std::string(plan::fft_op_name(s.op)) + "_factored", group.name(), s.before.axes[0].axis,
                 in + " (" + how + ")", done, {}, {}, -1});
}

/// The plan with this rank's traffic per step (`element`: the input's element size in bytes).
inline Plan describe_fft(std::string_view source, const FftCall& call, const Mesh& mesh, std::int64_t element,
                         bool complex_input) {
  Plan out{std::string(source), {}, {}};
  const auto real = complex_input ? element / 2 : element;
  for (std::size_t i = 0; i < call.plan.stages.size(); ++i) {
    const auto& s = call.plan.stages[i];
    if (s.kind == plan::FftStage::Kind::move) {
      describe(call.programs[i], call.tables[i], mesh, element, -1, out.steps);
      continue;
    }
    if (s.kind == plan::FftStage::Kind::factored) {
      describe_factored(*call.factored[i], s, element, 2 * real, out.steps);
      element = s.op == plan::FftOp::real_inverse ? real : 2 * real;
      continue;
    }
    std::string axes;
    for (auto d : s.dims) axes += (axes.empty() ? "" : " ") + s.before.axes[static_cast<std::size_t>(d)].axis;
    out.steps.push_back({plan::fft_op_name(s.op), "", axes, s.before.str(), s.after.str(), {}, {}, -1});
    element = s.op == plan::FftOp::real_inverse ? real : 2 * real;
  }
  return out;
}

}  // namespace einshard::exec
