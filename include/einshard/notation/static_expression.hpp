#pragma once
/// @file
/// The compile-time front end: a notation given as a template argument is parsed during constant
/// evaluation into a `StaticExpression`, a structural value; a malformed one is a compile error that
/// names the problem and its column.

#include <array>
#include <cstddef>

#include "einshard/notation/fixed_string.hpp"
#include "einshard/notation/parser.hpp"

namespace einshard {
namespace notation {

/// A parsed notation with fixed-size tables: what `einshard<"...">` works from. Structural, so it can
/// itself be a template argument.
template <std::size_t Length, std::size_t Axes, std::size_t Items, std::size_t Partials,
          std::size_t Specs>
struct StaticExpression {
  fixed_string<Length> source;
  std::array<Axis, Axes> axes{};
  std::array<Item, Items> items{};
  std::array<Slice, Partials> partials{};
  std::array<Spec, Specs> specs{};

  [[nodiscard]] constexpr ExpressionView view() const noexcept {
    return {source.view(), axes, items, partials, specs};
  }
};

namespace detail {

struct ParseSummary {
  bool ok;
  std::size_t column;  // 1-based
  std::size_t axes, items, partials, specs;
  std::size_t message_length;
};

template <fixed_string S>
inline constexpr ParseSummary parse_summary = [] {
  const auto r = notation::parse(S.view());
  std::size_t length = 0;
  notation::write_message(r.error, [&](char) { ++length; });
  return ParseSummary{r.ok,
                      r.error.column + 1,
                      r.expression.axes.size(),
                      r.expression.items.size(),
                      r.expression.partials.size(),
                      r.expression.specs.size(),
                      length};
}();

constexpr std::size_t decimal_digits(std::size_t v) noexcept {
  std::size_t d = 1;
  while (v >= 10) v /= 10, ++d;
  return d;
}

/// "<message> at column <c>: <expression with '^' inserted before the fault>"
template <fixed_string S>
constexpr auto diagnostic_text() {
  constexpr auto& sum = parse_summary<S>;
  constexpr std::string_view at = " at column ";
  fixed_string<sum.message_length + at.size() + decimal_digits(sum.column) + 2 + S.size() + 1> out;
  std::size_t k = 0;
  const auto r = notation::parse(S.view());
  notation::write_message(r.error, [&](char c) { out.data[k++] = c; });
  for (char c : at) out.data[k++] = c;
  for (std::size_t p = 1, d = decimal_digits(sum.column); d > 0; --d) {
    p = 1;
    for (std::size_t i = 1; i < d; ++i) p *= 10;
    out.data[k++] = static_cast<char>('0' + (sum.column / p) % 10);
  }
  out.data[k++] = ':';
  out.data[k++] = ' ';
  for (std::size_t i = 0; i <= S.size(); ++i) {
    if (i + 1 == sum.column) out.data[k++] = '^';
    if (i < S.size()) out.data[k++] = S.data[i];
  }
  return out;
}

/// Deliberately incomplete: naming it is the compile error, and its arguments carry the message and
/// the column into the diagnostic (fmt puts text there, CTRE the position; this does both).
template <auto Message, std::size_t Column>
struct notation_error;

}  // namespace detail

/// The parsed form of `S`, or a compile error naming what is wrong with it and where.
template <fixed_string S>
constexpr auto compile() {
  constexpr auto& sum = detail::parse_summary<S>;
  if constexpr (!sum.ok) {
    [[maybe_unused]] detail::notation_error<detail::diagnostic_text<S>(), sum.column> diagnostic;
    static_assert(sum.ok, "invalid einshard notation: see notation_error<message, column> above");
    return StaticExpression<S.size(), 0, 0, 0, 1>{S};
  } else {
    const auto r = parse(S.view());
    StaticExpression<S.size(), sum.axes, sum.items, sum.partials, sum.specs> e{S};
    for (std::size_t i = 0; i < sum.axes; ++i) e.axes[i] = r.expression.axes[i];
    for (std::size_t i = 0; i < sum.items; ++i) e.items[i] = r.expression.items[i];
    for (std::size_t i = 0; i < sum.partials; ++i) e.partials[i] = r.expression.partials[i];
    for (std::size_t i = 0; i < sum.specs; ++i) e.specs[i] = r.expression.specs[i];
    return e;
  }
}

/// The compiled form of `S` as a constant.
template <fixed_string S>
inline constexpr auto static_expression = compile<S>();

}  // namespace notation

/// `static_assert(es::check<"a b -> b a">())`: true, or a compile error describing the fault.
template <fixed_string S>
constexpr bool check() {
  (void)notation::static_expression<S>;
  return true;
}

}  // namespace einshard
