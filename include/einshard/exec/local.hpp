#pragma once
/// @file
/// Runs a local plan: factored groups are reshaped apart, one `at::einsum` does the work (so values
/// and gradients are torch's own), output groups are reshaped together.

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/plan/local.hpp"

namespace einshard::exec {

namespace detail {

inline std::string operand_label(std::size_t i, std::size_t inputs) {
  return inputs == 1 ? std::string("the input") : "input " + std::to_string(i + 1);
}

/// torch's einsum, its shape errors turned into einshard's (naming the notation, not letters).
inline at::Tensor einsum(const std::string& equation, at::TensorList xs, std::string_view source) {
  try {
    return at::einsum(equation, xs);
  } catch (const c10::Error& e) {
    throw Error("einshard '" + std::string(source) + "': expected tensors whose shapes fit the notation, found (" +
                e.what_without_backtrace() + ")");
  }
}

inline bool takes_scalar(const plan::OperandLayout& l, const at::Tensor& x) {
  return x.dim() == 0 && l.single_axis();
}

inline void check_rank(const plan::OperandLayout& l, const at::Tensor& x, std::size_t i,
                       std::size_t inputs, std::string_view source) {
  const auto ok = l.has_ellipsis ? x.dim() >= l.rank : x.dim() == l.rank;
  if (ok || takes_scalar(l, x)) return;
  throw Error("einshard '" + std::string(source) + "': expected " + std::to_string(l.rank) +
              (l.has_ellipsis ? " or more" : "") + " dimensions in " + operand_label(i, inputs) + ", found " +
              std::to_string(x.dim()));
}

/// Sizes of every axis id: from plain dimensions of the inputs, the `sizes` option, and inference
/// of one unknown factor per group.
template <class SizeMap>
std::vector<std::int64_t> resolve_sizes(const plan::LocalPlan& p, at::TensorList xs, const SizeMap& sizes,
                                        const notation::FamilyMap& families) {
  std::vector<std::int64_t> size(p.axis_names.size(), -1);
  const auto given = notation::expand_sizes(sizes, families);
  std::vector<bool> stated(size.size(), false);  // given in .sizes: a statement, not a broadcast
  for (std::size_t id = 0; id < size.size(); ++id)
    if (auto it = given.find(p.axis_names[id]); it != given.end()) size[id] = it->second, stated[id] = true;
  // Each group item with the tensor dimension it splits.
  struct Pending {
    const plan::LayoutItem* item;
    std::int64_t dim;
  };
  std::vector<Pending> groups;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const auto& l = p.inputs[i];
    if (takes_scalar(l, xs[i])) continue;
    std::int64_t d = 0;
    for (const auto& item : l.items) {
      if (item.kind == notation::ItemKind::ellipsis) {
        d += xs[i].dim() - l.rank;
        continue;
      }
      const auto extent = xs[i].size(d++);
      if (item.kind == notation::ItemKind::group) {
        groups.push_back({&item, extent});
        continue;
      }
      const auto id = item.ids[0];
      auto& s = size[id];
      if (s >= 0 && s != extent && (stated[id] ? extent != 1 : extent != 1 && s != 1))
        throw Error("einshard: expected axis '" + p.axis_names[id] + "' to have extent " + std::to_string(s) +
                    (stated[id] ? " (from .sizes)" : " (from another operand)") + ", found " + std::to_string(extent) +
                    " in " + operand_label(i, xs.size()));
      if (s <= 1 && !stated[id]) s = extent;  // an extent of 1 broadcasts
    }
  }
  auto names = [&](const plan::LayoutItem& g, bool unknown_only) {
    std::string s;
    for (auto id : g.ids)
      if (!unknown_only || size[id] < 0) s += (s.empty() ? "" : ", ") + p.axis_names[id];
    return s;
  };
  // A factor inferred in one group may be what another group needs: repeat until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& g : groups) {
      std::int64_t known = 1, unknown = 0, last = -1;
      for (auto id : g.item->ids)
        if (size[id] < 0) ++unknown, last = id;
        else known *= size[id];
      if (unknown == 1 && known != 0 && g.dim % known == 0) {
        size[static_cast<std::size_t>(last)] = g.dim / known;
        changed = true;
      }
    }
  }
  for (const auto& g : groups) {
    std::int64_t known = 1, unknown = 0;
    for (auto id : g.item->ids)
      if (size[id] < 0) ++unknown;
      else known *= size[id];
    if (unknown > 1)
      throw Error("Cannot infer multiple factor sizes for " + names(*g.item, true) +
                  " (give all but one in .sizes)");
    if (unknown == 1)
      throw Error("Cannot infer factor size for '" + names(*g.item, true) + "' from dimension " +
                  std::to_string(g.dim));
    if (known != g.dim)
      throw Error("Factor sizes of (" + names(*g.item, false) + ") multiply to " +
                  std::to_string(known) + ", but tensor dimension is " + std::to_string(g.dim));
  }
  return size;
}

}  // namespace detail

/// Throws unless `given` tensors were passed to the notation `source` of `inputs` inputs.
inline void check_input_count(std::string_view source, std::size_t inputs, std::size_t given) {
  if (given != inputs)
    throw Error("einshard '" + std::string(source) + "': expected " + std::to_string(inputs) +
                " tensors (one per input), found " + std::to_string(given));
}

/// The checks `run_local` makes before it computes (what `explain` raises for a local notation):
/// one tensor per input, each with as many dimensions as its spec names. Whether any input is a
/// 0-d tensor standing for a one-axis spec.
inline bool check_local_operands(const plan::LocalPlan& p, std::string_view source, at::TensorList xs) {
  check_input_count(source, p.inputs.size(), xs.size());
  bool scalars = false;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    detail::check_rank(p.inputs[i], xs[i], i, xs.size(), source);
    scalars = scalars || detail::takes_scalar(p.inputs[i], xs[i]);
  }
  return scalars;
}

/// Runs a local plan on `xs` (one tensor per input of the notation `source`); `sizes` (an
/// `es::Sizes`) and `families` give the factors of its groups. Needs no mesh and no MPI.
template <class SizeMap>
at::Tensor run_local(const plan::LocalPlan& p, std::string_view source, at::TensorList xs,
                     const SizeMap& sizes, const notation::FamilyMap& families) {
  const bool scalars = check_local_operands(p, source, xs);
  if (!p.has_groups && !scalars) return detail::einsum(p.equation, xs, source);

  std::vector<std::int64_t> size;
  if (p.has_groups) size = detail::resolve_sizes(p, xs, sizes, families);
  std::vector<at::Tensor> operands;
  operands.reserve(xs.size());
  bool scalar_output = p.output.single_axis();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const auto& l = p.inputs[i];
    const auto& x = xs[i];
    if (detail::takes_scalar(l, x)) {
      operands.push_back(x.reshape({1}));
      continue;
    }
    for (const auto& item : l.items)  // the output axis has a real extent somewhere
      if (scalar_output && item.kind == notation::ItemKind::axis &&
          item.ids[0] == p.output.items[0].ids[0])
        scalar_output = false;
    if (!l.has_groups) {
      operands.push_back(x);
      continue;
    }
    std::vector<std::int64_t> shape;
    std::int64_t d = 0;
    for (const auto& item : l.items) {
      if (item.kind == notation::ItemKind::ellipsis) {
        for (auto e = x.dim() - l.rank; e > 0; --e) shape.push_back(x.size(d++));
      } else if (item.kind == notation::ItemKind::group) {
        for (auto id : item.ids) shape.push_back(size[id]);
        ++d;
      } else {
        shape.push_back(x.size(d++));
      }
    }
    operands.push_back(x.reshape(shape));
  }
  auto out = detail::einsum(p.equation, operands, source);
  if (scalars && scalar_output) return out.reshape({});
  if (!p.output.has_groups) return out;
  const auto& l = p.output;
  std::vector<std::int64_t> shape;
  std::int64_t d = 0;
  const std::int64_t flat_axes = [&] {
    std::int64_t n = 0;
    for (const auto& item : l.items) n += static_cast<std::int64_t>(item.ids.size());
    return n;
  }();
  for (const auto& item : l.items) {
    if (item.kind == notation::ItemKind::ellipsis) {
      for (auto e = out.dim() - flat_axes; e > 0; --e) shape.push_back(out.size(d++));
    } else {
      std::int64_t extent = 1;
      for (std::size_t k = 0; k < item.ids.size(); ++k) extent *= out.size(d++);
      shape.push_back(extent);
    }
  }
  return out.reshape(shape);
}

/// A two-operand einsum that is a (batched) matrix product: `x` is batch, row and contracted axes in
/// that order, `y` batch axes then column and contracted axes (either order), the result batch, row
/// and column axes. Such a product runs as one `at::matmul` on reshaped views, whose backward is two
/// matrix products; `at::einsum` permutes and reshapes around a `bmm` instead, slower forward and
/// backward at the sizes of a tensor-parallel MLP (docs/performance.md).
struct MatmulForm {
  std::size_t batch = 0, rows = 0, columns = 0, contracted = 0;
  bool y_contracted_first = false;  ///< y is (batch, contracted, columns), else (batch, columns, contracted)
};

/// The matrix-product form of `equation` (letters only, as the planners write them), if it has one.
inline std::optional<MatmulForm> matmul_form(std::string_view equation) {
  const auto comma = equation.find(','), arrow = equation.find("->");
  if (comma == std::string_view::npos || arrow == std::string_view::npos || arrow < comma) return std::nullopt;
  const auto x = equation.substr(0, comma), y = equation.substr(comma + 1, arrow - comma - 1),
             z = equation.substr(arrow + 2);
  if (y.find(',') != std::string_view::npos) return std::nullopt;
  auto has = [](std::string_view s, char c) { return s.find(c) != std::string_view::npos; };
  auto distinct = [](std::string_view s) {
    for (std::size_t i = 0; i < s.size(); ++i)
      if (s.find(s[i], i + 1) != std::string_view::npos) return false;
    return true;
  };
  if (!distinct(x) || !distinct(y) || !distinct(z)) return std::nullopt;
  MatmulForm f;
  std::string b, m, n, k;
  for (char c : x) {
    const bool in_y = has(y, c), in_z = has(z, c);
    if (in_y && in_z) b += c;
    else if (in_z) m += c;
    else if (in_y) k += c;
    else return std::nullopt;  // summed over one operand alone
  }
  for (char c : y)
    if (!has(x, c)) {
      if (!has(z, c)) return std::nullopt;
      n += c;
    }
  if (x != b + m + k || z != b + m + n) return std::nullopt;
  if (y == b + n + k) f.y_contracted_first = false;
  else if (y == b + k + n) f.y_contracted_first = true;
  else return std::nullopt;
  f.batch = b.size();
  f.rows = m.size();
  f.columns = n.size();
  f.contracted = k.size();
  return f;
}

/// `at::einsum(equation, {x, y})`, through `at::matmul` when `form` applies to these shapes (no
/// broadcasting of batch or contracted axes).
inline at::Tensor contract(const std::optional<MatmulForm>& form, const std::string& equation,
                           const at::Tensor& x, const at::Tensor& y) {
  if (!form || x.dim() != static_cast<std::int64_t>(form->batch + form->rows + form->contracted) ||
      y.dim() != static_cast<std::int64_t>(form->batch + form->columns + form->contracted))
    return at::einsum(equation, {x, y});
  const auto& f = *form;
  const auto xs = x.sizes(), ys = y.sizes();
  const auto yk = f.batch + (f.y_contracted_first ? 0 : f.columns);  // first contracted axis of y
  const auto yn = f.batch + (f.y_contracted_first ? f.contracted : 0);
  std::int64_t rows = 1, columns = 1, inner = 1;
  for (std::size_t i = 0; i < f.batch; ++i)
    if (xs[i] != ys[i]) return at::einsum(equation, {x, y});
  for (std::size_t i = 0; i < f.contracted; ++i) {
    if (xs[f.batch + f.rows + i] != ys[yk + i]) return at::einsum(equation, {x, y});
    inner *= ys[yk + i];
  }
  for (std::size_t i = 0; i < f.rows; ++i) rows *= xs[f.batch + i];
  for (std::size_t i = 0; i < f.columns; ++i) columns *= ys[yn + i];
  // A reshape to the shape a tensor has already is still a dispatched op (a few thousand
  // instructions, as much as a tiny product): skipped, which is every reshape of a plain matrix
  // product (one axis each of rows, columns and contracted).
  auto as = [](const at::Tensor& t, at::IntArrayRef shape) { return t.sizes() == shape ? t : t.reshape(shape); };
  c10::SmallVector<std::int64_t, 8> shape(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(f.batch));
  shape.append({rows, inner});
  const auto x2 = as(x, shape);
  shape.pop_back();
  shape.pop_back();
  const auto y2 = f.y_contracted_first ? (shape.append({inner, columns}), as(y, shape))
                                       : (shape.append({columns, inner}), as(y, shape).transpose(-1, -2));
  shape.pop_back();
  shape.pop_back();
  shape.append(xs.begin() + static_cast<std::ptrdiff_t>(f.batch),
               xs.begin() + static_cast<std::ptrdiff_t>(f.batch + f.rows));
  shape.append(ys.begin() + static_cast<std::ptrdiff_t>(yn), ys.begin() + static_cast<std::ptrdiff_t>(yn + f.columns));
  return as(at::matmul(x2, y2), shape);
}

}  // namespace einshard::exec
