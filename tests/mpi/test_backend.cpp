// The communication-backend seam (comm/backend.hpp) without a GPU: the MPI backend's staging
// through host buffers, forced on CPU tensors by a mesh option, gives bitwise the results of the
// direct path for every collective, the box exchange and whole notation calls (values and
// gradients); options travel with communicators; asking for NCCL where it cannot serve is the
// same error on every rank; and a device-kind mismatch in the agreement record (simulated: this
// machine has no second device kind) is the same error on every rank.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/comm/agreement.hpp>
#include <einshard/comm/backend.hpp>
#include <einshard/comm/collectives.hpp>
#include <einshard/einshard.hpp>

#include "fault_support.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cstdint>
#include <string>
#include <vector>

namespace test_backend {

namespace es = einshard;
namespace comm = einshard::comm;
namespace et = einshard::testing;

namespace {

/// Rank r's values: distinct per rank and element, exact in every dtype below.
at::Tensor values(at::ScalarType dt, at::IntArrayRef shape, int r) {
  const auto n = c10::multiply_integers(shape);
  auto v = (at::arange(n, at::kDouble).remainder(7) * 0.5 + r).reshape(shape);
  if (dt == at::kBool) return v.remainder(2).gt(0.5);
  if (at::isComplexType(dt)) return at::complex(v, -v * 0.5).to(dt);
  return v.to(dt);
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

std::vector<std::int64_t> uneven(std::int64_t n, int p) { return es::compute_split_shapes(n, p); }

}  // namespace

TEST_CASE("backend: staging through host buffers is bitwise the direct path, every collective",
          "[mpi][backend]") {
  const auto w = et::world();
  const es::Mesh direct(MPI_COMM_WORLD, {w.size}, {"tp"});
  const es::Mesh staged(MPI_COMM_WORLD, {w.size}, {"tp"}, {.stage_through_host = true});
  const auto cd = direct.comm("tp"), cs = staged.comm("tp");
  CHECK(staged.backend().stage_through_host);
  CHECK(comm::backend_options(cs).stage_through_host);
  CHECK_FALSE(comm::backend_options(cd).stage_through_host);
  // The staged mesh really routes CPU tensors through the staging path, the default one does not.
  const auto probe = at::zeros({1});
  auto* s = dynamic_cast<comm::MpiBackend*>(&comm::backend_for(probe, cs));
  auto* d = dynamic_cast<comm::MpiBackend*>(&comm::backend_for(probe, cd));
  REQUIRE(s != nullptr);
  REQUIRE(d != nullptr);
  CHECK(s->staged());
  CHECK_FALSE(d->staged());

  const auto rows = uneven(2 * w.size + 1, w.size);  // uneven pieces; empty ones at 8 ranks
  for (auto dt : {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong, at::kChar, at::kBool,
                  at::kComplexDouble}) {
    INFO("dtype " << c10::toString(dt));
    const auto x = values(dt, {3, 5}, w.rank);
    CHECK(bitwise_equal(comm::all_reduce(x, cs), comm::all_reduce(x, cd)));
    CHECK(bitwise_equal(comm::broadcast(x, w.size - 1, cs), comm::broadcast(x, w.size - 1, cd)));
    // Along the outer dimension (in place) and an inner one (through the scratch buffer).
    const auto mine = rows[static_cast<std::size_t>(w.rank)];
    const auto piece = values(dt, {mine, 4}, w.rank), inner = values(dt, {2, mine}, w.rank);
    CHECK(bitwise_equal(comm::all_gather(piece, 0, rows, cs), comm::all_gather(piece, 0, rows, cd)));
    CHECK(bitwise_equal(comm::all_gather(inner, 1, rows, cs), comm::all_gather(inner, 1, rows, cd)));
    const auto whole = values(dt, {2, 2 * w.size + 1}, w.rank);
    CHECK(bitwise_equal(comm::reduce_scatter(whole, 1, rows, cs), comm::reduce_scatter(whole, 1, rows, cd)));
    CHECK(bitwise_equal(comm::reduce_scatter(whole.t(), 0, rows, cs), comm::reduce_scatter(whole.t(), 0, rows, cd)));
    // A ring of boxes, one packed (strided) and one in place, plus the local copy.
    const int next = (w.rank + 1) % w.size, prev = (w.rank + w.size - 1) % w.size;
    std::vector<comm::Transfer> sends{{w.rank, {{2, 0}, {1, 5}}}}, recvs{{w.rank, {{0, 0}, {1, 5}}}};
    if (w.size > 1) {
      sends.push_back({next, {{0, 1}, {2, 3}}});
      recvs.push_back({prev, {{1, 0}, {2, 3}}});
    }
    CHECK(bitwise_equal(comm::exchange_boxes(x, {3, 5}, sends, recvs, cs),
                        comm::exchange_boxes(x, {3, 5}, sends, recvs, cd)));
  }
}

TEST_CASE("backend: notation calls on a staged mesh equal the direct mesh, values and gradients",
          "[mpi][backend]") {
  const auto w = et::world();
  const es::Mesh direct(MPI_COMM_WORLD, {w.size}, {"tp"});
  const es::Mesh staged(MPI_COMM_WORLD, {w.size}, {"tp"}, {.stage_through_host = true});
  at::manual_seed(11);
  const auto X = at::randn({6, 2 * w.size + 1}, at::kDouble), Y = at::randn({2 * w.size + 1, 5}, at::kDouble);
  const auto f = uneven(X.size(1), w.size);
  std::int64_t start = 0;
  for (int r = 0; r < w.rank; ++r) start += f[static_cast<std::size_t>(r)];
  const auto x0 = X.narrow(1, start, f[static_cast<std::size_t>(w.rank)]).contiguous();
  const auto y0 = Y.narrow(0, start, f[static_cast<std::size_t>(w.rank)]).contiguous();
  for (const std::string notation : {"l f/tp, f/tp e -> l e", "l f/tp, f/tp e -> l/tp e", "l f/tp -> l/tp f"}) {
    INFO(notation);
    const bool binary = notation.find(',') != std::string::npos;
    auto run = [&](const es::Mesh& mesh) {
      auto x = x0.clone().requires_grad_(true), y = y0.clone().requires_grad_(true);
      const es::Options o{.mesh = mesh};
      auto out = binary ? es::einshard(notation, {x, y}, o) : es::einshard(notation, {x}, o);
      (out * out).sum().backward();
      return std::vector<at::Tensor>{out.detach(), x.grad(), binary ? y.grad() : at::zeros({1})};
    };
    const auto a = run(staged), b = run(direct);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(bitwise_equal(a[i], b[i]));
  }
}

TEST_CASE("backend: options travel with MPI_Comm_dup and are freed with the communicator", "[mpi][backend]") {
  MPI_Comm a = MPI_COMM_NULL, b = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &a);
  CHECK(comm::backend_options(a).is_default());
  comm::set_backend_options(a, {.backend = comm::BackendKind::mpi, .stage_through_host = true});
  MPI_Comm_dup(a, &b);
  CHECK(comm::backend_options(b).backend == comm::BackendKind::mpi);
  CHECK(comm::backend_options(b).stage_through_host);
  comm::set_backend_options(a, {});
  CHECK(comm::backend_options(a).is_default());
  CHECK(comm::backend_options(b).stage_through_host);
  MPI_Comm_free(&b);
  MPI_Comm_free(&a);
  CHECK(comm::backend_options(MPI_COMM_WORLD).is_default());
}

TEST_CASE("backend: NCCL where it cannot serve is the same error naming NCCL on every rank", "[mpi][backend]") {
  const auto w = et::world();
  if (!comm::nccl_available()) {
    et::expect_error_everywhere(
        [&] { (void)es::Mesh(MPI_COMM_WORLD, {w.size}, {"tp"}, {.backend = comm::BackendKind::nccl}); }, "NCCL");
  } else {
    // NCCL moves CUDA tensors only: a CPU tensor on an NCCL mesh fails before any data moves.
    const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"}, {.backend = comm::BackendKind::nccl});
    et::expect_error_everywhere([&] { (void)comm::all_reduce(at::ones({4}), mesh.comm("tp")); }, "NCCL");
    // A gather that moves data (at one rank the plan moves nothing).
    if (w.size > 1)
      et::expect_error_everywhere(
          [&] { (void)es::einshard("a/tp -> a", {at::ones({2})}, {.mesh = mesh}); }, "NCCL");
  }
  et::expect_error_everywhere(
      [&] {
        (void)es::Mesh(MPI_COMM_WORLD, {w.size}, {"tp"},
                       {.backend = comm::BackendKind::nccl, .stage_through_host = true});
      },
      comm::nccl_available() ? "MPI backend" : "NCCL");
}

TEST_CASE("agreement: one device kind per call and across ranks, the same error everywhere",
          "[mpi][backend][faults]") {
  // No second device kind exists here, so the record says CUDA where the tensor is on the CPU:
  // exactly what the agreement would see from a CUDA tensor.
  const auto w = et::world();
  const bool me = w.rank == et::faulty_rank();
  const auto x = at::ones({2, 3}), y = at::ones({3, 4});
  const std::vector<std::string> dims{"2", "2"};
  auto on_cuda = [](comm::RankInfo info) {
    info.device = static_cast<std::int64_t>(c10::DeviceType::CUDA);
    return info;
  };
  // Mixed devices within one call, on one rank.
  et::expect_error_everywhere(
      [&] {
        const std::vector<comm::RankInfo> mine{comm::describe(x, 5, comm::LocalFault::none),
                                               me ? on_cuda(comm::describe(y, 6, comm::LocalFault::none))
                                                  : comm::describe(y, 6, comm::LocalFault::none)};
        (void)comm::agree(MPI_COMM_WORLD, mine, "einshard", dims);
      },
      "one device kind");
  // Every input on CUDA on one rank, on the CPU on the others.
  if (w.size > 1)
    et::expect_error_everywhere(
        [&] {
          std::vector<comm::RankInfo> mine{comm::describe(x, 5, comm::LocalFault::none),
                                           comm::describe(y, 6, comm::LocalFault::none)};
          if (me)
            for (auto& m : mine) m = on_cuda(m);
          (void)comm::agree(MPI_COMM_WORLD, mine, "einshard", dims);
        },
        "cuda");
  // Every input on CUDA on every rank is agreed (the device kind is not a fault).
  std::vector<comm::RankInfo> all{on_cuda(comm::describe(x, 5, comm::LocalFault::none)),
                                  on_cuda(comm::describe(y, 6, comm::LocalFault::none))};
  CHECK(comm::agree(MPI_COMM_WORLD, all, "einshard", dims).size() == static_cast<std::size_t>(w.size));
  // A device no backend moves (meta) is refused by name on every rank.
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"});
  et::expect_error_everywhere(
      [&] {
        (void)es::einshard("a b/tp -> a b", {me ? at::empty({2, 3}, at::TensorOptions().device(at::kMeta)) : x},
                           {.mesh = mesh});
      },
      "meta");
}

}  // namespace test_backend
