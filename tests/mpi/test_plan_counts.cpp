// es::last_plan()'s figures for this rank (the executors' StepCosts) against the MPI calls the same
// call makes, counted by the scaling benchmarks' PMPI layer (bench/scale/mpi_count.hpp): what
// docs/scale.md ("The cost model against the counts") reads off the benchmark's output, asserted
// exactly, on every rank and as the maximum over ranks, at every world size the suite runs.
//
// This file is the only one that includes mpi_count.hpp. Its MPI_* definitions become the whole
// executable's entry points, each a plain forward to PMPI_* that books the call, so the suite's
// other tests make the same MPI calls as without it.
//
// Every case measures a repeated call: a first call agrees on its operands and prepares, which no
// plan describes. What a repeated call adds to its plan is one known piece of agreement, accounted
// for below by name and size.

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/einshard.hpp>

#include "mpi_count.hpp"
#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace test_plan_counts {

namespace es = einshard;
namespace et = einshard::testing;
namespace sc = einshard_scale;

namespace {

// The agreement a repeated call makes besides its plan's steps:
// - a call whose first collective is an all-reduce over the whole mesh carries the replay's check
//   in it, three more elements of its dtype (exec/fold.hpp), and so does the guarded backward
//   all-reduce of a call that moved nothing forward;
constexpr std::int64_t folded_check = 3 * sizeof(double);
// - any other call checks first, in one all-reduce of three integers over the mesh
//   (comm::still_agreed; einfft's repeated transforms alike);
constexpr std::int64_t replay_check = 3 * sizeof(std::int64_t);
// - the stencil operations agree on every call, in one all-reduce of the summary (exec/agreement.hpp).
constexpr auto stencil_summary = static_cast<std::int64_t>(es::exec::detail::summary_words * sizeof(std::int64_t));

/// What one call cost this rank, counted.
struct Counts {
  std::int64_t calls = 0;  ///< every MPI call
  std::int64_t allreduces = 0, allreduce_bytes = 0;
  std::int64_t sends = 0, sent = 0;         ///< MPI_Isend: messages and their bytes
  std::int64_t receives = 0, received = 0;  ///< MPI_Irecv
  std::int64_t waits = 0;                   ///< MPI_Waitall: one per exchange that posted messages
  /// Calls of any other kind: none in a repeated call.
  [[nodiscard]] std::int64_t others() const { return calls - allreduces - sends - receives - waits; }
};

template <class F>
Counts count(F&& f) {
  const auto before = sc::totals();
  f();
  const auto after = sc::totals();
  const auto of = [&](int fn, double sc::Stat::*field) {
    const auto i = static_cast<std::size_t>(fn);
    return static_cast<std::int64_t>(after[i].*field - before[i].*field);
  };
  Counts c;
  for (int fn = 0; fn < sc::f_count; ++fn) c.calls += of(fn, &sc::Stat::calls);
  c.allreduces = of(sc::f_allreduce, &sc::Stat::calls);
  c.allreduce_bytes = of(sc::f_allreduce, &sc::Stat::bytes);
  c.sends = of(sc::f_isend, &sc::Stat::calls);
  c.sent = of(sc::f_isend, &sc::Stat::bytes);
  c.receives = of(sc::f_irecv, &sc::Stat::calls);
  c.received = of(sc::f_irecv, &sc::Stat::received);
  c.waits = of(sc::f_waitall, &sc::Stat::calls);
  return c;
}

/// A figure of this rank's plan beside the same figure counted.
struct Figure {
  std::string what;
  std::int64_t planned = 0, counted = 0;
};

/// Each figure equal on this rank, and the maxima over ranks equal (what the benchmark prints
/// beside the counts' maxima). Collective over MPI_COMM_WORLD.
void check_figures(const std::vector<Figure>& figures) {
  std::vector<std::int64_t> most;
  for (const auto& f : figures) {
    INFO(f.what << ", this rank");
    CHECK(f.planned == f.counted);
    most.push_back(f.planned);
    most.push_back(f.counted);
  }
  MPI_Allreduce(MPI_IN_PLACE, most.data(), static_cast<int>(most.size()), MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  for (std::size_t i = 0; i < figures.size(); ++i) {
    INFO(figures[i].what << ", the maximum over ranks");
    CHECK(most[2 * i] == most[2 * i + 1]);
  }
}

/// The plan's steps of one kind.
std::vector<es::PlanStep> steps_named(const es::Plan& p, const std::string& name) {
  std::vector<es::PlanStep> out;
  for (const auto& s : p.steps)
    if (s.name == name) out.push_back(s);
  return out;
}

const auto dbl = at::TensorOptions().dtype(at::kDouble);

/// Balanced factors p >= q of n (the benchmark's 2-D mesh).
std::pair<int, int> two_factors(int n) {
  int q = 1;
  for (int f = 1; f * f <= n; ++f)
    if (n % f == 0) q = f;
  return {n / q, q};
}

/// A call's one all-reduce, with the replay's check folded in: `collectives` (the plan's, in that
/// direction) and the buffer and ring traffic of `planned` (its step's cost there) against the
/// counts; no other call.
void check_folded_all_reduce(const std::string& what, int collectives, const es::StepCost& planned, const Counts& c,
                             int ranks) {
  const auto buffer = c.allreduce_bytes - folded_check;
  const auto ring = es::ring_all_reduce(buffer, ranks);
  check_figures({{what + ": collectives", collectives, c.allreduces},
                 {what + ": all-reduce buffer", planned.peak_bytes, buffer},
                 {what + ": ring bytes sent", planned.bytes_sent, ring.bytes_sent},
                 {what + ": ring bytes received", planned.bytes_received, ring.bytes_received}});
  CHECK(c.others() == 0);
  CHECK(c.sends == 0);
}

/// A repeated differentiable call: its plan, and what its forward and its backward cost, counted.
struct Measured {
  es::Plan plan;
  Counts forward, backward;
};

/// Runs `call` once to agree and prepare, then again and its backward, counted.
template <class Call>
Measured measure(const Call& call) {
  (void)call();
  at::Tensor y;
  Measured m;
  m.forward = count([&] { y = call(); });
  m.plan = es::last_plan();
  const auto loss = (y.is_complex() ? at::real(y) : y).sum();
  m.backward = count([&] { loss.backward(); });
  return m;
}

/// A call whose steps exchange messages: its plan's bytes and exchanges against the counts, forward
/// and backward; besides them it makes one all-reduce of `agreement` bytes before its forward (none
/// when 0) and nothing else.
void check_exchanges(const Measured& m, std::int64_t agreement) {
  const auto forward = m.plan.total_forward(), backward = m.plan.total_backward();
  check_figures({{"forward bytes sent", forward.bytes_sent, m.forward.sent},
                 {"forward bytes received", forward.bytes_received, m.forward.received},
                 {"forward exchanges", forward.collectives, m.forward.waits},
                 {"backward bytes sent", backward.bytes_sent, m.backward.sent},
                 {"backward bytes received", backward.bytes_received, m.backward.received},
                 {"backward exchanges", backward.collectives, m.backward.waits}});
  CHECK(m.forward.allreduces == (agreement > 0 ? 1 : 0));
  CHECK(m.forward.allreduce_bytes == agreement);
  CHECK(m.forward.others() == 0);
  CHECK(m.backward.allreduces == 0);
  CHECK(m.backward.others() == 0);
}

/// A repeated all-to-all of rows into columns over a group of `rows.size()` ranks, this rank at
/// `c`: `move` turns this rank's rows of every column into every row of its columns. Against its
/// plan, and the messages the algorithm needs: this rank's rows to each other member that holds
/// columns, and back. Returns the forward counts.
template <class Move>
Counts check_repartition(const Move& move, const std::vector<std::int64_t>& rows, std::int64_t columns, int c) {
  const auto g = static_cast<int>(rows.size());
  const auto cols = es::compute_split_shapes(columns, g);
  const auto at_c = [&](const std::vector<std::int64_t>& v) { return v[static_cast<std::size_t>(c)]; };
  int out = 0, in = 0;
  for (int k = 0; k < g; ++k) {
    if (k == c) continue;
    out += at_c(rows) > 0 && cols[static_cast<std::size_t>(k)] > 0 ? 1 : 0;
    in += at_c(cols) > 0 && rows[static_cast<std::size_t>(k)] > 0 ? 1 : 0;
  }
  const auto x = at::randn({at_c(rows), columns}, dbl).requires_grad_(true);
  const auto m = measure([&] { return move(x); });
  REQUIRE(m.plan.names() == std::vector<std::string>{"alltoall_repartition"});
  check_exchanges(m, replay_check);
  // The bytes from the shapes alone: this rank's rows of every other member's columns.
  CHECK(m.forward.sent == at_c(rows) * (columns - at_c(cols)) * 8);
  CHECK(m.forward.sends == out);
  CHECK(m.forward.receives == in);
  CHECK(m.backward.sends == in);
  CHECK(m.backward.receives == out);
  return m.forward;
}

}  // namespace

TEST_CASE("plan counts: a tensor-parallel MLP step all-reduces what its plans say, each with the replay's check",
          "[mpi][plan_counts]") {
  const auto w = et::world();
  const int P = w.size;
  const es::Mesh mesh(MPI_COMM_WORLD, {P}, {"tp"});
  const es::Options o{.mesh = mesh};
  // 10 hidden features: uneven from 3 ranks on, one each but 3 on the last at 8.
  const auto f = es::compute_split_shapes(10, P)[static_cast<std::size_t>(w.rank)];
  at::manual_seed(3);
  const auto x = at::randn({4, 6}, dbl).requires_grad_(true);  // the same on every rank
  at::manual_seed(5 + w.rank);
  const auto w1 = at::randn({f, 6}, dbl).requires_grad_(true), w2 = at::randn({6, f}, dbl).requires_grad_(true);
  const auto column = [&] { return es::einshard<"b e, f/tp e -> b f/tp">(x, w1, o); };
  const auto row = [&](const at::Tensor& h) { return es::einshard<"b f/tp, e f/tp -> b e">(h, w2, o); };
  row(at::gelu(column())).square().sum().backward();

  at::Tensor h, y;
  const auto column_fwd = count([&] { h = column(); });
  const auto column_plan = es::last_plan();
  const auto g = at::gelu(h);
  const auto row_fwd = count([&] { y = row(g); });
  const auto row_plan = es::last_plan();
  const auto loss = y.square().sum();
  const auto bwd = count([&] { loss.backward(); });

  // The column-parallel half moves nothing forward (its input's gradient is summed backward).
  check_figures({{"column-parallel forward collectives", column_plan.total_forward().collectives, column_fwd.calls}});
  // The row-parallel half sums its partial result: one all-reduce, the replay's check folded in.
  const auto sums = steps_named(row_plan, "allreduce_forward_identity_backward");
  REQUIRE(sums.size() == 1);
  check_folded_all_reduce("row-parallel forward", row_plan.total_forward().collectives, sums[0].forward, row_fwd, P);
  CHECK(row_fwd.allreduce_bytes == 4 * 6 * 8 + folded_check);

  // Backward: the row-parallel half's gradients stay local; the column-parallel input's gradient
  // is the step's second all-reduce, guarded by the same three elements.
  const auto guarded = steps_named(column_plan, "identity_forward_allreduce_backward");
  REQUIRE(guarded.size() == 1);
  check_folded_all_reduce("backward",
                          column_plan.total_backward().collectives + row_plan.total_backward().collectives,
                          guarded[0].backward, bwd, P);
  CHECK(bwd.allreduce_bytes == 4 * 6 * 8 + folded_check);
}

TEST_CASE("plan counts: a repeated repartition over every rank is the plan's bytes in P - 1 messages",
          "[mpi][plan_counts]") {
  const auto w = et::world();
  const int P = w.size;
  const es::Mesh mesh(MPI_COMM_WORLD, {P}, {"tp"});
  const es::Options o{.mesh = mesh};
  const auto move = [&](const at::Tensor& x) { return es::einshard<"a/tp b -> a b/tp">(x, o); };
  at::manual_seed(9 + w.rank);
  SECTION("two rows and two columns per rank: 32 bytes to every other rank") {
    const auto c = check_repartition(move, es::compute_split_shapes(2 * P, P), 2 * P, w.rank);
    CHECK(c.sent == 32 * (P - 1));
    CHECK(c.sends == P - 1);
  }
  SECTION("5 rows and 20 columns: uneven, and past 5 ranks only the last holds rows") {
    (void)check_repartition(move, es::compute_split_shapes(5, P), 20, w.rank);
  }
}

TEST_CASE("plan counts: a repeated repartition in a row of a 2-D mesh is the plan's bytes in q - 1 messages",
          "[mpi][plan_counts]") {
  const auto w = et::world();
  const int P = w.size;
  if (P != 4 && P != 8) return;  // a mesh of 2 x 2 or 2 x 4: a row of q > 1 ranks, and more than one row
  const int q = P / 2;
  const es::Mesh mesh(MPI_COMM_WORLD, {2, q}, {"p", "q"});
  const es::Options o{.mesh = mesh};
  const auto move = [&](const at::Tensor& x) { return es::einshard<"a/q b -> a b/q">(x, o); };
  at::manual_seed(13);  // replicated over p: the same on every row
  const auto c = check_repartition(move, es::compute_split_shapes(2 * q, q), 2 * q, mesh.coordinate("q"));
  CHECK(c.sent == 32 * (q - 1));
  CHECK(c.sends == q - 1);
}

TEST_CASE("plan counts: a repartition between mesh dimensions runs its backward on its own schedule",
          "[mpi][plan_counts]") {
  // "a/p b -> a b/q": forward, rank (i, j) sends its rows' columns b_j to every (k, j); backward,
  // its input being whole over q, every (i, m) gets the gradient of rows a_i, so (i, j) sends them
  // its columns b_j: q - 1 messages where the forward sent p - 1.
  const auto w = et::world();
  const int P = w.size;
  if (P != 4 && P != 8) return;  // 2 x 2 and 2 x 4
  const int p = 2, q = P / 2;
  const es::Mesh mesh(MPI_COMM_WORLD, {p, q}, {"p", "q"});
  const es::Options o{.mesh = mesh};
  const std::int64_t a = 5, b = 10;  // uneven on both: rows 3, 2; columns 3, 3, 3, 1 at q = 4
  const auto rows = es::compute_split_shapes(a, p)[static_cast<std::size_t>(mesh.coordinate("p"))];
  const auto cols = es::compute_split_shapes(b, q)[static_cast<std::size_t>(mesh.coordinate("q"))];
  at::manual_seed(17);  // replicated over q: the same on every rank of a column
  const auto x = at::randn({rows, b}, dbl).requires_grad_(true);
  const auto m = measure([&] { return es::einshard<"a/p b -> a b/q">(x, o); });
  REQUIRE(m.plan.names() == std::vector<std::string>{"alltoall_repartition"});
  check_exchanges(m, replay_check);
  CHECK(m.forward.sent == rows * cols * (p - 1) * 8);
  CHECK(m.forward.received == (a - rows) * cols * 8);
  CHECK(m.forward.sends == p - 1);
  CHECK(m.backward.sent == rows * cols * (q - 1) * 8);
  CHECK(m.backward.received == rows * (b - cols) * 8);
  CHECK(m.backward.sends == q - 1);
}

TEST_CASE("plan counts: a repeated pencil FFT sends what its transposes say, after one check", "[mpi][plan_counts]") {
  const auto w = et::world();
  const auto [p, q] = two_factors(w.size);
  const es::Mesh mesh(MPI_COMM_WORLD, {p, q}, {"p", "q"});
  const auto cp = static_cast<std::size_t>(mesh.coordinate("p")), cq = static_cast<std::size_t>(mesh.coordinate("q"));
  // 3 x 5 x 4: uneven, and at 8 ranks (4 x 2) three of the four p coordinates hold no x.
  const auto x = at::randn({es::compute_split_shapes(3, p)[cp], es::compute_split_shapes(5, q)[cq], 4},
                           at::kComplexDouble)
                     .requires_grad_(true);
  const es::Options o{.mesh = mesh, .axes = {{"x", "kx"}, {"y", "ky"}, {"z", "kz"}}};
  const auto m = measure([&] { return es::einfft<"x/p y/q z -> kx ky/p kz/q">(x, o); });
  check_exchanges(m, replay_check);
  // Three transposes when both mesh dimensions split: x leaves p for kz, y leaves q for kx, and
  // the output's ky/p kz/q.
  if (p > 1 && q > 1) CHECK(steps_named(m.plan, "alltoall_repartition").size() == 3);
}

TEST_CASE("plan counts: a repeated halo exchange sends the plan's rows to the neighbours; its agreement is apart, "
          "and a prepared one makes none",
          "[mpi][plan_counts]") {
  const auto w = et::world();
  const auto [p, q] = two_factors(w.size);
  const es::Mesh mesh(MPI_COMM_WORLD, {p, q}, {"p", "q"});
  const auto cp = static_cast<std::size_t>(mesh.coordinate("p")), cq = static_cast<std::size_t>(mesh.coordinate("q"));
  // 2p + 1 by 2q + 1: uneven shards of one row or more.
  const auto x = at::randn({es::compute_split_shapes(2 * p + 1, p)[cp], es::compute_split_shapes(2 * q + 1, q)[cq]}, dbl)
                     .requires_grad_(true);
  const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};
  const auto m = measure([&] { return es::einhalo<"x/p y/q">(x, {{"x", 1}, {"y", 1}}, o); });
  // Outside the plan: the summary every stencil call agrees in.
  check_exchanges(m, stencil_summary);
  // One row to each neighbour along every axis split over more than one rank, and one from each.
  const int neighbours = 2 * ((p > 1 ? 1 : 0) + (q > 1 ? 1 : 0));
  CHECK(m.forward.sends == neighbours);
  CHECK(m.forward.receives == neighbours);
  CHECK(m.backward.sends == neighbours);
  CHECK(m.backward.receives == neighbours);
  // Prepared once: the same messages and no collective at all.
  const auto halo = es::prepare_halo<"x/p y/q">(x, {{"x", 1}, {"y", 1}}, o);
  const auto prepared = measure([&] { return halo(x); });
  check_exchanges(prepared, 0);
  CHECK(prepared.forward.sends == neighbours);
  CHECK(prepared.forward.receives == neighbours);
}

TEST_CASE("plan counts: a prepared window, roll or convolution makes no collective forward, only its plan's messages",
          "[mpi][plan_counts]") {
  const auto w = et::world();
  const auto [p, q] = two_factors(w.size);
  const es::Mesh mesh(MPI_COMM_WORLD, {p, q}, {"p", "q"});
  const auto cp = static_cast<std::size_t>(mesh.coordinate("p")), cq = static_cast<std::size_t>(mesh.coordinate("q"));
  const auto x = at::randn({es::compute_split_shapes(2 * p + 1, p)[cp], es::compute_split_shapes(2 * q + 1, q)[cq], 2},
                           dbl)
                     .requires_grad_(true);
  const es::Options o{.mesh = mesh, .boundary = es::Boundary::periodic};
  const int neighbours = 2 * ((p > 1 ? 1 : 0) + (q > 1 ? 1 : 0));
  const es::AxisMap windows{{"x", "kx"}, {"y", "ky"}};
  // One row each side of both axes, as the halo above: the same neighbours.
  const auto window = es::prepare_window<"x/p y/q c -> x/p y/q kx ky c">(x, windows, {{"x", 1}, {"y", 1}}, o);
  const auto windowed = measure([&] { return window(x); });
  check_exchanges(windowed, 0);
  CHECK(windowed.forward.sends == neighbours);
  CHECK(windowed.forward.receives == neighbours);
  // A roll by one fetches from the rank before and sends to the rank after, along each split axis.
  const auto roll = es::prepare_roll<"x/p y/q c">(x, {{"x", 1}, {"y", 1}}, {.mesh = mesh});
  const auto rolled = measure([&] { return roll(x); });
  check_exchanges(rolled, 0);
  CHECK(rolled.forward.sends == neighbours / 2);
  // A convolution's forward alike; its backward all-reduces the weight's gradient, as einconv's.
  const auto weight = at::randn({3, 2, 3, 3}, dbl).requires_grad_(true);
  const auto conv = es::prepare_conv<"x/p y/q c, o c kx ky -> x/p y/q o">(x, weight, windows, o);
  const auto convolved = measure([&] { return conv(x, weight); });
  const auto forward = convolved.plan.total_forward();
  check_figures({{"forward bytes sent", forward.bytes_sent, convolved.forward.sent},
                 {"forward bytes received", forward.bytes_received, convolved.forward.received},
                 {"forward exchanges", forward.collectives, convolved.forward.waits}});
  CHECK(convolved.forward.allreduces == 0);
  CHECK(convolved.forward.others() == 0);
  CHECK(convolved.forward.sends == neighbours);
  CHECK(convolved.backward.allreduces ==
        static_cast<std::int64_t>(steps_named(convolved.plan, "identity_forward_allreduce_backward").size()));
  CHECK(convolved.backward.sends == neighbours);
}

}  // namespace test_plan_counts
