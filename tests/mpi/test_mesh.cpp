// Mesh: named Cartesian grids over MPI communicators, their groups and their errors, at any world
// size (ctest runs this binary at 1, 2, 3, 4 and 8 ranks).

#include <catch2/catch.hpp>

#include <mpi.h>

#include <numeric>
#include <string>
#include <vector>

#include "einshard/mesh.hpp"
#include "test_support.hpp"

namespace test_mesh {

namespace es = einshard;

namespace {

using einshard::testing::factorizations;

const std::vector<std::string> dim_names{"dp", "sp", "tp"};

int group_sum(MPI_Comm comm, int value) {
  int sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, comm);
  return sum;
}

}  // namespace

TEST_CASE("mesh: 1-D mesh over the world", "[mesh]") {
  const auto w = es::testing::world();
  es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"dp"});
  CHECK(mesh.ndim() == 1);
  CHECK(mesh.size() == w.size);
  CHECK(mesh.size("dp") == w.size);
  CHECK(mesh.coordinate("dp") == w.rank);
  int group_size = 0, group_rank = -1;
  MPI_Comm_size(mesh.comm("dp"), &group_size);
  MPI_Comm_rank(mesh.comm("dp"), &group_rank);
  CHECK(group_size == w.size);
  CHECK(group_rank == w.rank);
  CHECK(group_sum(mesh.comm("dp"), 1) == w.size);
}

TEST_CASE("mesh: every 2-D and 3-D layout of the world is row-major", "[mesh]") {
  const auto w = es::testing::world();
  for (int dims = 2; dims <= 3; ++dims)
    for (const auto& sizes : factorizations(w.size, dims)) {
      std::vector<std::string> names(dim_names.begin(), dim_names.begin() + dims);
      es::Mesh mesh(MPI_COMM_WORLD, sizes, names);
      INFO("mesh of " << sizes.size() << " dims, first " << sizes[0]);
      // Row-major: the world rank is the mixed-radix number of the coordinates.
      int rank = 0;
      for (int d = 0; d < dims; ++d) rank = rank * sizes[d] + mesh.coordinate(names[d]);
      CHECK(rank == w.rank);
      // Every rank's coordinates, as MPI's Cartesian communicator gives them.
      for (int q = 0; q < w.size; ++q) {
        std::vector<int> expected(static_cast<std::size_t>(dims));
        MPI_Cart_coords(mesh.comm(), q, dims, expected.data());
        const auto got = mesh.coordinates_of(q);
        CHECK(std::vector<int>(got.begin(), got.end()) == expected);
      }
      for (int d = 0; d < dims; ++d) {
        CHECK(mesh.size(names[d]) == sizes[d]);
        // The group of one dimension holds the ranks that differ only in that coordinate.
        const int stride = std::accumulate(sizes.begin() + d + 1, sizes.end(), 1, std::multiplies<>());
        const int base = w.rank - mesh.coordinate(names[d]) * stride;
        int expected = 0;
        for (int c = 0; c < sizes[d]; ++c) expected += base + c * stride;
        CHECK(group_sum(mesh.comm(names[d]), w.rank) == expected);
        int r = -1;
        MPI_Comm_rank(mesh.comm(names[d]), &r);
        CHECK(r == mesh.coordinate(names[d]));
      }
      // Compound group of the first two dimensions, in either spelling: one communicator, whose
      // ranks follow row-major order of (dim0, dim1).
      const std::string ab = names[0] + "-" + names[1], ba = names[1] + "-" + names[0];
      CHECK(mesh.comm(ab) == mesh.comm(ba));
      CHECK(mesh.size(ab) == sizes[0] * sizes[1]);
      CHECK(mesh.coordinate(ba) == mesh.coordinate(names[0]) * sizes[1] + mesh.coordinate(names[1]));
      int r = -1, n = 0;
      MPI_Comm_rank(mesh.comm(ab), &r);
      MPI_Comm_size(mesh.comm(ab), &n);
      CHECK(r == mesh.coordinate(ab));
      CHECK(n == sizes[0] * sizes[1]);
      CHECK(group_sum(mesh.comm(ab), 1) == sizes[0] * sizes[1]);
    }
}

TEST_CASE("mesh: copies share communicators", "[mesh]") {
  const auto w = es::testing::world();
  es::Mesh mesh(MPI_COMM_WORLD, {1, w.size}, {"dp", "sp"});
  const es::Mesh copy = mesh;
  CHECK(copy.comm("sp") == mesh.comm("sp"));
  CHECK(copy.comm("dp-sp") == mesh.comm("sp-dp"));
  CHECK(static_cast<bool>(copy));
  CHECK_FALSE(static_cast<bool>(es::Mesh{}));
  CHECK_THROWS_AS(es::Mesh{}.size("dp"), es::Error);
}

TEST_CASE("mesh: works on a sub-communicator", "[mesh]") {
  const auto w = es::testing::world();
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, w.rank % 2, w.rank, &half);
  int n = 0, r = 0;
  MPI_Comm_size(half, &n);
  MPI_Comm_rank(half, &r);
  {
    es::Mesh mesh(half, {n}, {"sp"});
    CHECK(mesh.size("sp") == n);
    CHECK(mesh.coordinate("sp") == r);
    CHECK(group_sum(mesh.comm("sp"), w.rank % 2) == (w.rank % 2) * n);
  }
  MPI_Comm_free(&half);
}

TEST_CASE("mesh: malformed meshes and groups raise the same error on every rank", "[mesh][errors]") {
  const auto w = es::testing::world();
  CHECK_THROWS_WITH(es::Mesh(MPI_COMM_WORLD, {w.size + 1}, {"dp"}),
                    Catch::Contains("Mesh: expected sizes that multiply to the communicator's " + std::to_string(w.size) + " ranks, found a product of " + std::to_string(w.size + 1)));
  CHECK_THROWS_WITH(es::Mesh(MPI_COMM_WORLD, {w.size, 1}, {"dp"}), Catch::Contains("Mesh: expected one name per size (2 sizes), found 1 names"));
  CHECK_THROWS_WITH(es::Mesh(MPI_COMM_WORLD, {w.size, 1}, {"dp", "dp"}),
                    Catch::Contains("Mesh: expected distinct mesh dimension names, found 'dp' twice"));
  CHECK_THROWS_WITH(es::Mesh(MPI_COMM_WORLD, {w.size}, {""}), Catch::Contains("Mesh: expected a mesh dimension name, found an empty one"));
  CHECK_THROWS_WITH(es::Mesh(MPI_COMM_WORLD, {w.size}, {"dp-sp"}), Catch::Contains("Mesh: expected a mesh dimension name of letters, digits and '_' ('-' joins compound groups), found 'dp-sp'"));
  CHECK_THROWS_WITH(es::Mesh(MPI_COMM_WORLD, {w.size, 0}, {"dp", "sp"}), Catch::Contains("Mesh: expected a positive size of mesh dimension 'sp', found 0"));
  es::Mesh mesh(MPI_COMM_WORLD, {w.size, 1}, {"dp", "sp"});
  CHECK_THROWS_WITH(mesh.comm("tp"), Catch::Contains("unknown mesh dimension 'tp'"));
  CHECK_THROWS_WITH(mesh.size("dp-"), Catch::Contains("empty component"));
  CHECK_THROWS_WITH(mesh.size("-dp"), Catch::Contains("empty component"));
  CHECK_THROWS_WITH(mesh.size("dp--sp"), Catch::Contains("empty component"));
  CHECK_THROWS_WITH(mesh.comm("dp-dp"), Catch::Contains("repeated component 'dp'"));
  CHECK_FALSE(mesh.has("tp"));
  CHECK(mesh.has("sp-dp"));
  // Nothing above left a collective half-done: the world still agrees.
  CHECK(group_sum(MPI_COMM_WORLD, 1) == w.size);
}

}  // namespace test_mesh
