#pragma once
/// @file
/// Axis families for run-time notations: `*name` expands to the family's members, a zip
/// `[*a *b]` to one group per position (`(a0 b0) (a1 b1)`); sizes given by family name expand per
/// member. Pure text work, done once per distinct (notation, families) and cached by the caller.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/notation/parser.hpp"

namespace einshard::notation {

/// Families by name: `{"spatial", {"h", "w"}}`. Members may carry sharding (`"h/sp"`).
using FamilyMap = std::map<std::string, std::vector<std::string>, std::less<>>;

namespace detail {

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

/// A `[...]` whose items all start with `param`, `grad` or `init_sync` is an annotation, kept as is.
inline bool is_annotation(std::string_view body) {
  while (true) {
    const auto comma = body.find(',');
    const auto item = trim(body.substr(0, comma));
    const auto word = item.substr(0, std::min(item.find_first_of(" \t\r\n="), item.size()));
    if (word != "param" && word != "grad" && word != "init_sync") return false;
    if (comma == std::string_view::npos) return true;
    body.remove_prefix(comma + 1);
  }
}

/// The family `*name` at `column` (0-based, the '*') refers to.
inline const std::vector<std::string>& family(std::string_view expr, std::size_t column,
                                              std::string_view name, const FamilyMap& families) {
  if (name.empty()) {
    const auto next = column + 1 < expr.size() ? "'" + std::string(expr.substr(column + 1, 1)) + "'"
                                               : std::string("the end of the notation");
    throw NotationError(expr, column + 1, "expected a family name after '*', found " + next);
  }
  const auto it = families.find(name);
  if (it == families.end()) {
    std::string known;
    for (const auto& [n, members] : families) known += (known.empty() ? "" : ", ") + n;
    throw NotationError(expr, column + 1,
                        "Unknown axis family '" + std::string(name) + "' (" +
                            (known.empty() ? std::string("no families given") : "families: " + known) + ")");
  }
  return it->second;
}

}  // namespace detail

/// Expands every family reference of `expr`. Errors are `NotationError`s pointing at the reference.
inline std::string expand_families(std::string_view expr, const FamilyMap& families) {
  std::string out;
  out.reserve(expr.size() * 2);
  for (std::size_t i = 0; i < expr.size();) {
    const char c = expr[i];
    if (c == '*') {
      auto j = i + 1;
      while (j < expr.size() && detail::is_name_char(expr[j])) ++j;
      const auto& members = detail::family(expr, i, expr.substr(i + 1, j - i - 1), families);
      for (std::size_t m = 0; m < members.size(); ++m) out += (m ? " " : "") + members[m];
      i = j;
    } else if (c == '[') {
      const auto close = expr.find(']', i);
      if (close == std::string_view::npos) {  // left for the parser to report
        out += expr.substr(i);
        break;
      }
      const auto body = expr.substr(i + 1, close - i - 1);
      if (detail::is_annotation(body)) {
        out += expr.substr(i, close - i + 1);
        i = close + 1;
        continue;
      }
      std::vector<const std::vector<std::string>*> zipped;
      for (std::size_t k = 0; k < body.size();) {
        if (detail::is_space(body[k])) {
          ++k;
          continue;
        }
        if (body[k] != '*') {
          auto j = k;
          while (j < body.size() && !detail::is_space(body[j])) ++j;
          throw NotationError(expr, i + 2 + k,
                              "zipped axis-family group '" + std::string(expr.substr(i, close - i + 1)) +
                                  "' may hold only family references ('*name'), but '" +
                                  std::string(body.substr(k, j - k)) + "' is not one");
        }
        auto j = k + 1;
        while (j < body.size() && detail::is_name_char(body[j])) ++j;
        zipped.push_back(&detail::family(expr, i + 1 + k, body.substr(k + 1, j - k - 1), families));
        k = j;
      }
      if (zipped.empty())
        throw NotationError(expr, i + 1, "empty zipped axis-family group '[]'");
      for (const auto* z : zipped)
        if (z->size() != zipped.front()->size())
          throw NotationError(expr, i + 1, "Zipped axis families must have matching lengths");
      for (std::size_t p = 0; p < zipped.front()->size(); ++p) {
        out += p ? " (" : "(";
        for (std::size_t z = 0; z < zipped.size(); ++z) out += (z ? " " : "") + (*zipped[z])[p];
        out += ')';
      }
      i = close + 1;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

/// The axis name of a family member (`"h/sp"` -> `"h"`).
inline std::string_view member_axis(std::string_view member) {
  return detail::trim(member.substr(0, member.find('/')));
}

/// Flattens sizes given by axis or by family (one value per member, or one for all) into sizes by
/// axis name.
template <class SizeMap>
std::map<std::string, std::int64_t, std::less<>> expand_sizes(const SizeMap& sizes,
                                                              const FamilyMap& families) {
  std::map<std::string, std::int64_t, std::less<>> out;
  auto set = [&](std::string_view axis, std::int64_t v) {
    const auto [it, inserted] = out.emplace(axis, v);
    if (!inserted && it->second != v)
      throw Error("Conflicting size for expanded axis '" + std::string(axis) + "': " +
                  std::to_string(it->second) + " and " + std::to_string(v));
  };
  for (const auto& [key, value] : sizes) {
    const auto& values = value.values;
    if (const auto f = families.find(key); f != families.end()) {
      const auto& members = f->second;
      if (values.size() != 1 && values.size() != members.size())
        throw Error("Size family '" + key + "' has " + std::to_string(values.size()) +
                    " values for " + std::to_string(members.size()) + " axes");
      for (std::size_t m = 0; m < members.size(); ++m)
        set(member_axis(members[m]), values.size() == 1 ? values[0] : values[m]);
    } else {
      if (values.size() != 1)
        throw Error("Size of axis '" + key + "' has " + std::to_string(values.size()) +
                    " values, but '" + key + "' is not a family");
      set(key, values[0]);
    }
  }
  return out;
}

}  // namespace einshard::notation
