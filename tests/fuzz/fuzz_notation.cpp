// libFuzzer target: the run-time notation front end (family expansion, the parser, sizes by family,
// the local plan, layouts and the unary planner) on arbitrary text. None of it needs LibTorch or
// MPI, so the target is small and runs ~10^5 inputs a second.
//
// Input format (so that seeds are readable and mutations stay meaningful): leading lines
//   *name=m1 m2/sp ...     an axis family
//   #name=4,2              a size (by axis or by family)
// and the rest, from the first other line, is the notation. Errors are fine (NotationError or
// es::Error); a crash, a sanitizer report, an exception of another type or a broken invariant
// (abort) is a finding.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/notation/parser.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/local.hpp"
#include "einshard/plan/unary.hpp"

namespace es = einshard;
namespace nt = einshard::notation;

namespace {

// The shape of es::SizeValue (options.hpp needs LibTorch): what expand_sizes reads.
struct SizeValue {
  std::vector<std::int64_t> values;
};

[[noreturn]] void broken(const char* what, std::string_view text) {
  std::fprintf(stderr, "invariant broken: %s\n  notation: %.*s\n", what, static_cast<int>(text.size()),
               text.data());
  std::abort();
}

void require(bool ok, const char* what, std::string_view text) {
  if (!ok) broken(what, text);
}

std::vector<std::int64_t> numbers(std::string_view s) {
  std::vector<std::int64_t> out;
  while (!s.empty() && out.size() < 8) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc()) out.push_back(v);
    const auto comma = s.find(',', static_cast<std::size_t>(end - s.data()));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

/// Every slice of the parsed tables lies inside the source, every spec's ranges inside the tables.
void check_tables(const nt::ExpressionView& v) {
  const auto n = v.source.size();
  auto inside = [&](nt::Slice s) { return std::size_t{s.begin} + s.length <= n; };
  for (const auto& a : v.axes) require(inside(a.name) && inside(a.mesh) && !a.name.empty(), "axis slice", v.source);
  for (const auto& p : v.partials) require(inside(p), "partial slice", v.source);
  require(!v.specs.empty(), "no output spec", v.source);
  for (const auto& s : v.specs) {
    require(std::size_t{s.first_item} + s.item_count <= v.items.size(), "spec items", v.source);
    require(std::size_t{s.first_axis} + s.axis_count <= v.axes.size(), "spec axes", v.source);
    require(std::size_t{s.first_partial} + s.partial_count <= v.partials.size(), "spec partials", v.source);
    require(inside(s.annotation.grad) && inside(s.annotation.init_sync), "annotation slice", v.source);
    for (const auto& i : v.items_of(s)) {
      require(std::size_t{i.first_axis} + i.axis_count <= v.axes.size(), "item axes", v.source);
      require(i.column <= n, "item column", v.source);
    }
  }
}

const es::MeshShape mesh{{"dp", "sp", "tp"}, {2, 3, 2}};

/// A layout written back in notation form parses to the same layout (what plans and messages show
/// is valid notation).
void check_round_trip(const es::plan::Layout& l, std::string_view text) {
  if (l.axes.empty()) return;
  const auto written = l.str();
  const auto source = written + " -> " + written;
  const auto r = nt::parse(source);
  require(r.ok, "a layout's str() does not parse", text);
  const auto v = r.expression.view(source);
  require(es::plan::layout_of(v, v.input(0), 0, mesh) == l, "a layout's str() parses to another layout", text);
}

void plan_distributed(const nt::ExpressionView& v) {
  std::vector<es::plan::Layout> layouts;
  for (const auto& s : v.specs) {
    layouts.push_back(es::plan::layout_of(v, s, 0, mesh));
    check_round_trip(layouts.back(), v.source);
  }
  if (v.input_count() == 1) {
    const auto steps = es::plan::plan_unary(layouts[0], layouts[1], mesh);
    if (!steps.empty()) require(steps.back().after == layouts[1], "the last step does not end in the output layout", v.source);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  nt::FamilyMap families;
  std::map<std::string, SizeValue, std::less<>> sizes;
  while (!input.empty() && (input.front() == '*' || input.front() == '#')) {
    const auto eol = std::min(input.find('\n'), input.size());
    const auto line = input.substr(1, eol - 1);
    const auto eq = std::min(line.find('='), line.size());
    const std::string name(line.substr(0, eq));
    const auto body = eq < line.size() ? line.substr(eq + 1) : std::string_view{};
    if (input.front() == '*') {
      auto& members = families[name];
      for (auto rest = body; !rest.empty();) {
        const auto sp = std::min(rest.find(' '), rest.size());
        if (sp > 0) members.emplace_back(rest.substr(0, sp));
        rest.remove_prefix(std::min(sp + 1, rest.size()));
      }
    } else {
      sizes[name] = {numbers(body)};
    }
    input.remove_prefix(std::min(eol + 1, input.size()));
  }

  std::string text;
  try {
    text = nt::expand_families(input, families);
  } catch (const es::NotationError& e) {
    require(e.column() >= 1 && e.column() <= input.size() + 1, "family error column", input);
    return 0;
  }

  const auto r = nt::parse(text);
  if (!r.ok) {
    require(r.error.column <= text.size(), "diagnostic column past the end", text);
    std::string message;
    nt::write_message(r.error, [&](char c) { message += c; });
    require(!message.empty(), "empty diagnostic", text);
    const es::NotationError e(text, r.error.column + 1, message);
    require(std::string_view(e.what()).find('^') != std::string_view::npos, "no caret", text);
    return 0;
  }
  const auto v = r.expression.view(text);
  check_tables(v);

  try {
    for (const auto& [axis, value] : nt::expand_sizes(sizes, families))
      require(!axis.empty() || sizes.contains(""), "empty expanded axis", text);
  } catch (const es::Error&) {
  }

  try {
    if (es::plan::is_local(v)) {
      const auto plan = es::plan::make_local_plan(v);
      require(plan.inputs.size() == v.input_count(), "local plan inputs", text);
      require(plan.equation.find("->") != std::string::npos, "local plan equation", text);
    } else {
      plan_distributed(v);
    }
  } catch (const es::Error&) {
  }
  return 0;
}
