// einhalo against a hand-written MPI neighbour exchange of the same bytes, in the same run.
//
// A 2-D float64 field, P ranks in a ring (periodic boundary, so every rank has two neighbours and
// every message has the same size), halo of `w` rows (case "rows": the split axis is the outer
// one, ghost rows are contiguous) or columns (case "cols": the split axis is the inner one, ghosts
// are strided and must be packed). Variants, timed interleaved round by round with an MPI_Barrier
// before each operation; one operation's time is the maximum over ranks:
//   einshard      es::einhalo<"h/sp w">(x, {{"h", w}}, {.mesh, .boundary = periodic}): a new
//                 ghosted tensor per call (agreement on metadata, plan, exchange)
//   prepared      the same halo prepared once (es::prepare_halo): a new ghosted tensor per call,
//                 the exchange alone, no agreement
//   mpi_alloc     the same result by hand: allocate the ghosted tensor, copy the interior,
//                 Irecv the ghosts from both neighbours, Isend the edges, Waitall (packing the
//                 strided edges for "cols"); the anchor of the issue (target ratio <= 1.10)
//   mpi_exchange  the exchange alone into a ghosted array kept across calls (no allocation, no
//                 interior copy): what an in-place stencil code pays, a lower bound
// Results are checked equal (einshard vs mpi_alloc) before timing.
//
// Then a 3 x 3 convolution of a field with 4 channels in and out, split along h (case
// "conv", periodic, "same" padding: one ghost row from each neighbour): einconv per call (agreement,
// exchange, convolution) against the same convolution prepared once (es::prepare_conv: the
// exchange and the convolution, no agreement), timed interleaved the same way; results checked
// equal. Without autograd both overlap the exchange with the interior's convolution.
//
//   mpirun -n 4 einshard_bench_halo [--quick] [--iters N]
// Output: one JSON line per (case, size, halo) on rank 0, and one per field of the convolution
// (8 x 32, 64 x 256, 256 x 256 per rank; --quick: the first).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <einshard/einshard.hpp>
#include <einshard/ops/halo.hpp>

#include "../common.hpp"

namespace es = einshard;
using einshard_bench::timed;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Neighbours {
  int up, down;  // the ranks holding the rows (columns) before and after mine, periodic
};

/// The hand-written exchange: ghosts of width w along `dim` (0 or 1) of `out`, whose interior
/// (rows/columns [w, w + n)) holds this rank's shard `x`.
void exchange(const at::Tensor& x, at::Tensor& out, std::int64_t dim, std::int64_t w, Neighbours nb,
              std::vector<at::Tensor>& buffers) {
  const auto n = x.size(dim);
  MPI_Request req[4];
  const int count = static_cast<int>(x.numel() / n * w);
  if (dim == 0) {
    MPI_Irecv(out.data_ptr<double>(), count, MPI_DOUBLE, nb.up, 1, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(out.narrow(0, w + n, w).data_ptr<double>(), count, MPI_DOUBLE, nb.down, 2, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(x.narrow(0, n - w, w).data_ptr<double>(), count, MPI_DOUBLE, nb.down, 1, MPI_COMM_WORLD, &req[2]);
    MPI_Isend(x.data_ptr<double>(), count, MPI_DOUBLE, nb.up, 2, MPI_COMM_WORLD, &req[3]);
    MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
    return;
  }
  // Strided columns: pack the edges, receive into buffers, unpack.
  buffers[0].copy_(x.narrow(1, n - w, w));
  buffers[1].copy_(x.narrow(1, 0, w));
  MPI_Irecv(buffers[2].data_ptr<double>(), count, MPI_DOUBLE, nb.up, 1, MPI_COMM_WORLD, &req[0]);
  MPI_Irecv(buffers[3].data_ptr<double>(), count, MPI_DOUBLE, nb.down, 2, MPI_COMM_WORLD, &req[1]);
  MPI_Isend(buffers[0].data_ptr<double>(), count, MPI_DOUBLE, nb.down, 1, MPI_COMM_WORLD, &req[2]);
  MPI_Isend(buffers[1].data_ptr<double>(), count, MPI_DOUBLE, nb.up, 2, MPI_COMM_WORLD, &req[3]);
  MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
  out.narrow(1, 0, w).copy_(buffers[2]);
  out.narrow(1, w + n, w).copy_(buffers[3]);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  c10::InferenceMode guard;
  bool quick = false;
  int iters = 41;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
  }
  if (quick) iters = 5;
  bool failed = false;
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  {
    es::Mesh mesh(MPI_COMM_WORLD, {P}, {"sp"});
    const Neighbours nb{(rank + P - 1) % P, (rank + 1) % P};
    const std::vector<std::int64_t> sides = quick ? std::vector<std::int64_t>{64} : std::vector<std::int64_t>{64, 256, 1024};
    for (const std::string kind : {"rows", "cols"})
      for (const auto side : sides)
        for (const std::int64_t w : {1, 4}) {
          if (failed) break;
          const std::int64_t dim = kind == "rows" ? 0 : 1;
          // Local shard: side x 1024 (rows) or 1024 x side (cols), split along dim.
          const std::vector<std::int64_t> shape = dim == 0 ? std::vector<std::int64_t>{side, 1024}
                                                           : std::vector<std::int64_t>{1024, side};
          at::manual_seed(static_cast<std::uint64_t>(rank));
          const auto x = at::randn(shape, at::kDouble);
          auto ghost_shape = shape;
          ghost_shape[static_cast<std::size_t>(dim)] += 2 * w;
          auto kept = at::empty(ghost_shape, at::kDouble);
          kept.narrow(dim, w, side).copy_(x);
          auto edge = shape;
          edge[static_cast<std::size_t>(dim)] = w;
          std::vector<at::Tensor> buffers;
          for (int b = 0; b < 4; ++b) buffers.push_back(at::empty(edge, at::kDouble));
          const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};
          auto run_einshard = [&] {
            return dim == 0 ? es::einhalo<"h/sp w">(x, {{"h", w}}, o) : es::einhalo<"h w/sp">(x, {{"w", w}}, o);
          };
          const auto prepared = dim == 0 ? es::prepare_halo<"h/sp w">(x, {{"h", w}}, o)
                                         : es::prepare_halo<"h w/sp">(x, {{"w", w}}, o);
          auto run_alloc = [&] {
            auto out = at::empty(ghost_shape, at::kDouble);
            out.narrow(dim, w, side).copy_(x);
            exchange(x, out, dim, w, nb, buffers);
            return out;
          };
          const auto reference = run_alloc();
          const bool same = at::equal(run_einshard(), reference) && at::equal(prepared(x), reference);
          int all_same = same ? 1 : 0, ok = 0;
          MPI_Allreduce(&all_same, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
          if (!ok) {  // every rank knows: all leave together
            if (rank == 0) std::fprintf(stderr, "einhalo and the hand-written exchange differ\n");
            failed = true;
            break;
          }
          std::vector<double> te, ta, tx, tp, paired, paired_prepared;
          for (int it = 0; it < iters; ++it) {
            double e = 0, a = 0, xo = 0, pr = 0;
            const int order = it % 4;
            for (int k = 0; k < 4; ++k) {
              switch ((order + k) % 4) {
                case 0: e = timed([&] { (void)run_einshard(); }); break;
                case 1: a = timed([&] { (void)run_alloc(); }); break;
                case 2: pr = timed([&] { (void)prepared(x); }); break;
                default: xo = timed([&] { exchange(x, kept, dim, w, nb, buffers); }); break;
              }
            }
            if (it == 0) continue;  // warm-up round
            te.push_back(e);
            ta.push_back(a);
            tx.push_back(xo);
            tp.push_back(pr);
            paired.push_back(e / a);
            paired_prepared.push_back(pr / a);
          }
          if (rank == 0)
            std::printf(
                "{\"bench\":\"halo\",\"case\":\"%s\",\"ranks\":%d,\"local\":[%lld,%lld],\"halo\":%lld,"
                "\"mib_per_rank\":%.3g,\"halo_kib_per_message\":%.4g,\"einshard_ms\":%.4g,\"mpi_alloc_ms\":%.4g,"
                "\"mpi_exchange_ms\":%.4g,\"ratio\":%.3f,\"ratio_paired\":%.3f,\"ratio_vs_exchange_only\":%.3f,"
                "\"prepared_ms\":%.4g,\"prepared_ratio\":%.3f,\"prepared_ratio_paired\":%.3f}\n",
                kind.c_str(), P, static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
                static_cast<long long>(w), static_cast<double>(x.numel()) * 8 / (1 << 20),
                static_cast<double>(x.numel() / side * w) * 8 / 1024, median(te) * 1e3, median(ta) * 1e3,
                median(tx) * 1e3, median(te) / median(ta), median(paired), median(te) / median(tx),
                median(tp) * 1e3, median(tp) / median(ta), median(paired_prepared));
          std::fflush(stdout);
        }
    // A small shard first, where the agreement a prepared call saves is a visible part of a call.
    const std::vector<std::pair<std::int64_t, std::int64_t>> fields =
        quick ? std::vector<std::pair<std::int64_t, std::int64_t>>{{8, 32}}
              : std::vector<std::pair<std::int64_t, std::int64_t>>{{8, 32}, {64, 256}, {256, 256}};
    for (const auto& [side, width] : fields) {
      if (failed) break;
      at::manual_seed(static_cast<std::uint64_t>(rank));
      const auto x = at::randn({side, width, 4}, at::kDouble);
      at::manual_seed(7);  // the weight is whole: the same on every rank
      const auto weight = at::randn({4, 4, 3, 3}, at::kDouble);
      const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};
      const es::AxisMap windows{{"h", "kh"}, {"w", "kw"}};
      auto run_einconv = [&] { return es::einconv<"h/sp w c, o c kh kw -> h/sp w o">(x, weight, windows, o); };
      const auto prepared = es::prepare_conv<"h/sp w c, o c kh kw -> h/sp w o">(x, weight, windows, o);
      int same = at::equal(run_einconv(), prepared(x, weight)) ? 1 : 0, ok = 0;
      MPI_Allreduce(&same, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (!ok) {
        if (rank == 0) std::fprintf(stderr, "einconv and its prepared form differ\n");
        failed = true;
        break;
      }
      std::vector<double> te, tp, paired;
      for (int it = 0; it < iters; ++it) {
        double e = 0, pr = 0;
        for (int k = 0; k < 2; ++k) {
          if ((it + k) % 2 == 0)
            e = timed([&] { (void)run_einconv(); });
          else
            pr = timed([&] { (void)prepared(x, weight); });
        }
        if (it == 0) continue;  // warm-up round
        te.push_back(e);
        tp.push_back(pr);
        paired.push_back(pr / e);
      }
      if (rank == 0)
        std::printf(
            "{\"bench\":\"halo\",\"case\":\"conv\",\"ranks\":%d,\"local\":[%lld,%lld,4],\"kernel\":3,"
            "\"einconv_ms\":%.4g,\"prepared_ms\":%.4g,\"prepared_ratio\":%.3f,\"prepared_ratio_paired\":%.3f}\n",
            P, static_cast<long long>(side), static_cast<long long>(width), median(te) * 1e3, median(tp) * 1e3, median(tp) / median(te),
            median(paired));
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return failed ? 1 : 0;
}
