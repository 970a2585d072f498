// Local einshard on batch shards, at any world size: every rank draws the same full tensors (same
// seed), takes its batch shard with the split rule (uneven shards, empty ones when B < P), runs a
// local einshard whose sharded axes pass through unchanged, and the gathered result (raw
// MPI_Allgatherv) equals the one-process result; each rank's gradient equals its slice of the
// one-process gradient.
//
// Every collective runs on every rank: failures of the local work are agreed on first (one
// all-reduce), so a rank that fails never leaves the others waiting.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <climits>
#include <cstdint>
#include <exception>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace test_local_on_ranks {

namespace es = einshard;

namespace {

using Tensors = std::vector<at::Tensor>;

/// The batch layout of `B` rows over the "dp" dimension of `mesh`.
struct BatchSplit {
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> offsets;
  int rank = 0;

  BatchSplit(std::int64_t B, const es::Mesh& mesh)
      : sizes(es::compute_split_shapes(B, mesh.size("dp"))), rank(mesh.coordinate("dp")) {
    std::int64_t at = 0;
    for (auto s : sizes) {
      offsets.push_back(at);
      at += s;
    }
  }
  /// This rank's rows of a full tensor.
  [[nodiscard]] at::Tensor shard(const at::Tensor& full) const {
    return full.narrow(0, offsets[static_cast<std::size_t>(rank)], sizes[static_cast<std::size_t>(rank)])
        .clone();
  }
};

at::Tensor randn(std::vector<std::int64_t> shape) {
  return at::randn(shape, at::TensorOptions().dtype(at::kDouble));
}

/// True on every rank when `ok` is true on every rank.
bool all_ranks(bool ok, MPI_Comm comm) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  return all == 1;
}

/// Gathers the batch shards (float64, split along dim 0 as `split` says) into the full tensor on
/// every rank, with a raw MPI_Allgatherv.
at::Tensor allgather_rows(const at::Tensor& local, const BatchSplit& split, MPI_Comm comm) {
  const auto x = local.detach().to(at::kDouble).contiguous();
  std::vector<std::int64_t> shape = x.sizes().vec();
  std::int64_t row = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  std::vector<int> counts, displs;
  std::int64_t total = 0;
  for (auto s : split.sizes) {
    displs.push_back(static_cast<int>(total * row));
    counts.push_back(static_cast<int>(s * row));
    total += s;
  }
  shape[0] = total;
  auto full = at::empty(shape, x.options());
  MPI_Allgatherv(x.data_ptr<double>(), static_cast<int>(x.numel()), MPI_DOUBLE,
                 full.data_ptr<double>(), counts.data(), displs.data(), MPI_DOUBLE, comm);
  return full;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a - b).abs().max().item<double>();
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         at::allclose(a, b, 1e-12, 1e-12);
}

/// One batch-sharded check: `local(shards)` on this rank's shards of `full`, against
/// `reference(full)` on one process; forward values gathered from all ranks, gradients per rank.
void check_batch_sharded(const es::Mesh& mesh, std::int64_t B, const Tensors& full,
                         const std::function<at::Tensor(const Tensors&)>& local,
                         const std::function<at::Tensor(const Tensors&)>& reference) {
  const BatchSplit split(B, mesh);
  INFO("rank " << split.rank << " of " << mesh.size("dp") << ", B = " << B << ", local rows "
               << split.sizes[static_cast<std::size_t>(split.rank)]);

  // The one-process reference, with a seeded upstream gradient (equal on every rank).
  Tensors ref_leaves;
  for (const auto& t : full) ref_leaves.push_back(t.detach().clone().requires_grad_(true));
  const auto ref_out = reference(ref_leaves);
  const auto g = at::randn_like(ref_out);
  (ref_out * g).sum().backward();

  // This rank's part; any failure is agreed on before the gather.
  bool ok = true;
  std::string error;
  at::Tensor out;
  Tensors leaves;
  try {
    for (const auto& t : full) leaves.push_back(split.shard(t).requires_grad_(true));
    out = local(leaves);
    (out * split.shard(g)).sum().backward();
  } catch (const std::exception& e) {
    ok = false;
    error = e.what();
  }
  INFO("local error: " << error);
  const bool everyone = all_ranks(ok, mesh.comm());
  REQUIRE(everyone);  // the same on every rank, so every rank leaves here or none does

  const auto gathered = allgather_rows(out, split, mesh.comm());
  INFO("max |gathered - reference| = " << max_abs_diff(gathered, ref_out.detach()));
  CHECK(out.size(0) == split.sizes[static_cast<std::size_t>(split.rank)]);
  CHECK(same(gathered, ref_out.detach()));
  for (std::size_t i = 0; i < full.size(); ++i) {
    INFO("gradient of input " << i);
    const auto want = split.shard(ref_leaves[i].grad());
    REQUIRE(leaves[i].grad().defined());
    INFO("max |grad - reference slice| = " << max_abs_diff(leaves[i].grad(), want));
    CHECK(same(leaves[i].grad(), want));
  }
}

/// Batch sizes that give even, uneven and (for P > 1) empty shards, each once.
std::vector<std::int64_t> batch_sizes(int P) {
  const std::set<std::int64_t> sizes{0, 1, 3, 7, P, 2 * static_cast<std::int64_t>(P) + 1};
  return {sizes.begin(), sizes.end()};
}

}  // namespace

TEST_CASE("local on ranks: a 1-D mesh gives the rank's coordinate and the group size",
          "[mpi][local]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"dp"});
  CHECK(mesh.size("dp") == w.size);
  CHECK(mesh.coordinate("dp") == w.rank);
  // The split rule leaves nothing out and nothing twice.
  for (auto B : batch_sizes(w.size)) {
    const BatchSplit split(B, mesh);
    std::int64_t total = 0;
    for (auto s : split.sizes) total += s;
    CHECK(total == B);
    CHECK(static_cast<int>(split.sizes.size()) == w.size);
  }
}

TEST_CASE("local on ranks: batched contraction b/dp n c, b/dp c o -> b/dp n o", "[mpi][local]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"dp"});
  for (auto B : batch_sizes(w.size)) {
    at::manual_seed(100 + static_cast<std::uint64_t>(B));
    const Tensors full{randn({B, 3, 4}), randn({B, 4, 2})};
    const auto reference = [](const Tensors& t) { return at::bmm(t[0], t[1]); };
    SECTION("compile-time notation, B = " + std::to_string(B)) {
      check_batch_sharded(mesh, B, full,
                          [](const Tensors& t) {
                            return es::einshard<"b/dp n c, b/dp c o -> b/dp n o">(t[0], t[1]);
                          },
                          reference);
    }
    SECTION("run-time notation, B = " + std::to_string(B)) {
      check_batch_sharded(mesh, B, full,
                          [](const Tensors& t) {
                            return es::einshard("b/dp n c, b/dp c o -> b/dp n o", t);
                          },
                          reference);
    }
  }
}

TEST_CASE("local on ranks: unary permutation b/dp t c -> b/dp c t", "[mpi][local]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"dp"});
  for (auto B : batch_sizes(w.size)) {
    at::manual_seed(200 + static_cast<std::uint64_t>(B));
    const Tensors full{randn({B, 5, 3})};
    check_batch_sharded(mesh, B, full,
                        [](const Tensors& t) { return es::einshard<"b/dp t c -> b/dp c t">(t[0]); },
                        [](const Tensors& t) { return t[0].transpose(1, 2); });
    check_batch_sharded(mesh, B, full,
                        [](const Tensors& t) { return es::einshard("b/dp t c -> b/dp c t", t); },
                        [](const Tensors& t) { return t[0].transpose(1, 2); });
  }
}

TEST_CASE("local on ranks: attention scores with factored heads", "[mpi][local]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"dp"});
  for (auto B : batch_sizes(w.size)) {
    at::manual_seed(300 + static_cast<std::uint64_t>(B));
    const Tensors full{randn({B, 3, 8}), randn({B, 4, 8})};  // heads h = 2 of width d = 4
    check_batch_sharded(
        mesh, B, full,
        [](const Tensors& t) {
          return es::einshard<"b/dp q (h d), b/dp k (h d) -> b/dp h q k">(t[0], t[1],
                                                                         {.sizes = {{"d", 4}}});
        },
        [B](const Tensors& t) {
          return at::einsum("bqhd,bkhd->bhqk",
                            {t[0].reshape({B, 3, 2, 4}), t[1].reshape({B, 4, 2, 4})});
        });
    // Merging the heads back: b/dp h q k -> b/dp q (h k), a pack with the batch still sharded.
    at::manual_seed(400 + static_cast<std::uint64_t>(B));
    const Tensors scores{randn({B, 2, 3, 4})};
    check_batch_sharded(
        mesh, B, scores,
        [](const Tensors& t) { return es::einshard("b/dp h q k -> b/dp q (h k)", t); },
        [B](const Tensors& t) { return t[0].permute({0, 2, 1, 3}).reshape({B, 3, 8}); });
  }
}

}  // namespace test_local_on_ranks
