// The communication layer (einshard::comm) on CPU tensors of every dtype, at any world size
// (ctest runs this binary at 1, 2, 3, 4 and 8 ranks): all-reduce, all-gather(v) along any
// dimension with uneven and empty pieces, reduce-scatter with both algorithms, broadcast, the
// point-to-point box exchange of the all-to-all engine, and the metadata all-gather.
//
// Every rank builds every rank's contribution from a deterministic pattern, so each rank computes
// the expected result by itself. Floating-point values are multiples of 0.5 small enough that every
// partial sum is exact in half and bfloat16: a sum computed on reinterpreted bytes (int16 adds of
// the bit patterns) would be far off, and a correct one equals the double sum rounded to the dtype.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/comm/collectives.hpp>
#include <einshard/einshard.hpp>
#include <einshard/plan/redistribute.hpp>

#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace test_collectives {

namespace es = einshard;
namespace comm = einshard::comm;

namespace {

using Sizes = std::vector<std::int64_t>;

const std::vector<at::ScalarType> all_dtypes{
    at::kFloat, at::kDouble, at::kLong,          at::kInt,           at::kChar, at::kByte,
    at::kBool,  at::kHalf,   at::kBFloat16,      at::kComplexFloat,  at::kComplexDouble};

/// A representative subset for paths whose dtype handling the full list already covers: 1, 2, 8
/// and 16 bytes, integer, bool, reduced-precision and complex.
const std::vector<at::ScalarType> some_dtypes{at::kDouble, at::kHalf, at::kChar, at::kBool, at::kComplexDouble};

bool representative(at::ScalarType t) {
  return std::find(some_dtypes.begin(), some_dtypes.end(), t) != some_dtypes.end();
}

bool is_complex(at::ScalarType t) { return at::isComplexType(t); }

/// Rank `r`'s deterministic contribution of shape `shape` in dtype `dt`. Values are small multiples
/// of 0.5 (floats) or small integers, so sums over 8 ranks stay exact in every dtype (one-byte
/// integers over 63).
at::Tensor pattern(at::ScalarType dt, at::IntArrayRef shape, int r, int salt = 0) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  const auto i = at::arange(n, at::kLong);
  if (dt == at::kBool) return ((i + r + salt) % 3 == 0).reshape(shape);
  // One-byte integers: 0, 1 or 2, so that sums stay in range up to 63 ranks (MPI's int8 sums may
  // saturate or wrap on overflow, depending on the implementation's vector code).
  if (at::elementSize(dt) == 1 && dt != at::kBool && !at::isFloatingType(dt))
    return ((i + salt + r) % 3).to(dt).reshape(shape);
  const bool integral = at::isIntegralType(dt, /*includeBool=*/false);
  const auto step = integral ? 1.0 : 0.5;
  const auto real = ((i + salt) % 5).to(at::kDouble) * step + r;
  if (is_complex(dt)) {
    const auto imag = -((i + 2 * salt) % 3).to(at::kDouble) * 0.5 + r * 0.5;
    return at::complex(real, imag).to(dt).reshape(shape);
  }
  return real.to(dt).reshape(shape);
}

/// The sum over ranks 0..P-1 of `pattern`, computed in double (or complex double) and rounded to
/// `dt` once; for bool, the logical or; integers in int64.
at::Tensor pattern_sum(at::ScalarType dt, at::IntArrayRef shape, int P, int salt = 0) {
  if (dt == at::kBool) {
    auto acc = at::zeros(shape, at::kBool);
    for (int r = 0; r < P; ++r) acc = at::logical_or(acc, pattern(dt, shape, r, salt));
    return acc;
  }
  const auto wide = is_complex(dt) ? at::kComplexDouble
                    : at::isIntegralType(dt, /*includeBool=*/false) ? at::kLong
                                                                   : at::kDouble;
  auto acc = at::zeros(shape, wide);
  for (int r = 0; r < P; ++r) acc = acc + pattern(dt, shape, r, salt).to(wide);
  return acc.to(dt);
}

/// Exact equality of dtype and values.
bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && at::equal(a, b);
}

/// A non-contiguous view with the given logical shape (the transpose of a contiguous tensor).
at::Tensor non_contiguous(const at::Tensor& x) {
  if (x.dim() < 2) return x;
  auto t = x.transpose(0, x.dim() - 1).contiguous().transpose(0, x.dim() - 1);
  return t;
}

/// Uneven piece sizes with empty pieces: rank r gets 0 when r % 3 == 1, else r + 1.
Sizes uneven_pieces(int P) {
  Sizes s;
  for (int r = 0; r < P; ++r) s.push_back(r % 3 == 1 ? 0 : r + 1);
  return s;
}

std::int64_t offset_of(const Sizes& s, int r) {
  std::int64_t o = 0;
  for (int q = 0; q < r; ++q) o += s[static_cast<std::size_t>(q)];
  return o;
}

/// Sets the reduce-scatter algorithm for a scope.
struct AlgorithmScope {
  comm::ReduceScatterAlgorithm saved = comm::algorithms().reduce_scatter;
  explicit AlgorithmScope(comm::ReduceScatterAlgorithm a) { comm::algorithms().reduce_scatter = a; }
  ~AlgorithmScope() { comm::algorithms().reduce_scatter = saved; }
  AlgorithmScope(const AlgorithmScope&) = delete;
  AlgorithmScope& operator=(const AlgorithmScope&) = delete;
};

std::string name_of(at::ScalarType t) { return c10::toString(t); }

/// The communicators the collectives are tested on: the world, and (at even sizes > 2) the "sp"
/// group of a (2, P/2) mesh, whose ranks are not the world's.
struct Comms {
  es::Mesh mesh;
  std::vector<std::pair<std::string, MPI_Comm>> list;
};
Comms comms() {
  const auto w = es::testing::world();
  Comms c;
  c.list.emplace_back("world", MPI_COMM_WORLD);
  if (w.size % 2 == 0 && w.size > 2) {
    c.mesh = es::Mesh(MPI_COMM_WORLD, {2, w.size / 2}, {"dp", "sp"});
    c.list.emplace_back("sp of (2,P/2)", c.mesh.comm("sp"));
    c.list.emplace_back("dp of (2,P/2)", c.mesh.comm("dp"));
  }
  return c;
}

}  // namespace

TEST_CASE("collectives: all_reduce sums every dtype in its own arithmetic", "[mpi][collectives]") {
  const auto c = comms();
  for (const auto& [label, com] : c.list) {
    const int P = comm::size_of(com), me = comm::rank_of(com);
    for (auto dt : all_dtypes) {
      INFO(label << ", dtype " << name_of(dt));
      const auto x = pattern(dt, {3, 4}, me);
      const auto y = comm::all_reduce(x, com);
      CHECK(same(y, pattern_sum(dt, {3, 4}, P)));
      // The input is not modified.
      CHECK(same(x, pattern(dt, {3, 4}, me)));
      // Non-contiguous input, and a 0-d tensor.
      if (representative(dt)) CHECK(same(comm::all_reduce(non_contiguous(x), com), pattern_sum(dt, {3, 4}, P)));
      const auto s = pattern(dt, {}, me, 1);
      const auto ys = comm::all_reduce(s, com);
      CHECK(ys.dim() == 0);
      CHECK(same(ys, pattern_sum(dt, {}, P, 1)));
      // Empty tensors are fine.
      if (representative(dt))
        CHECK(comm::all_reduce(at::empty({0, 3}, at::TensorOptions().dtype(dt)), com).sizes() ==
            at::IntArrayRef{0, 3});
    }
  }
}

TEST_CASE("collectives: half and bfloat16 sums are computed, not reinterpreted", "[mpi][collectives]") {
  const auto w = es::testing::world();
  for (auto dt : {at::kHalf, at::kBFloat16}) {
    INFO(name_of(dt));
    // 1.5 on every rank: the bit patterns summed as integers would give a huge or negative number.
    const auto y = comm::all_reduce(at::full({5}, 1.5, at::TensorOptions().dtype(dt)), MPI_COMM_WORLD);
    CHECK(same(y, at::full({5}, 1.5 * w.size, at::TensorOptions().dtype(dt))));
    // Random values: the sum equals the float sum rounded to the dtype, up to the rounding of the
    // intermediate sums (at most one unit in the last place per addition).
    at::manual_seed(99);
    std::vector<at::Tensor> all;
    for (int r = 0; r < w.size; ++r) all.push_back(at::rand({64}, at::kFloat).to(dt));
    const auto got = comm::all_reduce(all[static_cast<std::size_t>(w.rank)], MPI_COMM_WORLD);
    auto exact = at::zeros({64}, at::kDouble);
    for (const auto& a : all) exact += a.to(at::kDouble);
    const double ulp = dt == at::kHalf ? 1.0 / 1024 : 1.0 / 128;
    const auto err = (got.to(at::kDouble) - exact).abs();
    CHECK((err <= exact.abs() * ulp * w.size + 1e-6).all().item<bool>());
    CHECK(got.scalar_type() == dt);
  }
}

TEST_CASE("collectives: all_gather along dim 0, uneven and empty pieces", "[mpi][collectives]") {
  const auto c = comms();
  for (const auto& [label, com] : c.list) {
    const int P = comm::size_of(com), me = comm::rank_of(com);
    for (const auto& sizes : {Sizes(static_cast<std::size_t>(P), 2), uneven_pieces(P),
                              Sizes(static_cast<std::size_t>(P), 0)})
      for (auto dt : all_dtypes) {
        INFO(label << ", dtype " << name_of(dt) << ", my piece " << sizes[static_cast<std::size_t>(me)]);
        std::vector<at::Tensor> pieces;
        for (int r = 0; r < P; ++r) pieces.push_back(pattern(dt, {sizes[static_cast<std::size_t>(r)], 3}, r));
        const auto expected = at::cat(pieces, 0);
        const auto& mine = pieces[static_cast<std::size_t>(me)];
        CHECK(same(comm::all_gather(mine, 0, sizes, com), expected));
        if (representative(dt)) CHECK(same(comm::all_gather(non_contiguous(mine), 0, sizes, com), expected));
      }
  }
}

TEST_CASE("collectives: all_gather along inner dimensions", "[mpi][collectives]") {
  const auto c = comms();
  for (const auto& [label, com] : c.list) {
    const int P = comm::size_of(com), me = comm::rank_of(com);
    for (const auto& sizes : {Sizes(static_cast<std::size_t>(P), 2), uneven_pieces(P)})
      for (auto dt : some_dtypes)
        for (std::int64_t dim : {1, 2}) {
          INFO(label << ", dtype " << name_of(dt) << ", dim " << dim << ", my piece "
                     << sizes[static_cast<std::size_t>(me)]);
          std::vector<at::Tensor> pieces;
          for (int r = 0; r < P; ++r) {
            std::vector<std::int64_t> shape{2, 3, 3};
            shape[static_cast<std::size_t>(dim)] = sizes[static_cast<std::size_t>(r)];
            pieces.push_back(pattern(dt, shape, r));
          }
          const auto expected = at::cat(pieces, dim);
          const auto& mine = pieces[static_cast<std::size_t>(me)];
          const auto got = comm::all_gather(mine, dim, sizes, com);
          CHECK(got.sizes() == expected.sizes());
          CHECK(same(got, expected));
          CHECK(same(comm::all_gather(non_contiguous(mine), dim, sizes, com), expected));
        }
  }
}

TEST_CASE("collectives: reduce_scatter, both algorithms, uneven, empty, inner dimension",
          "[mpi][collectives]") {
  const auto c = comms();
  for (auto algorithm : {comm::ReduceScatterAlgorithm::native, comm::ReduceScatterAlgorithm::allreduce_slice}) {
    const AlgorithmScope scope(algorithm);
    for (const auto& [label, com] : c.list) {
      const int P = comm::size_of(com), me = comm::rank_of(com);
      for (const auto& sizes : {Sizes(static_cast<std::size_t>(P), 2), uneven_pieces(P),
                                Sizes(static_cast<std::size_t>(P), 0)})
        for (auto dt : all_dtypes)
          for (std::int64_t dim : {0, 1}) {
            // MPI_Reduce_scatter runs only for dim 0 with the native algorithm; every other case is
            // an all-reduce and a slice, whose dtype handling needs no second full sweep.
            const bool full_sweep = dim == 0 && algorithm == comm::ReduceScatterAlgorithm::native;
            if (!full_sweep && dt != at::kDouble && dt != at::kHalf) continue;
            INFO(label << ", algorithm " << (algorithm == comm::ReduceScatterAlgorithm::native ? "native" : "allreduce_slice")
                       << ", dtype " << name_of(dt) << ", dim " << dim);
            std::int64_t total = 0;
            for (auto s : sizes) total += s;
            std::vector<std::int64_t> shape{3, 2};
            shape[static_cast<std::size_t>(dim)] = total;
            const auto x = pattern(dt, shape, me);
            const auto sum = pattern_sum(dt, shape, P);
            const auto expected =
                sum.narrow(dim, offset_of(sizes, me), sizes[static_cast<std::size_t>(me)]);
            const auto got = comm::reduce_scatter(x, dim, sizes, com);
            CHECK(got.sizes() == expected.sizes());
            CHECK(same(got, expected));
            if (dt == at::kDouble) CHECK(same(comm::reduce_scatter(non_contiguous(x), dim, sizes, com), expected));
          }
    }
  }
}

TEST_CASE("collectives: reduce_scatter rejects pieces that do not cover the dimension",
          "[mpi][collectives]") {
  const auto w = es::testing::world();
  // The same bad arguments on every rank: every rank throws before communicating.
  Sizes sizes(static_cast<std::size_t>(w.size), 1);
  CHECK_THROWS_AS(comm::reduce_scatter(at::zeros({w.size + 1, 2}), 0, sizes, MPI_COMM_WORLD), es::Error);
  CHECK_THROWS_AS(comm::reduce_scatter(at::zeros({w.size, 2}), 0, Sizes(static_cast<std::size_t>(w.size) + 1, 0),
                                       MPI_COMM_WORLD),
                  es::Error);
  CHECK_THROWS_AS(comm::all_gather(at::zeros({1, 2}), 0, Sizes(static_cast<std::size_t>(w.size) + 1, 1),
                                   MPI_COMM_WORLD),
                  es::Error);
}

TEST_CASE("collectives: broadcast from any root, every dtype, 0-d and non-contiguous",
          "[mpi][collectives]") {
  const auto c = comms();
  for (const auto& [label, com] : c.list) {
    const int P = comm::size_of(com), me = comm::rank_of(com);
    for (int root : {0, P - 1})
      for (auto dt : all_dtypes) {
        INFO(label << ", root " << root << ", dtype " << name_of(dt));
        // Non-roots pass a tensor of the right shape and dtype with other values.
        const auto x = pattern(dt, {4, 3}, me);
        const auto got = comm::broadcast(non_contiguous(x), root, com);
        CHECK(same(got, pattern(dt, {4, 3}, root)));
        if (!representative(dt)) continue;
        const auto s = comm::broadcast(pattern(dt, {}, me, 2), root, com);
        CHECK(s.dim() == 0);
        CHECK(same(s, pattern(dt, {}, root, 2)));
      }
  }
}

TEST_CASE("collectives: exchange_boxes moves hand-written boxes", "[mpi][collectives]") {
  const auto w = es::testing::world();
  const int P = w.size, me = w.rank;
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  for (auto dt : all_dtypes) {
    INFO("dtype " << name_of(dt));
    // Each rank's input is a 4x5 pattern of its own; it sends rows 0..1, columns 1..3 to the next
    // rank (a 2x3 box), which puts it at rows 2..3, columns 0..2 of its 4x4 output; a local copy
    // moves input row 3, columns 0..3 to output row 0. The ring needs two or more ranks.
    const auto x = pattern(dt, {4, 5}, me);
    std::vector<comm::Transfer> sends, recvs;
    if (P > 1) {
      sends.push_back({next, {{0, 1}, {2, 3}}});
      recvs.push_back({prev, {{2, 0}, {2, 3}}});
    }
    sends.push_back({me, {{3, 0}, {1, 4}}});
    recvs.push_back({me, {{0, 0}, {1, 4}}});
    const auto out = comm::exchange_boxes(non_contiguous(x), {4, 4}, sends, recvs, MPI_COMM_WORLD);
    CHECK(out.sizes() == at::IntArrayRef{4, 4});
    CHECK(same(out.narrow(0, 0, 1), x.narrow(0, 3, 1).narrow(1, 0, 4)));
    if (P > 1)
      CHECK(same(out.narrow(0, 2, 2).narrow(1, 0, 3),
                 pattern(dt, {4, 5}, prev).narrow(0, 0, 2).narrow(1, 1, 3)));
  }
  // A 0-d tensor travels whole (its box has no dimensions, one element).
  if (P > 1) {
    const auto s = at::scalar_tensor(static_cast<double>(me) + 0.5, at::kDouble);
    const auto out = comm::exchange_boxes(s, {}, {{next, {{}, {}}}}, {{prev, {{}, {}}}}, MPI_COMM_WORLD);
    CHECK(out.dim() == 0);
    CHECK(out.item<double>() == prev + 0.5);
  }
}

TEST_CASE("collectives: exchange_boxes runs schedule_redistribute repartitions", "[mpi][collectives]") {
  // a/dp b -> a b/dp on a 1-D mesh of the world, uneven (17 x 10 over P) and with empty pieces.
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"dp"});
  const es::MeshShape& shape = mesh.shape();
  for (const auto& [A, B] : {std::pair<std::int64_t, std::int64_t>{17, 10}, {3, 2}, {0, 5}}) {
    const auto sa = es::compute_split_shapes(A, w.size), sb = es::compute_split_shapes(B, w.size);
    const auto dp = shape.group("dp");
    const es::plan::Layout from{{{"a", dp}, {"b", {}}}, {}}, to{{{"a", {}}, {"b", dp}}, {}};
    const std::vector<std::int64_t> global{A, B};
    const auto shards = [&](std::size_t axis, const es::Group&) -> const std::vector<std::int64_t>& {
      return axis == 0 ? sa : sb;
    };
    const auto coords = [&](int r) { return mesh.coordinates_of(r); };
    const auto forward = es::plan::schedule_redistribute(from, to, global, shards, shape, coords, w.rank, w.size);
    const auto backward = es::plan::schedule_redistribute(to, from, global, shards, shape, coords, w.rank, w.size);
    for (auto dt : all_dtypes) {
      INFO("A=" << A << " B=" << B << " dtype " << name_of(dt));
      const auto full = pattern(dt, {A, B}, 0);
      const auto mine = full.narrow(0, offset_of(sa, w.rank), sa[static_cast<std::size_t>(w.rank)]);
      const auto y = comm::exchange_boxes(mine, forward.out_shape, forward.sends, forward.recvs, mesh.comm());
      CHECK(same(y, full.narrow(1, offset_of(sb, w.rank), sb[static_cast<std::size_t>(w.rank)])));
      const auto back = comm::exchange_boxes(non_contiguous(y), backward.out_shape, backward.sends,
                                             backward.recvs, mesh.comm());
      CHECK(same(back, mine));
      // Contiguous input: its whole-row boxes travel in place, the others through the scratch buffer.
      CHECK(same(comm::exchange_boxes(y, backward.out_shape, backward.sends, backward.recvs, mesh.comm()), mine));
      CHECK(same(comm::exchange_boxes(mine.contiguous(), forward.out_shape, forward.sends, forward.recvs,
                                      mesh.comm()),
                 y));
    }
  }
}

TEST_CASE("collectives: all_gather_values", "[mpi][collectives]") {
  const auto w = es::testing::world();
  const std::vector<std::int64_t> mine{w.rank, static_cast<std::int64_t>(w.rank) * w.rank,
                                       -w.rank - (std::int64_t{1} << 40)};
  const auto all = comm::all_gather_values(mine, MPI_COMM_WORLD);
  REQUIRE(all.size() == 3 * static_cast<std::size_t>(w.size));
  for (int r = 0; r < w.size; ++r) {
    CHECK(all[3 * static_cast<std::size_t>(r)] == r);
    CHECK(all[3 * static_cast<std::size_t>(r) + 1] == static_cast<std::int64_t>(r) * r);
    CHECK(all[3 * static_cast<std::size_t>(r) + 2] == -r - (std::int64_t{1} << 40));
  }
  CHECK(comm::all_gather_values(std::vector<std::int64_t>{}, MPI_COMM_WORLD).empty());
}

}  // namespace test_collectives
