// Mesh groups as values: `MeshShape::group` resolves a group's text once; everything after is bit
// operations on the `Group`, with its canonical name kept for messages and plans.

#include <catch2/catch.hpp>

#include <array>
#include <string>

#include "einshard/mesh_shape.hpp"

namespace test_group {

namespace es = einshard;

namespace {
const es::MeshShape mesh{{"dp", "sp", "tp"}, {2, 3, 4}};
}

TEST_CASE("group: any spelling resolves to one value with its canonical name", "[group]") {
  const auto a = mesh.group("tp-dp"), b = mesh.group("dp-tp");
  CHECK(a == b);
  CHECK(a.name() == "dp-tp");
  CHECK(a == "dp-tp");
  CHECK(a.bits() == 0b101u);
  CHECK(mesh.size(a) == 8);
  CHECK(mesh.canonical("sp-dp-tp") == "dp-sp-tp");
  const auto none = mesh.group("");
  CHECK(none.empty());
  CHECK(none == es::Group());
  CHECK(none.name().empty());
  CHECK(mesh.size(none) == 1);
}

TEST_CASE("group: set operations are the mesh dimensions'", "[group]") {
  const auto dp = mesh.group("dp"), sp = mesh.group("sp"), dpsp = mesh.group("sp-dp");
  CHECK(dp.overlaps(dpsp));
  CHECK_FALSE(dp.overlaps(sp));
  CHECK(dp.within(dpsp));
  CHECK_FALSE(dpsp.within(dp));
  CHECK(es::Group().within(dp));
  CHECK(mesh.unite(dp, sp) == dpsp);
  CHECK(mesh.unite(dp, sp).name() == "dp-sp");
  CHECK(mesh.minus(dpsp, dp) == sp);
  CHECK(mesh.minus(dpsp, dp).name() == "sp");
  CHECK(mesh.minus(dp, dpsp).empty());
  CHECK(dpsp.contains(0));
  CHECK(dpsp.contains(1));
  CHECK_FALSE(dpsp.contains(2));
  CHECK(mesh.components("tp-dp") == std::vector<int>{0, 2});
}

TEST_CASE("group: a rank's coordinate is row-major over the group's dimensions", "[group]") {
  const std::array<int, 3> coords{1, 2, 3};
  CHECK(mesh.coordinate(mesh.group("dp"), coords) == 1);
  CHECK(mesh.coordinate(mesh.group("sp-dp"), coords) == 1 * 3 + 2);
  CHECK(mesh.coordinate(mesh.group("dp-sp-tp"), coords) == (1 * 3 + 2) * 4 + 3);
  CHECK(mesh.coordinate(es::Group(), coords) == 0);
}

TEST_CASE("group: text that names no group says what was written", "[group][errors]") {
  std::string why;
  CHECK_FALSE(mesh.find_group("dp-pp", &why).has_value());
  CHECK(why.find("mesh group 'dp-pp': expected dimensions of the mesh (dp, sp, tp), found unknown mesh dimension 'pp'") != std::string::npos);
  CHECK_FALSE(mesh.find_group("dp-", &why).has_value());
  CHECK(why.find("mesh group 'dp-': expected a mesh dimension between each '-', found an empty component") != std::string::npos);
  CHECK_FALSE(mesh.find_group("sp-sp", &why).has_value());
  CHECK(why.find("mesh group 'sp-sp': expected each dimension once, found repeated component 'sp'") != std::string::npos);
  CHECK_FALSE(mesh.find_group("xx").has_value());  // without a reason: no message is built
  CHECK_THROWS_AS(mesh.group("xx"), es::Error);
  CHECK_THROWS_WITH(mesh.size("xx"), Catch::Contains("unknown mesh dimension 'xx'"));
}

}  // namespace test_group
