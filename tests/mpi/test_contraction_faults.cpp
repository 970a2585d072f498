// Faults injected on one rank of a distributed contraction end the call the same way on every
// rank -- the same es::Error, nobody left in a collective -- and the library stays usable; a NaN
// in one rank's shard is data, not a fault: it reaches exactly the output entries it feeds.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "fault_support.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cstdint>
#include <limits>
#include <string>

namespace es = einshard;
namespace et = einshard::testing;

namespace {

/// This rank's slice of dimension `d` of `t` over a 1-D mesh, by the split rule.
at::Tensor slice(const at::Tensor& t, std::int64_t d, const es::Mesh& mesh) {
  const auto s = es::compute_split_shapes(t.size(d), mesh.size("tp"));
  std::int64_t start = 0;
  for (int c = 0; c < mesh.coordinate("tp"); ++c) start += s[static_cast<std::size_t>(c)];
  return t.narrow(d, start, s[static_cast<std::size_t>(mesh.coordinate("tp"))]).contiguous();
}

}  // namespace

TEST_CASE("contraction faults: a fault on one rank raises the same error on every rank", "[mpi][binary][faults]") {
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  const bool me = w.rank == et::faulty_rank();
  at::manual_seed(3);
  const auto X = at::randn({5, 7}, at::kDouble), Y = at::randn({7, 4}, at::kDouble);
  const auto x = slice(X, 1, mesh), y = slice(Y, 0, mesh);  // "l f/tp, f/tp e"
  const es::Options o{.mesh = mesh};
  const std::string reduce_scatter = "l f/tp, f/tp e -> l/tp e";
  auto run = [&](const at::Tensor& a, const at::Tensor& b) { (void)es::einshard(reduce_scatter, {a, b}, o); };

  // The contracted axis with another extent on one rank than its shapes say (one column more:
  // the shard may be empty, 7 columns over 8 ranks being [0]*7 + [7]).
  const es::Options with{.mesh = mesh, .shapes = es::Shapes{{"tp", es::compute_split_shapes(7, w.size)}}};
  et::expect_error_everywhere(
      [&] { (void)es::einshard(reduce_scatter, {me ? at::cat({x, at::zeros({5, 1}, at::kDouble)}, 1) : x, y}, with); },
      "axis 'f'");
  // The two operands' shards of the contracted axis disagree on one rank.
  et::expect_error_everywhere([&] { run(x, me ? at::cat({y, at::zeros({1, 4}, at::kDouble)}) : y); }, "axis 'f'");
  // Another dtype, another number of dimensions, another device, on one rank.
  if (w.size > 1) et::expect_error_everywhere([&] { run(me ? x.to(at::kFloat) : x, y); }, "dtype");
  et::expect_error_everywhere([&] { run(me ? x.unsqueeze(0) : x, y); }, "dimensions");
  et::expect_error_everywhere([&] { run(x, me ? at::empty_like(y, at::TensorOptions().device(at::kMeta)) : y); },
                              "CPU");
  // A kept axis that is not whole everywhere.
  if (w.size > 1) et::expect_error_everywhere([&] { run(me ? x.narrow(0, 0, 4) : x, y); }, "axis 'l'");

  // Still usable, and a NaN is data: it spoils exactly the output entries it feeds.
  auto xn = x.clone();
  const bool owns = xn.size(1) > 0;
  if (me && owns) xn[2][0] = std::numeric_limits<double>::quiet_NaN();
  int any = me && owns ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const auto z = es::einshard(reduce_scatter, {xn, y}, o);
  auto Xn = X.clone();
  if (any) Xn[2].fill_(std::numeric_limits<double>::quiet_NaN());  // row 2 of the product is NaN
  const auto want = slice(Xn.mm(Y), 0, mesh);
  CHECK(at::equal(at::isnan(z), at::isnan(want)));
  CHECK(at::allclose(at::nan_to_num(z), at::nan_to_num(want), 1e-12, 1e-12));
}
