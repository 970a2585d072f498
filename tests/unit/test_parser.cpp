// The notation parser: structure of what it accepts, and every malformed form it must reject, with
// the message and the column. The compile-time front end is checked with static_asserts; its
// diagnostics are covered by tests/compile_fail.

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "einshard/notation.hpp"

namespace test_parser {

namespace es = einshard;
namespace nt = einshard::notation;

namespace {

struct Parsed {
  std::string source;
  nt::ParseResult result;
  [[nodiscard]] nt::ExpressionView view() const { return result.expression.view(source); }
  [[nodiscard]] std::string message() const {
    std::string m;
    nt::write_message(result.error, [&](char c) { m += c; });
    return m;
  }
};

Parsed parse(std::string s) {
  Parsed p{std::move(s), {}};
  p.result = nt::parse(p.source);
  return p;
}

/// "name" or "name/mesh" for every axis of a spec, groups as "(h p)", ellipsis as "...".
std::vector<std::string> spec_items(const nt::ExpressionView& v, const nt::Spec& s) {
  std::vector<std::string> out;
  for (const auto& item : v.items_of(s)) {
    if (item.kind == nt::ItemKind::ellipsis) {
      out.emplace_back("...");
      continue;
    }
    std::string text;
    for (const auto& a : v.axes_of(item)) {
      if (!text.empty()) text += ' ';
      text += std::string(v.name(a));
      if (!a.mesh.empty()) text += "/" + std::string(v.mesh(a));
    }
    out.push_back(item.kind == nt::ItemKind::group ? "(" + text + ")" : text);
  }
  return out;
}

std::vector<std::string> partials(const nt::ExpressionView& v, const nt::Spec& s) {
  std::vector<std::string> out;
  for (const auto& p : v.partials_of(s)) out.emplace_back(v.text(p));
  return out;
}

using V = std::vector<std::string>;

void require_error(const std::string& expr, const std::string& fragment, std::size_t column) {
  INFO("notation: \"" << expr << "\"");
  const auto p = parse(expr);
  REQUIRE_FALSE(p.result.ok);
  INFO("message: " << p.message());
  CHECK(p.message().find(fragment) != std::string::npos);
  CHECK(p.result.error.column + 1 == column);
}

}  // namespace

// The compile-time front end parses into a structural value usable in constant expressions.
static_assert(es::check<"a b k c, b c l d -> k l d a">());
static_assert(es::check<"x_1 y, y z, z w, w v -> x_1 v">());
static_assert(es::notation::static_expression<"a/sp b/dp, b/dp c -> a/sp c // dp">.view().input_count() == 2);
static_assert(es::notation::static_expression<"b (h p) c -> b h p c">.view().axes.size() == 8);
static_assert(es::notation::static_expression<"loss // (sp, dp) -> loss">.view().partials.size() == 2);

TEST_CASE("parser: contraction structure", "[parser]") {
  const auto p = parse("a b k c, b c l d -> k l d a");
  REQUIRE(p.result.ok);
  const auto v = p.view();
  REQUIRE(v.input_count() == 2);
  CHECK(spec_items(v, v.input(0)) == V{"a", "b", "k", "c"});
  CHECK(spec_items(v, v.input(1)) == V{"b", "c", "l", "d"});
  CHECK(spec_items(v, v.output()) == V{"k", "l", "d", "a"});
}

TEST_CASE("parser: sharding, compound mesh names and whitespace around '/'", "[parser]") {
  const auto p = parse("a/sp b / dp, b/dp c -> a /sp c");
  REQUIRE(p.result.ok);
  const auto v = p.view();
  CHECK(spec_items(v, v.input(0)) == V{"a/sp", "b/dp"});
  CHECK(spec_items(v, v.output()) == V{"a/sp", "c"});
  const auto q = parse("b n/tp-sp1-sp2 h -> b n h // tp-sp1-sp2");
  REQUIRE(q.result.ok);
  CHECK(spec_items(q.view(), q.view().input(0)) == V{"b", "n/tp-sp1-sp2", "h"});
  CHECK(partials(q.view(), q.view().output()) == V{"tp-sp1-sp2"});
}

TEST_CASE("parser: partials, single and lists, with any spacing", "[parser]") {
  for (const std::string s : {"b n h // tp -> b n h", "b n h//tp -> b n h", "b n h //tp->b n h"}) {
    const auto p = parse(s);
    REQUIRE(p.result.ok);
    CHECK(partials(p.view(), p.view().input(0)) == V{"tp"});
    CHECK(p.view().output().partial_count == 0);
  }
  const auto p = parse("loss // ( sp , dp ) -> loss");
  REQUIRE(p.result.ok);
  CHECK(partials(p.view(), p.view().input(0)) == V{"sp", "dp"});
  const auto q = parse("loss // (sp1-sp2,dp-sp1-sp2) -> loss");
  REQUIRE(q.result.ok);
  CHECK(partials(q.view(), q.view().input(0)) == V{"sp1-sp2", "dp-sp1-sp2"});
  const auto r = parse("a/sp b/dp, b/dp c -> a/sp c // dp");
  REQUIRE(r.result.ok);
  CHECK(partials(r.view(), r.view().output()) == V{"dp"});
  const auto shard_to_partial = parse("a/tp b -> a b // tp");
  REQUIRE(shard_to_partial.result.ok);
}

TEST_CASE("parser: factored groups, sharded factors, ellipsis", "[parser]") {
  const auto p = parse("b (h/sp p) c -> b h/sp p c");
  REQUIRE(p.result.ok);
  CHECK(spec_items(p.view(), p.view().input(0)) == V{"b", "(h/sp p)", "c"});
  const auto e = parse("... c, c o -> ... o");
  REQUIRE(e.result.ok);
  CHECK(spec_items(e.view(), e.view().input(0)) == V{"...", "c"});
  CHECK(e.view().input(0).has_ellipsis);
  CHECK_FALSE(e.view().input(1).has_ellipsis);
  const auto g = parse("b ... (h p) -> (b h) ... p");
  REQUIRE(g.result.ok);
  CHECK(spec_items(g.view(), g.view().output()) == V{"(b h)", "...", "p"});
}

TEST_CASE("parser: annotations on inputs", "[parser]") {
  const auto p = parse("b c, out/tp c [param, grad=sp1-sp2:async, init_sync=tp] -> b out/tp");
  REQUIRE(p.result.ok);
  const auto& a = p.view().input(1).annotation;
  CHECK(a.param);
  CHECK(p.view().text(a.grad) == "sp1-sp2:async");
  CHECK(p.view().text(a.init_sync) == "tp");
  CHECK_FALSE(p.view().input(0).annotation.param);
  for (const std::string ok : {"w [param] -> w", "w [param, grad=async] -> w", "w [grad=ddp] -> w",
                               "w [grad=external, init_sync=external] -> w", "w [grad=none] -> w",
                               "w [grad=dp:ddp] -> w", "w [grad=dp-sp:external] -> w",
                               "w [init_sync=none] -> w", "w[ param ,grad = dp ] -> w"}) {
    INFO(ok);
    CHECK(parse(ok).result.ok);
  }
}

TEST_CASE("parser: goes past the original where it was arbitrary", "[parser]") {
  // Underscores in axis and mesh names; trailing whitespace; any number of inputs; > 26 axes.
  CHECK(parse("x_1 y/sp_h -> y/sp_h x_1").result.ok);
  CHECK(parse("a b -> b a   \n").result.ok);
  CHECK(parse("  a b->b a").result.ok);
  const auto many = parse("a b, b c, c d, d e, e f -> a f");
  REQUIRE(many.result.ok);
  CHECK(many.view().input_count() == 5);
  std::string wide, out;
  for (int i = 0; i < 60; ++i) wide += (i ? " x" : "x") + std::to_string(i);
  CHECK(parse(wide + " -> " + wide).result.ok);
  CHECK_FALSE(parse("\xc3\xa4 -> \xc3\xa4").result.ok);  // names are ASCII letters, digits and _
}

TEST_CASE("parser: syntax errors name the fault and its column", "[parser][errors]") {
  require_error("a b c", "expected '->'", 6);
  require_error("a b ->", "expected an output specification after '->'", 7);
  require_error("a b ->   ", "expected an output specification after '->'", 10);
  require_error("-> a", "expected an axis name", 1);
  require_error("a, -> a", "expected an axis name", 4);
  require_error("(a b -> a", "unbalanced '('", 1);
  require_error("a (b c, c -> a", "unbalanced '('", 3);
  require_error("a b) -> a", "unbalanced ')'", 4);
  require_error("a (b (c)) -> a", "nested groups are not allowed", 6);
  require_error("(a ...) -> a", "'...' is not allowed inside a group", 4);
  require_error("a () -> a", "empty group '()'", 3);
  require_error("... a ... -> a", "more than one '...' in one operand", 7);
  require_error("a .. -> a", "expected '...'", 3);
  require_error("a/ -> a", "expected a mesh dimension name after '/'", 4);
  require_error("a/-dp b -> a", "expected a mesh dimension name after '/'", 3);
  require_error("a/dp- b -> a", "empty component in compound mesh name 'dp-'", 6);
  require_error("a/dp--sp b -> a", "empty component in compound mesh name 'dp-'", 6);
  require_error("a/dp-dp b -> a", "repeated component 'dp' in compound mesh name", 6);
  require_error("a-b -> a", "axis names cannot contain '-'", 2);
  require_error("a // -> a", "expected a mesh dimension name after '//'", 6);
  require_error("a // () -> a", "expected a mesh dimension name after '//'", 7);
  require_error("a // (sp dp) -> a", "expected ',' or ')'", 10);
  require_error("a // (sp, sp) -> a", "repeated partial mesh dimension 'sp'", 11);
  require_error("a $ b -> a", "unexpected character '$'", 3);
  // A character outside ASCII is shown whole, not as its first byte.
  require_error("\xc3\xa9 -> \xc3\xa9", "unexpected character '\xc3\xa9'", 1);
  require_error("a -> a, b", "unexpected ',' after the output specification", 7);
  require_error("a -> a -> a", "unexpected '->' after the output specification", 8);
  require_error("a -> a [param]", "annotations are only allowed on input operands", 8);
  require_error("a [async] -> a", "unknown annotation item 'async'", 4);
  require_error("a [] -> a", "expected 'param', 'grad=' or 'init_sync='", 4);
  require_error("a [param, param] -> a", "duplicate tensor annotation 'param'", 11);
  require_error("a [grad=dp, grad=sp] -> a", "duplicate tensor annotation 'grad'", 13);
  require_error("a [param grad=dp] -> a", "expected ',' or ']'", 10);
  require_error("a [grad dp] -> a", "expected '=' after 'grad'", 9);
  require_error("a [grad=] -> a", "invalid grad annotation: expected a value", 9);
  require_error("a [grad=async:ddp] -> a", "grad annotation suffix requires an explicit mesh group", 9);
  require_error("a [grad=dp:bogus] -> a", "unknown grad annotation suffix 'bogus'", 12);
  require_error("a [grad=:async] -> a", "invalid grad annotation ':async'", 9);
  require_error("a [grad=dp:] -> a", "invalid grad annotation 'dp:'", 9);
  require_error("a [grad=dp-] -> a", "empty component in compound mesh name", 12);
  require_error("a [init_sync=tp:async] -> a", "init_sync annotations do not accept suffixes", 14);
  require_error("a *fam -> a", "family reference '*fam' needs the run-time form", 3);
  require_error("a (b *fam) -> a", "family reference '*fam' needs the run-time form", 6);
}

TEST_CASE("parser: semantic errors", "[parser][errors]") {
  require_error("a b -> a d", "output axis 'd' does not appear in any input", 10);
  require_error("a b -> a b a", "output axis 'a' appears more than once", 12);
  require_error("a (b c) -> (a b) a", "output axis 'a' appears more than once", 18);
  require_error("a b -> ... a", "the output has '...' but no input does", 8);
  require_error("a/dp a/sp -> a/dp", "axis 'a' appears with two different shardings in one operand", 6);
  require_error("a/tp b // tp -> a b", "mesh dimension 'tp' both shards an axis and is a partial", 11);
  require_error("a/tp-sp b // (dp, sp) -> a b", "mesh dimension 'sp' both shards an axis", 19);
}

TEST_CASE("parser: results are independent values (no shared state between parses)", "[parser]") {
  auto first = parse("a b -> b a");
  first.result.expression.axes.clear();  // mutating one result cannot affect another
  const auto second = parse("a b -> b a");
  REQUIRE(second.result.ok);
  CHECK(second.view().axes.size() == 4);
}

TEST_CASE("NotationError quotes the expression with a caret", "[parser][errors]") {
  const es::NotationError e("a b c", 6, "expected '->'");
  const std::string what = e.what();
  CHECK(what.find("expected '->' (column 6)") != std::string::npos);
  CHECK(what.find("\n  a b c\n       ^") != std::string::npos);
  CHECK(e.column() == 6);
  CHECK(e.expression() == "a b c");
  CHECK(dynamic_cast<const es::Error*>(&e) != nullptr);  // one hierarchy
}

}  // namespace test_parser
