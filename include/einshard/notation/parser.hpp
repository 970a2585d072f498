#pragma once
/// @file
/// The one parser of the notation, used by both the compile-time and the run-time forms.
///
/// A hand-written recursive descent over the grammar of docs/notation.md: one pass over the text,
/// then checks that compare axes pairwise (quadratic in the number of axes, which is small). It is
/// `constexpr` (no exceptions, no std::string) so that `einshard<"...">` runs it during constant
/// evaluation; on failure it returns a `Diagnostic` (column + message) instead of throwing, and each
/// front end turns that into its own kind of error (a compile error or an `es::NotationError`).

#include <cstdint>
#include <string_view>

#include "einshard/notation/expression.hpp"

namespace einshard::notation {

/// Where and why a notation is malformed. `message` may contain one `{}`, replaced by `subject`.
struct Diagnostic {
  std::uint32_t column = 0;  ///< 0-based offset into the source
  std::string_view message;
  std::string_view subject;
};

struct ParseResult {
  Expression expression;
  bool ok = true;
  Diagnostic error;
};

/// Writes a diagnostic's message (with its subject substituted) through `put(char)`.
template <class Put>
constexpr void write_message(const Diagnostic& d, Put&& put) {
  const auto hole = d.message.find("{}");
  for (std::size_t i = 0; i < d.message.size(); ++i) {
    if (i == hole) {
      for (char c : d.subject) put(c);
      ++i;
    } else {
      put(d.message[i]);
    }
  }
}

namespace detail {

constexpr bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
constexpr bool is_name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
constexpr bool is_reserved_annotation_word(std::string_view w) noexcept {
  return w == "async" || w == "ddp" || w == "external" || w == "none";
}

/// True when the compound mesh names `a` and `b` (hyphen-separated) share a component.
constexpr bool meshes_overlap(std::string_view a, std::string_view b) noexcept {
  while (!a.empty()) {
    const auto ea = a.find('-');
    const auto ca = a.substr(0, ea);
    for (auto rest = b; !rest.empty();) {
      const auto eb = rest.find('-');
      if (rest.substr(0, eb) == ca) return true;
      rest = eb == std::string_view::npos ? std::string_view{} : rest.substr(eb + 1);
    }
    a = ea == std::string_view::npos ? std::string_view{} : a.substr(ea + 1);
  }
  return false;
}

/// True when the mesh names `a` and `b` name the same group (`dp-sp` is `sp-dp`).
constexpr bool same_mesh(std::string_view a, std::string_view b) noexcept {
  auto each_in = [](std::string_view x, std::string_view y) {
    for (auto rest = x; !rest.empty();) {
      const auto e = rest.find('-');
      const auto c = rest.substr(0, e);
      bool found = false;
      for (auto r2 = y; !r2.empty() && !found;) {
        const auto e2 = r2.find('-');
        found = r2.substr(0, e2) == c;
        r2 = e2 == std::string_view::npos ? std::string_view{} : r2.substr(e2 + 1);
      }
      if (!found) return false;
      rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e + 1);
    }
    return true;
  };
  return each_in(a, b) && each_in(b, a);
}

/// The length in bytes of the UTF-8 character whose first byte is `lead` (1 for a stray
/// continuation byte, so a message shows what is there rather than half a character).
constexpr std::size_t utf8_length(unsigned char lead) noexcept {
  return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

class Parser {
 public:
  constexpr explicit Parser(std::string_view source) noexcept : src_(source) {}

  constexpr ParseResult run() {
    skip_ws();
    while (true) {
      if (!spec(true)) return finish();
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        skip_ws();
        continue;
      }
      if (starts_with("->")) {
        pos_ += 2;
        break;
      }
      if (at_end()) {
        fail(pos_, "expected '->'");
      } else {
        fail(pos_, "unexpected character '{}'", character_at(pos_));
      }
      return finish();
    }
    skip_ws();
    if (at_end()) {
      fail(pos_, "expected an output specification after '->'");
      return finish();
    }
    if (!spec(false)) return finish();
    skip_ws();
    if (!at_end()) {
      if (peek() == ',' || starts_with("->"))
        fail(pos_, "unexpected '{}' after the output specification",
             src_.substr(pos_, peek() == ',' ? 1 : 2));
      else
        fail(pos_, "unexpected character '{}'", character_at(pos_));
      return finish();
    }
    validate();
    return finish();
  }

 private:
  // ---- scanning -----------------------------------------------------------------------------
  [[nodiscard]] constexpr bool at_end() const noexcept { return pos_ >= src_.size(); }
  /// The whole (UTF-8) character at `pos`, for messages.
  [[nodiscard]] constexpr std::string_view character_at(std::size_t pos) const noexcept {
    return src_.substr(pos, utf8_length(static_cast<unsigned char>(src_[pos])));
  }
  [[nodiscard]] constexpr char peek(std::size_t ahead = 0) const noexcept {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  [[nodiscard]] constexpr bool starts_with(std::string_view s) const noexcept {
    return src_.substr(pos_).starts_with(s);
  }
  constexpr void skip_ws() noexcept {
    while (!at_end() && is_space(src_[pos_])) ++pos_;
  }
  constexpr Slice name() noexcept {
    const auto begin = pos_;
    while (!at_end() && is_name_char(src_[pos_])) ++pos_;
    return {static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(pos_ - begin)};
  }
  [[nodiscard]] constexpr std::string_view text(Slice s) const noexcept {
    return src_.substr(s.begin, s.length);
  }

  constexpr bool fail(std::size_t column, std::string_view message, std::string_view subject = {}) {
    if (ok_) {
      ok_ = false;
      error_ = {static_cast<std::uint32_t>(column), message, subject};
    }
    return false;
  }
  constexpr ParseResult finish() { return {std::move(e_), ok_, error_}; }

  // ---- grammar ------------------------------------------------------------------------------
  // spec := item (ws item)* partial? annotation?       (annotations on inputs only)
  constexpr bool spec(bool is_input) {
    Spec s;
    s.first_item = static_cast<std::uint32_t>(e_.items.size());
    s.first_axis = static_cast<std::uint32_t>(e_.axes.size());
    s.first_partial = static_cast<std::uint32_t>(e_.partials.size());
    s.column = static_cast<std::uint32_t>(pos_);
    while (true) {
      skip_ws();
      const char c = peek();
      if (c == '(') {
        if (!group()) return false;
      } else if (starts_with("...")) {
        if (s.has_ellipsis) return fail(pos_, "more than one '...' in one operand");
        s.has_ellipsis = true;
        e_.items.push_back({ItemKind::ellipsis, static_cast<std::uint32_t>(e_.axes.size()), 0,
                            static_cast<std::uint32_t>(pos_)});
        pos_ += 3;
      } else if (is_name_char(c)) {
        const auto column = pos_;
        if (!axis()) return false;
        e_.items.push_back({ItemKind::axis, static_cast<std::uint32_t>(e_.axes.size() - 1), 1,
                            static_cast<std::uint32_t>(column)});
      } else if (c == '*') {
        return fail(pos_,
                    "family reference '*{}' needs the run-time form: einshard(\"...\", {tensors}, "
                    "{.families = ...})",
                    family_name_at(pos_ + 1));
      } else if (c == ')') {
        return fail(pos_, "unbalanced ')'");
      } else if (c == '.') {
        return fail(pos_, "expected '...'");
      } else {
        break;
      }
    }
    s.item_count = static_cast<std::uint32_t>(e_.items.size()) - s.first_item;
    s.axis_count = static_cast<std::uint32_t>(e_.axes.size()) - s.first_axis;
    if (s.item_count == 0) {
      if (at_end() || starts_with("->") || peek() == ',')
        return fail(pos_, "expected an axis name");
      return fail(pos_, "unexpected character '{}'", character_at(pos_));
    }
    skip_ws();
    if (starts_with("//") && !partial()) return false;
    s.partial_count = static_cast<std::uint32_t>(e_.partials.size()) - s.first_partial;
    skip_ws();
    if (peek() == '[') {
      if (!is_input) return fail(pos_, "annotations are only allowed on input operands");
      if (!annotation(s.annotation)) return false;
    }
    e_.specs.push_back(s);
    return true;
  }

  [[nodiscard]] constexpr std::string_view family_name_at(std::size_t p) const noexcept {
    auto q = p;
    while (q < src_.size() && is_name_char(src_[q])) ++q;
    return src_.substr(p, q - p);
  }

  // axis := name (ws '/' ws mesh)?
  constexpr bool axis() {
    Axis a;
    a.name = name();
    if (peek() == '-' && is_name_char(peek(1))) return fail(pos_, "axis names cannot contain '-'");
    const auto save = pos_;
    skip_ws();
    if (peek() == '/' && peek(1) != '/') {
      ++pos_;
      skip_ws();
      if (!mesh(a.mesh, "expected a mesh dimension name after '/'")) return false;
    } else {
      pos_ = save;
    }
    e_.axes.push_back(a);
    return true;
  }

  // mesh := name ('-' name)*      ('->' ends it)
  constexpr bool mesh(Slice& out, std::string_view missing_message) {
    const auto begin = pos_;
    while (true) {
      const auto component_begin = pos_;
      const Slice component = name();
      if (component.empty()) {
        if (component_begin == begin) return fail(pos_, missing_message);
        return fail(component_begin, "empty component in compound mesh name '{}'",
                    src_.substr(begin, component_begin - begin));
      }
      // A repeated component ("dp-dp") names no group; reject it where it is written.
      for (auto p = begin; p < component_begin;) {
        auto q = p;
        while (is_name_char(src_[q])) ++q;
        if (src_.substr(p, q - p) == text(component))
          return fail(component_begin, "repeated component '{}' in compound mesh name",
                      text(component));
        p = q + 1;
      }
      if (peek() == '-' && peek(1) != '>') {
        ++pos_;
        continue;
      }
      break;
    }
    out = {static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(pos_ - begin)};
    return true;
  }

  // group := '(' ws axis (ws axis)* ws ')'      (one level, no '...')
  constexpr bool group() {
    const auto open = pos_;
    ++pos_;
    const auto first = static_cast<std::uint32_t>(e_.axes.size());
    while (true) {
      skip_ws();
      const char c = peek();
      if (c == ')') {
        ++pos_;
        break;
      }
      if (c == '(') return fail(pos_, "nested groups are not allowed");
      if (starts_with("...")) return fail(pos_, "'...' is not allowed inside a group");
      if (c == '*')
        return fail(pos_,
                    "family reference '*{}' needs the run-time form: einshard(\"...\", {tensors}, "
                    "{.families = ...})",
                    family_name_at(pos_ + 1));
      if (is_name_char(c)) {
        if (!axis()) return false;
        continue;
      }
      if (at_end() || c == ',' || starts_with("->") || starts_with("//"))
        return fail(open, "unbalanced '('");
      return fail(pos_, "unexpected character '{}' inside a group", character_at(pos_));
    }
    const auto count = static_cast<std::uint32_t>(e_.axes.size()) - first;
    if (count == 0) return fail(open, "empty group '()'");
    e_.items.push_back({ItemKind::group, first, count, static_cast<std::uint32_t>(open)});
    return true;
  }

  // partial := '//' ws (mesh | '(' ws mesh (ws ',' ws mesh)* ws ')')
  constexpr bool partial() {
    pos_ += 2;
    skip_ws();
    const auto first = e_.partials.size();
    constexpr std::string_view missing = "expected a mesh dimension name after '//'";
    if (peek() == '(') {
      ++pos_;
      while (true) {
        skip_ws();
        if (!partial_dim(first, missing)) return false;
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == ')') {
          ++pos_;
          break;
        }
        return fail(pos_, "expected ',' or ')' in the list of partial mesh dimensions");
      }
      return true;
    }
    return partial_dim(first, missing);
  }

  constexpr bool partial_dim(std::size_t first, std::string_view missing) {
    Slice m;
    if (!mesh(m, missing)) return false;
    for (auto i = first; i < e_.partials.size(); ++i)
      if (text(e_.partials[i]) == text(m))
        return fail(m.begin, "repeated partial mesh dimension '{}'", text(m));
    e_.partials.push_back(m);
    return true;
  }

  // annotation := '[' item (',' item)* ']';  item := 'param' | 'grad' '=' value | 'init_sync' '=' value
  constexpr bool annotation(Annotation& out) {
    ++pos_;
    bool seen_param = false;
    while (true) {
      skip_ws();
      const auto column = pos_;
      const Slice word = name();
      const auto w = text(word);
      if (w == "param") {
        if (seen_param) return fail(column, "duplicate tensor annotation '{}'", w);
        seen_param = out.param = true;
      } else if (w == "grad" || w == "init_sync") {
        Slice& slot = w == "grad" ? out.grad : out.init_sync;
        if (!slot.empty()) return fail(column, "duplicate tensor annotation '{}'", w);
        skip_ws();
        if (peek() != '=') return fail(pos_, "expected '=' after '{}'", w);
        ++pos_;
        skip_ws();
        const auto value_begin = pos_;
        while (!at_end() && (is_name_char(peek()) || peek() == '-' || peek() == ':')) ++pos_;
        slot = {static_cast<std::uint32_t>(value_begin),
                static_cast<std::uint32_t>(pos_ - value_begin)};
        if (!(w == "grad" ? grad_value(slot) : init_sync_value(slot))) return false;
      } else if (w.empty()) {
        return fail(column, "expected 'param', 'grad=' or 'init_sync=' in the annotation");
      } else {
        return fail(column,
                    "unknown annotation item '{}' (expected 'param', 'grad=...' or "
                    "'init_sync=...')",
                    w);
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return true;
      }
      return fail(pos_, "expected ',' or ']' in the annotation");
    }
  }

  /// A mesh-group value inside an annotation, checked with the same rules as a `/mesh`.
  constexpr bool group_value(Slice v, std::string_view invalid_message) {
    const auto save = pos_;
    pos_ = v.begin;
    Slice parsed;
    const bool good = mesh(parsed, invalid_message) && parsed.length == v.length;
    if (ok_ && !good) fail(v.begin, invalid_message, text(v));
    pos_ = save;
    return good;
  }

  // async | ddp | external | none | <group> | <group>:(async|ddp|external)
  constexpr bool grad_value(Slice v) {
    const auto value = text(v);
    if (value.empty()) return fail(v.begin, "invalid grad annotation: expected a value after '='");
    const auto colon = value.find(':');
    if (colon == std::string_view::npos) {
      return is_reserved_annotation_word(value) ||
             group_value(v, "invalid grad annotation '{}'");
    }
    const auto head = value.substr(0, colon);
    const auto suffix = value.substr(colon + 1);
    if (head.empty() || suffix.empty() || suffix.find(':') != std::string_view::npos)
      return fail(v.begin, "invalid grad annotation '{}'", value);
    if (is_reserved_annotation_word(head))
      return fail(v.begin, "grad annotation suffix requires an explicit mesh group, got '{}'",
                  value);
    if (suffix != "async" && suffix != "ddp" && suffix != "external")
      return fail(v.begin + static_cast<std::uint32_t>(colon) + 1,
                  "unknown grad annotation suffix '{}'", suffix);
    return group_value({v.begin, static_cast<std::uint32_t>(colon)},
                       "invalid grad annotation '{}'");
  }

  // none | external | <group>
  constexpr bool init_sync_value(Slice v) {
    const auto value = text(v);
    if (value.empty())
      return fail(v.begin, "invalid init_sync annotation: expected a value after '='");
    if (value.find(':') != std::string_view::npos)
      return fail(v.begin, "init_sync annotations do not accept suffixes, got '{}'", value);
    return value == "none" || value == "external" ||
           group_value(v, "invalid init_sync annotation '{}'");
  }

  // ---- semantic checks on the whole expression ---------------------------------------------
  constexpr void validate() {
    const auto view = e_.view(src_);
    bool input_ellipsis = false;
    for (const Spec& s : view.specs) {
      const auto axes = view.axes_of(s);
      for (std::size_t i = 0; i < axes.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j)
          if (view.name(axes[i]) == view.name(axes[j]) &&
              !same_mesh(view.mesh(axes[i]), view.mesh(axes[j]))) {
            fail(axes[i].name.begin, "axis '{}' appears with two different shardings in one operand",
                 view.name(axes[i]));
            return;
          }
        for (const Slice p : view.partials_of(s))
          if (!axes[i].mesh.empty() && meshes_overlap(view.mesh(axes[i]), view.text(p))) {
            fail(p.begin, "mesh dimension '{}' both shards an axis and is a partial of one operand",
                 view.text(p));
            return;
          }
      }
    }
    for (std::size_t i = 0; i + 1 < view.specs.size(); ++i)
      input_ellipsis = input_ellipsis || view.specs[i].has_ellipsis;
    const Spec& out = view.output();
    if (out.has_ellipsis && !input_ellipsis) {
      for (const Item& it : view.items_of(out))
        if (it.kind == ItemKind::ellipsis) fail(it.column, "the output has '...' but no input does");
      return;
    }
    const auto out_axes = view.axes_of(out);
    for (std::size_t i = 0; i < out_axes.size(); ++i) {
      const auto n = view.name(out_axes[i]);
      for (std::size_t j = 0; j < i; ++j)
        if (view.name(out_axes[j]) == n) {
          fail(out_axes[i].name.begin, "output axis '{}' appears more than once", n);
          return;
        }
      bool found = false;
      for (std::size_t k = 0; k + 1 < view.specs.size() && !found; ++k)
        for (const Axis& a : view.axes_of(view.specs[k])) found = found || view.name(a) == n;
      if (!found) {
        fail(out_axes[i].name.begin, "output axis '{}' does not appear in any input", n);
        return;
      }
    }
  }

  std::string_view src_;
  std::size_t pos_ = 0;
  Expression e_;
  bool ok_ = true;
  Diagnostic error_;
};

}  // namespace detail

/// Parses (and checks) a notation. Usable in constant expressions.
constexpr ParseResult parse(std::string_view source) { return detail::Parser(source).run(); }

}  // namespace einshard::notation
