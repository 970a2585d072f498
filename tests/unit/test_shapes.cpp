// The split rule and the three forms of `shapes` metadata.

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "einshard/shapes.hpp"

namespace test_shapes {

namespace es = einshard;
using S = std::vector<std::int64_t>;

TEST_CASE("split rule: the original's examples", "[shapes]") {
  CHECK(es::compute_split_shapes(10, 4) == S{3, 3, 3, 1});
  CHECK(es::compute_split_shapes(9, 4) == S{2, 2, 2, 3});
  CHECK(es::compute_split_shapes(3, 4) == S{0, 0, 0, 3});
  CHECK(es::compute_split_shapes(17, 8) == S{2, 2, 2, 2, 2, 2, 2, 3});
  CHECK(es::compute_split_shapes(25, 8) == S{3, 3, 3, 3, 3, 3, 3, 4});
  CHECK(es::compute_split_shapes(7, 2) == S{4, 3});
  CHECK(es::compute_split_shapes(8, 4) == S{2, 2, 2, 2});
  CHECK(es::compute_split_shapes(0, 3) == S{0, 0, 0});
  CHECK(es::compute_split_shapes(5, 1) == S{5});
}

TEST_CASE("split rule: always a partition with no negative part", "[shapes]") {
  for (std::int64_t n = 0; n < 70; ++n)
    for (std::int64_t p = 1; p <= 9; ++p) {
      const auto s = es::compute_split_shapes(n, p);
      INFO(n << " over " << p);
      REQUIRE(static_cast<std::int64_t>(s.size()) == p);
      CHECK(std::accumulate(s.begin(), s.end(), std::int64_t{0}) == n);
      for (auto v : s) CHECK(v >= 0);
    }
  CHECK_THROWS_AS(es::compute_split_shapes(4, 0), es::Error);
  CHECK_THROWS_AS(es::compute_split_shapes(-1, 2), es::Error);
}

TEST_CASE("shapes: the three forms resolve", "[shapes]") {
  CHECK_FALSE(es::Shapes{}.resolve("sp", "a", 4).has_value());
  const es::Shapes flat(S{1, 2, 3});
  CHECK(*flat.resolve("sp", "a", 3) == S{1, 2, 3});
  CHECK(*flat.resolve("dp", "b", 3) == S{1, 2, 3});
  const es::Shapes by_dim{{"sp", S{4, 4}}, {"dp", {3, 1, 0}}};
  CHECK(*by_dim.resolve("sp", "x", 2) == S{4, 4});
  CHECK(*by_dim.resolve("dp", "y", 3) == S{3, 1, 0});
  const es::Shapes by_axis{{"dp", {{"a", S{2, 1}}, {"b", S{0, 5}}}}};
  CHECK(*by_axis.resolve("dp", "a", 2) == S{2, 1});
  CHECK(*by_axis.resolve("dp", "b", 2) == S{0, 5});
}

TEST_CASE("shapes: built in a loop, they resolve as the brace forms do", "[shapes]") {
  es::Shapes by_dim;
  const std::vector<std::pair<std::string, S>> dims{{"sp", S{4, 4}}, {"dp", S{3, 1, 0}}};
  for (const auto& [dim, sizes] : dims) by_dim[dim] = sizes;
  CHECK(*by_dim.resolve("sp", "x", 2) == S{4, 4});
  CHECK(*by_dim.resolve("dp", "y", 3) == S{3, 1, 0});
  CHECK(by_dim.key() == es::Shapes{{"sp", S{4, 4}}, {"dp", {3, 1, 0}}}.key());
  es::Shapes by_axis;
  for (const char* axis : {"a", "b"}) by_axis["dp"].by_axis[axis] = S{2, 1};
  CHECK(*by_axis.resolve("dp", "a", 2) == S{2, 1});
  CHECK(*by_axis.resolve("dp", "b", 2) == S{2, 1});
  CHECK_THROWS_WITH(by_axis.resolve("dp", "c", 2), Catch::Contains("Missing split shapes for axis 'c'"));
  // One list for every dimension takes no per-dimension entry.
  es::Shapes flat(S{1, 2});
  CHECK_THROWS_AS(flat["sp"], es::Error);
}

TEST_CASE("shapes: missing and malformed metadata", "[shapes][errors]") {
  const es::Shapes by_dim{{"sp", S{4, 4}}};
  CHECK_THROWS_WITH(by_dim.resolve("dp", "a", 2),
                    Catch::Contains("Missing split shapes for mesh dimension 'dp'"));
  const es::Shapes by_axis{{"dp", {{"a", S{2, 1}}}}};
  CHECK_THROWS_WITH(by_axis.resolve("dp", "b", 2),
                    Catch::Contains("Missing split shapes for axis 'b' on mesh dimension 'dp'"));
  CHECK_THROWS_WITH(by_dim.resolve("sp", "a", 3), Catch::Contains("have 2 entries") &&
                                                      Catch::Contains("has 3 ranks"));
  const es::Shapes negative(S{3, -1});
  CHECK_THROWS_WITH(negative.resolve("sp", "a", 2), Catch::Contains("negative"));
}

}  // namespace test_shapes
