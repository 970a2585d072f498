// einshard_demo: batch-parallel multi-head attention in tensor notation, at any number of ranks.
//
//   mpirun -n 4 build/release/examples/einshard_demo
//
// Each rank holds a slice of the batch (`b/dp`, split with the library's split rule, so shards may
// be uneven or empty). The attention is written with compile-time notations whose sharded batch
// axis passes through unchanged: no communication is needed, and einshard runs only local einsums
// and reshapes. The heads are a factored axis `(h d)`. At the end the ranks gather the result
// (MPI_Allgatherv) and compare it with the same computation done on one process.
//
// It also shows a run-time notation with axis families (a window partition of a batch-sharded
// image) and what a malformed run-time notation reports.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace es = einshard;

namespace {

constexpr std::int64_t batch = 10, queries = 6, keys = 8, heads = 4, head_dim = 8;
constexpr std::int64_t width = heads * head_dim;

std::string shape_text(at::IntArrayRef shape) {
  std::ostringstream s;
  s << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ')';
  return s.str();
}

/// Multi-head attention on whatever batch rows this rank holds: q (b, q, h*d), k and v (b, k, h*d).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const es::Options o{.sizes = {{"d", head_dim}}};
  const auto scores = es::einshard<"b/dp q (h d), b/dp k (h d) -> b/dp h q k">(q, k, o);
  const auto weights = at::softmax(scores / std::sqrt(static_cast<double>(head_dim)), -1);
  return es::einshard<"b/dp h q k, b/dp k (h d) -> b/dp q (h d)">(weights, v, o);
}

/// The same on one process, in plain ATen.
at::Tensor attention_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const auto split = [](const at::Tensor& t) {
    return t.reshape({t.size(0), t.size(1), heads, head_dim}).permute({0, 2, 1, 3});  // b h s d
  };
  const auto scores = at::matmul(split(q), split(k).transpose(-1, -2));  // b h q k
  const auto weights = at::softmax(scores / std::sqrt(static_cast<double>(head_dim)), -1);
  return at::matmul(weights, split(v)).permute({0, 2, 1, 3}).reshape({q.size(0), q.size(1), width});
}

/// The full tensor from every rank's rows (dim 0), on every rank.
at::Tensor allgather_rows(const at::Tensor& local, const std::vector<std::int64_t>& rows,
                          MPI_Comm comm) {
  const auto x = local.contiguous();
  std::int64_t per_row = 1;
  for (std::int64_t d = 1; d < x.dim(); ++d) per_row *= x.size(d);
  std::vector<int> counts, displs;
  std::int64_t total = 0;
  for (auto r : rows) {
    displs.push_back(static_cast<int>(total * per_row));
    counts.push_back(static_cast<int>(r * per_row));
    total += r;
  }
  auto shape = x.sizes().vec();
  shape[0] = total;
  auto full = at::empty(shape, x.options());
  MPI_Allgatherv(x.data_ptr<float>(), static_cast<int>(x.numel()), MPI_FLOAT, full.data_ptr<float>(),
                 counts.data(), displs.data(), MPI_FLOAT, comm);
  return full;
}

int run(MPI_Comm world) {
  int world_size = 0;
  MPI_Comm_size(world, &world_size);
  const es::Mesh mesh(world, {world_size}, {"dp"});  // one mesh dimension, "dp", over all ranks
  const int P = mesh.size("dp"), rank = mesh.coordinate("dp");

  // Every rank draws the same full tensors and keeps its batch rows.
  at::manual_seed(2024);
  const auto q = at::randn({batch, queries, width});
  const auto k = at::randn({batch, keys, width});
  const auto v = at::randn({batch, keys, width});
  const auto rows = es::compute_split_shapes(batch, P);
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += rows[static_cast<std::size_t>(r)];
  const auto mine = rows[static_cast<std::size_t>(rank)];
  const auto shard = [&](const at::Tensor& t) { return t.narrow(0, first, mine); };

  // The batch-parallel computation: local to each rank.
  const auto out = attention(shard(q), shard(k), shard(v));

  // Check: gather the shards and compare with one process.
  const auto gathered = allgather_rows(out, rows, mesh.comm());
  const auto expected = attention_reference(q, k, v);
  const double error = (gathered - expected).abs().max().item<double>();
  const bool ok = gathered.sizes() == expected.sizes() && error < 1e-5;

  // A run-time notation with axis families: cut each rank's images into 2 x 2 windows, the
  // batch still sharded and carried into the window index.
  const auto images = at::randn({batch, 4, 6, 3}).narrow(0, first, mine);
  const auto windows = es::einshard(
      "b/dp [*spatial *window] c -> (b/dp *spatial) (*window) c", {images},
      {.sizes = {{"window", 2}}, .families = {{"spatial", {"h", "w"}}, {"window", {"wh", "ww"}}}});
  const auto windows_expected =  // the same by hand: (b, 2, 2, 3, 2, 3) -> (b, 2, 3, 2, 2, 3)
      images.reshape({mine, 2, 2, 3, 2, 3}).permute({0, 1, 3, 2, 4, 5}).reshape({mine * 6, 4, 3});
  const bool windows_ok = at::equal(windows, windows_expected);

  // A malformed run-time notation throws es::NotationError, with a caret under the fault.
  std::string notation_error;
  try {
    es::einshard("b/dp q (h d -> b/dp h q", {shard(q)});
  } catch (const es::NotationError& e) {
    notation_error = e.what();
  }

  if (rank == 0) {
    std::printf("einshard_demo: %d rank%s, batch rows %s; attention q %s, k/v %s -> %s; "
                "max abs error %.2e: %s\n",
                P, P == 1 ? "" : "s", shape_text(rows).c_str(), shape_text(q.sizes()).c_str(),
                shape_text(k.sizes()).c_str(), shape_text(gathered.sizes()).c_str(), error,
                ok ? "OK" : "MISMATCH");
    std::printf("families: rank 0's images %s -> windows %s: %s\n",
                shape_text(images.sizes()).c_str(), shape_text(windows.sizes()).c_str(),
                windows_ok ? "OK" : "MISMATCH");
    std::printf("caught es::NotationError:\n%s\n", notation_error.c_str());
    std::fflush(stdout);
  }
  // The windows were checked on each rank's own shard: agree on one exit code for all ranks.
  int good = ok && windows_ok && !notation_error.empty() ? 1 : 0, all_good = 0;
  MPI_Allreduce(&good, &all_good, 1, MPI_INT, MPI_MIN, mesh.comm());
  return all_good ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  int code = 1;
  try {
    code = run(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "einshard_demo: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks may be waiting in a collective
  }
  MPI_Finalize();
  return code;
}
