// Family expansion (run-time notations) and sizes given by family: pure text and map work.

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "einshard/notation/families.hpp"

namespace test_families {

namespace nt = einshard::notation;

namespace {

struct Size {
  std::vector<std::int64_t> values;
};
using SizeMap = std::map<std::string, Size, std::less<>>;

const nt::FamilyMap families{{"spatial", {"h", "w"}},
                             {"window", {"wh", "ww"}},
                             {"cube", {"x", "y", "z"}},
                             {"sharded", {"h/sp", "w/dp"}},
                             {"s_p", {"a", "b"}}};

}  // namespace

TEST_CASE("families: references expand to their members", "[families]") {
  CHECK(nt::expand_families("b *spatial c -> b c *spatial", families) == "b h w c -> b c h w");
  CHECK(nt::expand_families("b (*spatial) c -> b c", families) == "b (h w) c -> b c");
  CHECK(nt::expand_families("(b *spatial) t -> b", families) == "(b h w) t -> b");
  CHECK(nt::expand_families("b *sharded -> b *sharded", families) == "b h/sp w/dp -> b h/sp w/dp");
  // Underscores are part of family names (the original read *s_p as *s followed by "_p").
  CHECK(nt::expand_families("*s_p -> *s_p", families) == "a b -> a b");
}

TEST_CASE("families: zips become one group per position", "[families]") {
  CHECK(nt::expand_families("b t [*spatial *window] c -> (b *spatial) t *window c", families) ==
        "b t (h wh) (w ww) c -> (b h w) t wh ww c");
  CHECK(nt::expand_families("[*cube *cube] -> *cube", families) == "(x x) (y y) (z z) -> x y z");
}

TEST_CASE("families: annotation brackets are left alone", "[families]") {
  const std::string s = "b c, o c [param, grad=dp:async, init_sync=tp] -> b *spatial";
  CHECK(nt::expand_families(s, families) ==
        "b c, o c [param, grad=dp:async, init_sync=tp] -> b h w");
  CHECK(nt::expand_families("w [ grad = dp ] -> w", families) == "w [ grad = dp ] -> w");
}

TEST_CASE("families: errors point at the reference", "[families][errors]") {
  auto fails = [](const std::string& expr, const std::string& fragment, std::size_t column) {
    INFO(expr);
    try {
      (void)nt::expand_families(expr, families);
      FAIL("no error");
    } catch (const einshard::NotationError& e) {
      INFO(e.what());
      CHECK(e.message().find(fragment) != std::string::npos);
      CHECK(e.column() == column);
    }
  };
  fails("b *nope c -> b c", "Unknown axis family 'nope'", 3);
  fails("b [*spatial *nope] -> b", "Unknown axis family 'nope'", 13);
  fails("b [*spatial c] -> b", "'[*spatial c]' may hold only family references ('*name'), but 'c' is not one", 13);
  // What was written is named: a lone '*', a zipped group of plain names.
  fails("a* -> a", "expected a family name after '*', found ' '", 2);
  fails("a [foo] -> a", "'[foo]' may hold only family references ('*name'), but 'foo' is not one", 4);
  fails("b [*spatial *cube] -> b", "Zipped axis families must have matching lengths", 3);
  fails("b [ ] -> b", "empty zipped axis-family group", 3);
}

TEST_CASE("families: sizes by family expand per member", "[families]") {
  const auto s = nt::expand_sizes(SizeMap{{"window", {{4, 5}}}, {"p", {{3}}}}, families);
  CHECK(s.at("wh") == 4);
  CHECK(s.at("ww") == 5);
  CHECK(s.at("p") == 3);
  CHECK(s.size() == 3);
  const auto b = nt::expand_sizes(SizeMap{{"cube", {{2}}}}, families);  // one value for all
  CHECK((b.at("x") == 2 && b.at("y") == 2 && b.at("z") == 2));
  const auto m = nt::expand_sizes(SizeMap{{"sharded", {{6, 7}}}}, families);  // "/mesh" stripped
  CHECK((m.at("h") == 6 && m.at("w") == 7));
  const auto same = nt::expand_sizes(SizeMap{{"spatial", {{8, 8}}}, {"h", {{8}}}}, families);
  CHECK(same.at("h") == 8);
}

TEST_CASE("families: size errors", "[families][errors]") {
  CHECK_THROWS_WITH(nt::expand_sizes(SizeMap{{"window", {{4, 4, 4}}}}, families),
                    Catch::Contains("Size family 'window' has 3 values for 2 axes"));
  CHECK_THROWS_WITH(nt::expand_sizes(SizeMap{{"spatial", {{8, 8}}}, {"h", {{4}}}}, families),
                    Catch::Contains("Conflicting size for expanded axis 'h'"));
  CHECK_THROWS_WITH(nt::expand_sizes(SizeMap{{"p", {{2, 2}}}}, families),
                    Catch::Contains("'p' is not a family"));
  CHECK_THROWS_AS(nt::expand_sizes(SizeMap{{"p", {{2, 2}}}}, families), einshard::Error);
}

}  // namespace test_families
