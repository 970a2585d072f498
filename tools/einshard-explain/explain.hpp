#pragma once
/// @file
/// einshard-explain's engine: the plan a notation runs on a mesh of a given shape, from the pure
/// planners (plan/unary.hpp, plan/binary.hpp, plan/cost.hpp) alone, so it needs neither MPI nor
/// tensors. Costs are the planner's own rank-independent model (even shards), the numbers it
/// chooses by; `es::explain` on live tensors reports each rank's exact traffic instead.
///
/// Kept apart from the library (tools/), and callable on strings, so the command line is a thin
/// wrapper and tests can drive the engine in-process.

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/ops/einshard.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/binary.hpp"
#include "einshard/plan/cost.hpp"
#include "einshard/plan/layout.hpp"
#include "einshard/plan/local.hpp"
#include "einshard/plan/step.hpp"
#include "einshard/plan/unary.hpp"

namespace einshard::tools {

/// A command line the user got wrong (not the notation): exit status 64 (EX_USAGE).
class UsageError : public Error {
 public:
  using Error::Error;
};

using GlobalSizes = std::map<std::string, std::int64_t, std::less<>>;

struct ExplainRequest {
  std::string notation;
  MeshShape mesh;
  GlobalSizes sizes;        ///< global extent of every axis; empty: every axis assumed `assumed_size`
  notation::FamilyMap families;
  std::int64_t element = 4;  ///< bytes per element
  std::string dtype = "float32";
  Policy policy = Policy::training;
  bool json = false;  ///< one JSON object instead of the text report
};

inline constexpr std::int64_t assumed_size = 1024;

inline constexpr Policy all_policies[] = {Policy::training, Policy::inference, Policy::memory,
                                          Policy::communication, Policy::latency};

namespace detail {

/// "a=1,b=2" (also "a=1 b=2") as ordered (name, value) pairs.
inline std::vector<std::pair<std::string, std::string>> key_values(std::string_view text,
                                                                   std::string_view option) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    auto end = text.find_first_of(", ", begin);
    if (end == std::string_view::npos) end = text.size();
    const auto item = notation::detail::trim(text.substr(begin, end - begin));
    if (!item.empty()) {
      const auto eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
        throw UsageError("einshard-explain: " + std::string(option) + " expects name=value items, found '" +
                         std::string(item) + "'");
      out.emplace_back(std::string(notation::detail::trim(item.substr(0, eq))),
                       std::string(notation::detail::trim(item.substr(eq + 1))));
    }
    begin = end + 1;
  }
  if (out.empty())
    throw UsageError("einshard-explain: " + std::string(option) + " expects name=value items, found nothing");
  return out;
}

inline std::int64_t positive(const std::string& value, const std::string& what, std::int64_t min = 1) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || v < min)
    throw UsageError("einshard-explain: " + what + " expects an integer >= " + std::to_string(min) +
                     ", found '" + value + "'");
  return v;
}

inline std::string bytes(double b) {
  char buf[64];
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = b;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  else
    std::snprintf(buf, sizeof buf, "%.0f B (%.3g %s)", b, v, unit[u]);
  return buf;
}

inline std::string fixed(double v, const char* format = "%.3e") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

inline std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

inline std::string mesh_line(const MeshShape& m) {
  std::string out;
  int ranks = 1;
  for (std::size_t d = 0; d < m.names.size(); ++d) {
    out += (d ? ", " : "") + m.names[d] + "=" + std::to_string(m.sizes[d]);
    ranks *= m.sizes[d];
  }
  return out + " (" + std::to_string(ranks) + " ranks)";
}

inline std::string holds(const std::string& who, const plan::Layout& l, const GlobalSizes& g,
                         const MeshShape& mesh, std::int64_t element) {
  return "  " + pad(who, 10) + pad(l.str(), 28) + " " + bytes(plan::average_bytes(l, g, mesh, element)) + "\n";
}

}  // namespace detail

/// Parses the command line (without the program name). `--help` gives a request with an empty
/// notation.
inline ExplainRequest parse_arguments(const std::vector<std::string>& args) {
  ExplainRequest r;
  bool have_notation = false, have_mesh = false, have_dtype = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw UsageError("einshard-explain: " + a + " expects a value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") return ExplainRequest{};
    if (a == "--mesh") {
      for (const auto& [name, size] : detail::key_values(value(), "--mesh")) {
        for (const auto& n : r.mesh.names)
          if (n == name) throw UsageError("einshard-explain: --mesh names '" + name + "' twice");
        if (name.find_first_of("-/() ") != std::string::npos)
          throw UsageError("einshard-explain: --mesh dimension names cannot contain '-', '/', '(' or ')', found '" +
                           name + "'");
        r.mesh.names.push_back(name);
        r.mesh.sizes.push_back(static_cast<int>(detail::positive(size, "--mesh " + name)));
      }
      have_mesh = true;
    } else if (a == "--shape" || a == "--size" || a == "--sizes") {
      for (const auto& [axis, size] : detail::key_values(value(), a)) {
        if (r.sizes.count(axis)) throw UsageError("einshard-explain: " + a + " gives axis '" + axis + "' twice");
        r.sizes[axis] = detail::positive(size, a + " " + axis, 0);
      }
    } else if (a == "--family") {  // --family spatial=h,w : one family per option
      const auto& text = value();
      const auto eq = text.find('=');
      if (eq == std::string::npos || eq == 0)
        throw UsageError("einshard-explain: --family expects name=member,member..., found '" + text + "'");
      auto& members = r.families[text.substr(0, eq)];
      std::size_t b = eq + 1;
      while (b <= text.size()) {
        auto e = text.find(',', b);
        if (e == std::string::npos) e = text.size();
        if (e > b) members.push_back(text.substr(b, e - b));
        b = e + 1;
      }
    } else if (a == "--dtype") {
      static const std::map<std::string, std::int64_t, std::less<>> sizes = {
          {"float16", 2}, {"bfloat16", 2}, {"float32", 4}, {"float64", 8}, {"int32", 4},
          {"int64", 8},   {"complex64", 8}, {"complex128", 16}};
      const auto& d = value();
      const auto it = sizes.find(d);
      if (it == sizes.end())
        throw UsageError("einshard-explain: --dtype expects float16, bfloat16, float32, float64, int32, int64, "
                         "complex64 or complex128, found '" + d + "'");
      r.dtype = d;
      r.element = it->second;
      have_dtype = true;
    } else if (a == "--element-bytes") {
      r.element = detail::positive(value(), "--element-bytes");
      if (!have_dtype) r.dtype = std::to_string(r.element) + "-byte elements";
    } else if (a == "--json") {
      r.json = true;
    } else if (a == "--policy") {
      const auto& p = value();
      bool found = false;
      for (auto q : all_policies)
        if (p == policy_name(q)) r.policy = q, found = true;
      if (!found)
        throw UsageError("einshard-explain: --policy expects training, inference, memory, communication or "
                         "latency, found '" + p + "'");
    } else if (!a.empty() && a[0] == '-' && a.size() > 1) {
      throw UsageError("einshard-explain: unknown option '" + a + "' (see --help)");
    } else {
      if (have_notation) throw UsageError("einshard-explain: one notation expected, found a second: '" + a + "'");
      r.notation = a;
      have_notation = true;
    }
  }
  if (!have_notation) throw UsageError("einshard-explain: no notation given (see --help)");
  if (!have_mesh) throw UsageError("einshard-explain: --mesh is required, e.g. --mesh dp=2,tp=4");
  return r;
}

inline const char* usage_text() {
  return "usage: einshard-explain NOTATION --mesh NAME=SIZE[,NAME=SIZE...] [options]\n"
         "\n"
         "Prints the plan every rank runs for a distributed einshard notation on a mesh of this shape:\n"
         "the steps, bytes per rank forward and backward, collectives, peak memory, and the\n"
         "alternatives the planner weighed with their scores under each policy. No MPI, no tensors.\n"
         "\n"
         "  --mesh dp=2,tp=4          mesh dimensions and sizes (required)\n"
         "  --shape b=8,n=128,...     global size of every axis (also --size); without it every\n"
         "                            axis is taken as 1024\n"
         "  --dtype float32           element type (float16, bfloat16, float32, float64, int32, int64,\n"
         "                            complex64, complex128), or --element-bytes N\n"
         "  --policy training         the policy whose choice is shown (training, inference, memory,\n"
         "                            communication, latency)\n"
         "  --family spatial=h,w      an axis family for '*spatial' (repeatable)\n"
         "  --json                    one JSON object (steps, totals, alternatives) instead of text\n"
         "\n"
         "exit status: 0 plan printed, 1 no plan (the planner's error), 2 malformed notation,\n"
         "64 bad command line\n"
         "\n"
         "example: einshard-explain \"b n c, h/tp c -> b n h/tp\" --mesh dp=2,tp=4 --shape b=8,n=128,c=1024,h=4096\n";
}

/// One row of the plan: a step every rank runs, with the model's per-rank cost of it.
struct ExplainedStep {
  std::string who;   ///< "input 1", "input 2", "local" (the einsum), "result", or "" (unary)
  std::string name;  ///< plan::step_name, or "rank_local_einsum"
  std::string group, axis;
  plan::Layout before, after;
  plan::Estimate cost;
};

struct ExplainedAlternative {
  std::string compute;
  plan::Estimate estimate;
  std::vector<double> scores;  ///< one per `all_policies`
  std::vector<bool> chosen;    ///< whether each policy picks it
};

/// What a request plans to, as data (the text report and the tests read this).
struct Explained {
  std::string source;  ///< the notation after family expansion
  GlobalSizes sizes;
  bool assumed = false;  ///< sizes were not given
  std::vector<plan::Layout> inputs;
  plan::Layout output;
  bool local = false;
  std::string compute, equation;  ///< contractions: the chosen compute layout and local einsum
  std::vector<ExplainedStep> steps;
  plan::Estimate total;
  std::vector<ExplainedAlternative> alternatives;  ///< contractions, cheapest under the request's policy first
};

/// Plans a request. Throws `NotationError` for a malformed notation and `Error` when there is no
/// plan (unknown mesh dimension, unsupported form, sizes missing).
inline Explained explain_request(const ExplainRequest& r) {
  const bool expand = r.notation.find('*') != std::string::npos || r.notation.find('[') != std::string::npos;
  const auto compiled = einshard::detail::compile_runtime(
      expand ? notation::expand_families(r.notation, r.families) : r.notation, r.notation);
  const auto e = compiled->view();
  const auto& mesh = r.mesh;
  Explained x;
  x.source = compiled->source;
  for (const auto& s : e.specs)
    if (s.has_ellipsis)
      throw Error("einshard-explain: '...' stands for axes whose number comes from the tensors; name "
                  "them to explain the plan (found '...' in '" + x.source + "')");
  for (std::size_t i = 0; i < e.input_count(); ++i) x.inputs.push_back(plan::layout_of(e, e.input(i), 0, mesh));
  x.output = plan::layout_of(e, e.output(), 0, mesh);

  // Global sizes: given for every axis, or all assumed.
  std::vector<std::string> missing;
  for (const auto& a : x.output.axes) x.sizes.emplace(a.axis, 0);
  for (const auto& l : x.inputs)
    for (const auto& a : l.axes) x.sizes.emplace(a.axis, 0);
  x.assumed = r.sizes.empty();
  for (auto& [axis, size] : x.sizes) {
    if (x.assumed) {
      size = assumed_size;
    } else if (auto it = r.sizes.find(axis); it != r.sizes.end()) {
      size = it->second;
    } else {
      missing.push_back(axis);
    }
  }
  for (const auto& [axis, size] : r.sizes)
    if (!x.sizes.count(axis))
      throw Error("einshard-explain: --shape gives axis '" + axis + "', which '" + x.source + "' does not have");
  if (!missing.empty()) {
    std::string m;
    for (const auto& a : missing) m += (m.empty() ? "" : ", ") + a;
    throw Error("einshard-explain: --shape gives no size for axis " + m + " of '" + x.source +
                "' (give every axis, or none to assume " + std::to_string(assumed_size) + ")");
  }
  x.local = compiled->local;
  if (x.local) return x;

  auto add = [&](const std::string& who, const std::vector<plan::Step>& steps) {
    for (const auto& s : steps) {
      const auto cost = plan::estimate({s}, x.sizes, mesh, r.element);
      x.total += cost;
      x.steps.push_back({who, plan::step_name(s.kind), s.group.name(), s.axis, s.before, s.after, cost});
    }
  };
  if (x.inputs.size() == 1) {
    add("", plan::plan_unary(x.inputs[0], x.output, mesh));
    return x;
  }
  if (x.inputs.size() > 2)
    throw Error("einshard-explain: '" + x.source + "' has " + std::to_string(x.inputs.size()) +
                " inputs; the order in which three or more operands are contracted is chosen at run time, "
                "so explain them pairwise or with es::explain on the tensors");

  auto plan_for = [&](Policy p) {
    return plan::plan_binary(x.inputs[0], x.inputs[1], x.output, mesh, x.sizes, r.element, p);
  };
  const auto chosen = plan_for(r.policy);
  const auto& c = chosen.chosen;
  x.compute = c.compute.str();
  x.equation = chosen.equation;
  add("input 1", c.x_steps);
  add("input 2", c.y_steps);
  plan::Estimate einsum;
  einsum.peak_bytes = plan::average_bytes(c.result, x.sizes, mesh, r.element);
  einsum.flops = c.estimate.flops;
  x.total += einsum;
  x.steps.push_back({"local", "rank_local_einsum", "", "", {}, c.result, einsum});
  add("result", c.z_steps);

  std::vector<std::string> picks;
  for (auto p : all_policies) picks.push_back(p == r.policy ? x.compute : plan_for(p).chosen.compute.str());
  for (const auto& a : chosen.alternatives) {
    ExplainedAlternative alt{a.compute.str(), a.estimate, {}, {}};
    for (std::size_t i = 0; i < std::size(all_policies); ++i) {
      alt.scores.push_back(plan::score(a.estimate, all_policies[i]));
      alt.chosen.push_back(picks[i] == alt.compute);
    }
    x.alternatives.push_back(std::move(alt));
  }
  return x;
}

/// The report einshard-explain prints.
inline std::string explain_text(const ExplainRequest& r) {
  using detail::bytes, detail::fixed, detail::pad;
  const auto x = explain_request(r);
  const auto& mesh = r.mesh;
  std::string out = "notation: " + r.notation + "\n";
  if (x.source != r.notation) out += "expanded: " + x.source + "\n";
  out += "mesh: " + detail::mesh_line(mesh) + "\n";
  out += "sizes:";
  for (const auto& [axis, size] : x.sizes) out += " " + axis + "=" + std::to_string(size);
  out += x.assumed ? "  (assumed: no --shape given)\n" : "\n";
  out += "dtype: " + r.dtype + " (" + std::to_string(r.element) + " bytes), policy: " + policy_name(r.policy) + "\n";
  out += "costs: the planner's model per rank, shards taken as even\n\n";

  out += "each rank holds:\n";
  for (std::size_t i = 0; i < x.inputs.size(); ++i)
    out += detail::holds("input " + std::to_string(i + 1), x.inputs[i], x.sizes, mesh, r.element);
  out += detail::holds("output", x.output, x.sizes, mesh, r.element);
  out += "\n";
  if (x.local) {
    out += "plan: rank-local einsum on every rank's shards; no communication, forward or backward\n";
    return out;
  }

  out += "every rank runs";
  if (!x.compute.empty()) out += " (compute layout " + x.compute + ")";
  out += ":\n";
  int index = 0;
  for (const auto& s : x.steps) {
    out += "  " + pad(std::to_string(++index) + ".", 4) + pad(s.who, 10) + s.name;
    if (s.name == "rank_local_einsum") {
      out += " '" + x.equation + "'\n        ->  " + s.after.str() + "\n        " + fixed(s.cost.flops) +
             " flops forward, " + fixed(2 * s.cost.flops) + " backward; output " + bytes(s.cost.peak_bytes) + "\n";
      continue;
    }
    std::string where = s.group;
    if (!s.axis.empty()) where += (where.empty() ? "" : ", ") + s.axis;
    if (!where.empty()) out += " [" + where + "]";
    out += "\n        " + s.before.str() + "  ->  " + s.after.str() + "\n";
    out += "        forward " + bytes(s.cost.forward_bytes) + ", " + std::to_string(s.cost.forward_collectives) +
           " collective(s); backward " + bytes(s.cost.backward_bytes) + ", " +
           std::to_string(s.cost.backward_collectives) + " collective(s); peak " + bytes(s.cost.peak_bytes) + "\n";
  }
  if (x.steps.empty()) out += "  (nothing: the layouts are the same)\n";
  out += "\ntotal per rank: forward " + bytes(x.total.forward_bytes) + " in " +
         std::to_string(x.total.forward_collectives) + " collective(s); backward " + bytes(x.total.backward_bytes) +
         " in " + std::to_string(x.total.backward_collectives) + " collective(s); peak extra memory " +
         bytes(x.total.peak_bytes) + "\n";
  if (x.inputs.size() == 1) return out + "alternatives: none (a layout change has one plan)\n";

  out += "\nalternatives (" + std::to_string(x.alternatives.size()) + ", cheapest under " + policy_name(r.policy) +
         " first; scores: seconds, memory: bytes; '*' marks each policy's choice):\n";
  out += "  " + pad("compute layout", 30);
  for (auto p : all_policies) out += pad(policy_name(p), 15);
  out += pad("fwd bytes", 13) + pad("bwd bytes", 13) + pad("coll", 6) + "peak bytes\n";
  for (const auto& a : x.alternatives) {
    out += "  " + pad(a.compute, 30);
    for (std::size_t i = 0; i < a.scores.size(); ++i)
      out += pad((a.chosen[i] ? "*" : " ") + fixed(a.scores[i]), 15);
    out += pad(fixed(a.estimate.forward_bytes, "%.0f"), 13) + pad(fixed(a.estimate.backward_bytes, "%.0f"), 13) +
           pad(std::to_string(a.estimate.forward_collectives + a.estimate.backward_collectives), 6) +
           fixed(a.estimate.peak_bytes, "%.0f") + "\n";
  }
  return out;
}

namespace detail {

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

inline std::string json_cost(const plan::Estimate& e) {
  return "{\"forward_bytes\":" + fixed(e.forward_bytes, "%.0f") + ",\"backward_bytes\":" +
         fixed(e.backward_bytes, "%.0f") + ",\"forward_collectives\":" + std::to_string(e.forward_collectives) +
         ",\"backward_collectives\":" + std::to_string(e.backward_collectives) + ",\"peak_bytes\":" +
         fixed(e.peak_bytes, "%.0f") + ",\"flops\":" + fixed(e.flops, "%.17g") + "}";
}

}  // namespace detail

/// The same plan as one JSON object (for scripts): notation, mesh, sizes, steps with their costs,
/// totals and, for contractions, every alternative's scores by policy.
inline std::string explain_json(const ExplainRequest& r) {
  using detail::json_string;
  const auto x = explain_request(r);
  std::string out = "{\"notation\":" + json_string(r.notation) + ",\"expanded\":" + json_string(x.source) +
                    ",\"mesh\":{";
  for (std::size_t d = 0; d < r.mesh.names.size(); ++d)
    out += (d ? "," : "") + json_string(r.mesh.names[d]) + ":" + std::to_string(r.mesh.sizes[d]);
  out += "},\"sizes\":{";
  bool first = true;
  for (const auto& [axis, size] : x.sizes) {
    out += (first ? "" : ",") + json_string(axis) + ":" + std::to_string(size);
    first = false;
  }
  out += "},\"sizes_assumed\":" + std::string(x.assumed ? "true" : "false") + ",\"element_bytes\":" +
         std::to_string(r.element) + ",\"policy\":" + json_string(policy_name(r.policy)) +
         ",\"local\":" + (x.local ? "true" : "false") + ",\"compute\":" + json_string(x.compute) +
         ",\"equation\":" + json_string(x.equation) + ",\"steps\":[";
  for (std::size_t i = 0; i < x.steps.size(); ++i) {
    const auto& s = x.steps[i];
    out += (i ? "," : "") + std::string("{\"operand\":") + json_string(s.who) + ",\"name\":" + json_string(s.name) +
           ",\"group\":" + json_string(s.group) + ",\"axis\":" + json_string(s.axis) + ",\"before\":" +
           json_string(s.before.str()) + ",\"after\":" + json_string(s.after.str()) + ",\"cost\":" +
           detail::json_cost(s.cost) + "}";
  }
  out += "],\"total\":" + detail::json_cost(x.total) + ",\"alternatives\":[";
  for (std::size_t i = 0; i < x.alternatives.size(); ++i) {
    const auto& a = x.alternatives[i];
    out += (i ? "," : "") + std::string("{\"compute\":") + json_string(a.compute) + ",\"estimate\":" +
           detail::json_cost(a.estimate) + ",\"scores\":{";
    for (std::size_t k = 0; k < a.scores.size(); ++k)
      out += (k ? "," : "") + json_string(policy_name(all_policies[k])) + ":" + detail::fixed(a.scores[k], "%.17g");
    out += "},\"chosen_by\":[";
    bool any = false;
    for (std::size_t k = 0; k < a.chosen.size(); ++k)
      if (a.chosen[k]) {
        out += (any ? "," : "") + json_string(policy_name(all_policies[k]));
        any = true;
      }
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace einshard::tools
