// [gpu]: every notation operation family on CUDA tensors, values and gradients against the same
// computation on CPU tensors, over every communication backend this program and world size can
// use: MPI (direct when CUDA-aware, else staged through pinned host memory), MPI forced through
// host buffers, and NCCL (one GPU per rank: world size 1 on a one-GPU machine, or when
// EINSHARD_TEST_NCCL=1). Without a GPU every case says so and returns (Catch2 2 has no SKIP).
//
// This translation unit includes comm/nccl.hpp, which registers NCCL with the program (it is kept
// out of einshard.hpp: it brings the CUDA runtime headers).

#include <ATen/ATen.h>
#include <mpi.h>

#include <einshard/comm/backend.hpp>
#include <einshard/comm/collectives.hpp>
#include <einshard/comm/nccl.hpp>
#include <einshard/einshard.hpp>
#include <einshard/sparse.hpp>

#include "test_support.hpp"

#include <catch2/catch.hpp>  // last: its CHECK must win over any logging macro of the same name

#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace test_gpu {

namespace es = einshard;
namespace comm = einshard::comm;
namespace et = einshard::testing;

namespace {

/// The CUDA device of this rank (ranks share devices round-robin), or nullopt without a GPU.
std::optional<at::Device> rank_device() {
  if (!at::hasCUDA()) return std::nullopt;
  const auto n = at::getNumGPUs();
  if (n == 0) return std::nullopt;
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(et::world().rank % static_cast<int>(n)));
}

bool no_gpu() {
  // Every rank decides the same: a rank without a GPU makes every rank skip (no rank is left in a
  // collective the others skipped).
  int have = rank_device().has_value() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (have == 0) WARN("[gpu] skipped: no CUDA device on some rank (torch::cuda::is_available() is false)");
  return have == 0;
}

struct NamedBackend {
  std::string name;
  comm::BackendOptions options;
};

/// The backends this run can exercise on CUDA tensors.
std::vector<NamedBackend> backends() {
  std::vector<NamedBackend> b{{"mpi", {.backend = comm::BackendKind::mpi}},
                              {"mpi staged", {.backend = comm::BackendKind::mpi, .stage_through_host = true}}};
  const char* force = std::getenv("EINSHARD_TEST_NCCL");
  const bool one_gpu_per_rank = et::world().size <= static_cast<int>(at::getNumGPUs());
  if (comm::nccl_available() && (one_gpu_per_rank || (force != nullptr && std::string(force) == "1")))
    b.push_back({"nccl", {.backend = comm::BackendKind::nccl}});
  return b;
}

/// Runs `op` on `inputs` (CPU) and on their CUDA copies over a mesh of every backend; checks the
/// values and the gradients of a fixed scalar of the output against the CPU run.
void check_on_gpu(const std::vector<int>& sizes, const std::vector<std::string>& names, const std::vector<at::Tensor>& inputs,
                  const std::function<at::Tensor(const std::vector<at::Tensor>&, const es::Mesh&)>& op,
                  double tolerance = 1e-10) {
  const auto device = *rank_device();
  const es::Mesh cpu_mesh(MPI_COMM_WORLD, sizes, names);
  auto run = [&](const es::Mesh& mesh, const at::Device& where) {
    std::vector<at::Tensor> xs;
    for (const auto& x : inputs) xs.push_back(x.to(where).detach().requires_grad_(x.is_floating_point() || x.is_complex()));
    auto y = op(xs, mesh);
    // A real scalar that weighs every output entry differently, so every gradient entry is checked.
    const auto w = at::arange(y.numel(), at::TensorOptions(at::kDouble).device(where)).reshape(y.sizes()).to(y.scalar_type());
    auto loss = at::real((y * w).sum());
    loss.backward();
    std::vector<at::Tensor> out{y.detach().cpu()};
    for (const auto& x : xs) out.push_back(x.grad().defined() ? x.grad().cpu() : at::zeros({1}));
    return out;
  };
  const auto want = run(cpu_mesh, at::kCPU);
  for (const auto& b : backends()) {
    INFO("backend " << b.name);
    const es::Mesh mesh(MPI_COMM_WORLD, sizes, names, b.options);
    const auto got = run(mesh, device);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO((i == 0 ? std::string("values") : "gradient of input " + std::to_string(i)));
      CHECK(got[i].sizes() == want[i].sizes());
      CHECK(at::allclose(got[i], want[i], tolerance, tolerance));
    }
  }
}

/// Rank r's shard of `full` split along `dim` by the split rule over `parts` ranks at coordinate `at`.
at::Tensor shard(const at::Tensor& full, std::int64_t dim, int parts, int at_) {
  const auto s = es::compute_split_shapes(full.size(dim), parts);
  std::int64_t start = 0;
  for (int c = 0; c < at_; ++c) start += s[static_cast<std::size_t>(c)];
  return full.narrow(dim, start, s[static_cast<std::size_t>(at_)]).contiguous();
}

}  // namespace

TEST_CASE("gpu: collectives of every backend on CUDA tensors equal the CPU's", "[gpu]") {
  if (no_gpu()) return;
  const auto w = et::world();
  const auto device = *rank_device();
  const auto rows = es::compute_split_shapes(2 * w.size + 1, w.size);
  for (const auto& b : backends()) {
    INFO("backend " << b.name);
    const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"}, b.options);
    const auto c = mesh.comm("tp");
    for (auto dt : {at::kDouble, at::kFloat, at::kHalf, at::kComplexDouble, at::kLong}) {
      INFO("dtype " << c10::toString(dt));
      const auto x = (at::arange(15, at::kDouble).reshape({3, 5}) * 0.5 + w.rank).to(dt);
      const auto g = x.to(device);
      CHECK(at::equal(comm::all_reduce(g, c).cpu(), comm::all_reduce(x, c)));
      CHECK(at::equal(comm::broadcast(g, 0, c).cpu(), comm::broadcast(x, 0, c)));
      const auto mine = rows[static_cast<std::size_t>(w.rank)];
      const auto p = (at::arange(2 * mine, at::kDouble).reshape({2, mine}) + w.rank).to(dt);
      CHECK(at::equal(comm::all_gather(p.to(device), 1, rows, c).cpu(), comm::all_gather(p, 1, rows, c)));
      const auto whole = (at::arange(2 * (2 * w.size + 1), at::kDouble).reshape({2, 2 * w.size + 1}) + w.rank).to(dt);
      CHECK(at::equal(comm::reduce_scatter(whole.to(device), 1, rows, c).cpu(), comm::reduce_scatter(whole, 1, rows, c)));
    }
  }
}

TEST_CASE("gpu: einshard contractions and redistributions, values and gradients", "[gpu]") {
  if (no_gpu()) return;
  const auto w = et::world();
  at::manual_seed(5);
  const auto X = at::randn({6, 2 * w.size + 1}, at::kDouble), Y = at::randn({2 * w.size + 1, 4}, at::kDouble);
  const auto x = shard(X, 1, w.size, w.rank), y = shard(Y, 0, w.size, w.rank);
  for (const std::string n : {"l f/tp, f/tp e -> l e", "l f/tp, f/tp e -> l/tp e"})
    check_on_gpu({w.size}, {"tp"}, {x, y}, [&](const auto& in, const es::Mesh& m) {
      return es::einshard(n, {in[0], in[1]}, {.mesh = m});
    });
  for (const std::string n : {"l f/tp -> l/tp f", "l f/tp -> l f", "l f/tp -> f l"})
    check_on_gpu({w.size}, {"tp"}, {x}, [&](const auto& in, const es::Mesh& m) {
      return es::einshard(n, {in[0]}, {.mesh = m});
    });
}

TEST_CASE("gpu: einfft (cuFFT through torch), values and gradients", "[gpu]") {
  if (no_gpu()) return;
  const auto w = et::world();
  at::manual_seed(6);
  const auto X = at::randn({3, 2 * w.size + 2, 5}, at::kComplexDouble);
  check_on_gpu({w.size}, {"dp"}, {shard(X, 1, w.size, w.rank)}, [&](const auto& in, const es::Mesh& m) {
    return es::einfft("b x/dp y -> b kx ky/dp", {in[0]}, {.mesh = m, .axes = {{"x", "kx"}, {"y", "ky"}}});
  });
}

TEST_CASE("gpu: einhalo, einwindow, einconv, einroll, values and gradients", "[gpu]") {
  if (no_gpu()) return;
  const auto w = et::world();
  at::manual_seed(7);
  const auto X = at::randn({2, 2 * w.size + 3, 5, 3}, at::kDouble);
  const auto x = shard(X, 1, w.size, w.rank);
  check_on_gpu({w.size}, {"px"}, {x}, [&](const auto& in, const es::Mesh& m) {
    return es::einhalo("b h/px w c", in[0], {{"h", 2}, {"w", {1, 0}}}, {.mesh = m, .boundary = es::Boundary::periodic});
  });
  check_on_gpu({w.size}, {"px"}, {x}, [&](const auto& in, const es::Mesh& m) {
    return es::einwindow("b h/px w c -> b h/px w kh kw c", in[0], {{"h", "kh"}, {"w", "kw"}}, {{"h", 1}, {"w", 1}},
                         {.mesh = m});
  });
  const auto W = at::randn({4, 3, 3, 3}, at::kDouble);
  check_on_gpu({w.size}, {"px"}, {x, W}, [&](const auto& in, const es::Mesh& m) {
    return es::einconv("b h/px w c, o c kh kw -> b h/px w o", in[0], in[1], {{"h", "kh"}, {"w", "kw"}}, {.mesh = m});
  });
  check_on_gpu({w.size}, {"px"}, {x}, [&](const auto& in, const es::Mesh& m) {
    return es::einroll("b h/px w c", in[0], {{"h", 3}, {"w", -1}}, {.mesh = m});
  });
}

TEST_CASE("gpu: a CUDA tensor on one rank and a CPU tensor on another is the same error everywhere", "[gpu]") {
  if (no_gpu()) return;
  const auto w = et::world();
  if (w.size < 2) return;
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"tp"}, {.backend = comm::BackendKind::mpi});
  auto x = at::ones({2, 3});
  if (w.rank == 1) x = x.to(*rank_device());
  std::string what;
  try {
    (void)es::einshard("a b/tp -> a b", {x}, {.mesh = mesh});
  } catch (const es::Error& e) {
    what = e.what();
  }
  CHECK_THAT(what, Catch::Contains("one device kind"));
}

namespace {

/// This rank's rows (contiguous blocks) of the 2-D 5-point Poisson matrix on an n x n grid, as
/// COO on `device`.
std::array<at::Tensor, 3> poisson_rows(std::int64_t n, const at::Device& device) {
  const auto [first, last] = einshard::sparse::simple_rows(n * n, MPI_COMM_WORLD);
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  for (auto i = first; i < last; ++i) {
    const auto x = i % n, y = i / n;
    r.push_back(i), c.push_back(i), v.push_back(4.0);
    if (x > 0) r.push_back(i), c.push_back(i - 1), v.push_back(-1.0);
    if (x + 1 < n) r.push_back(i), c.push_back(i + 1), v.push_back(-1.0);
    if (y > 0) r.push_back(i), c.push_back(i - n), v.push_back(-1.0);
    if (y + 1 < n) r.push_back(i), c.push_back(i + n), v.push_back(-1.0);
  }
  const auto k = static_cast<std::int64_t>(v.size());
  return {at::tensor(v, at::kDouble).view({k}).to(device), at::tensor(r, at::kLong).view({k}).to(device),
          at::tensor(c, at::kLong).view({k}).to(device)};
}

}  // namespace

TEST_CASE("gpu: sparse solves on CUDA tensors equal the CPU's, every method and device preconditioner",
          "[gpu][sparse]") {
  namespace sp = einshard::sparse;
  if (no_gpu()) return;
  const auto dev = *rank_device();
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const std::int64_t n = 12;
  const auto [vc, rc, cc] = poisson_rows(n, at::kCPU);
  const auto [vg, rg, cg] = poisson_rows(n, dev);
  const auto Dc = sp::DSparseTensor::from_local(vc, rc, cc, {n * n, n * n}, mesh);
  const auto Dg = sp::DSparseTensor::from_local(vg, rg, cg, {n * n, n * n}, mesh);
  CHECK(sp::kernels_for(Dg.values()) == "generic");
  CHECK(Dg.values().device() == dev);
  CHECK(Dc.to(dev).values().device() == dev);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto b = at::randn({n * n}, gen, at::kDouble);
  const auto bc = Dc.scatter(b);
  const auto bg = Dg.vector(bc.local().to(dev));
  CHECK((Dg.matvec(bg).local().cpu() - Dc.matvec(bc).local()).abs().max().item<double>() < 1e-12);
  CHECK((Dg.rmatvec(bg).local().cpu() - Dc.rmatvec(bc).local()).abs().max().item<double>() < 1e-12);
  CHECK((Dc.to(dev).matvec(bg).local().cpu() - Dc.matvec(bc).local()).abs().max().item<double>() < 1e-12);
  using M = sp::Method;
  using P = sp::Preconditioner;
  for (auto m : {M::cg, M::minres, M::gmres, M::fgmres, M::bicgstab})
    for (auto pc : {P::none, P::jacobi, P::l1_jacobi, P::chebyshev, P::neumann}) {
      CAPTURE(sp::to_string(m), sp::to_string(pc));
      const sp::SolveOptions o{.method = m, .preconditioner = pc, .rtol = 1e-10};
      const auto sc = Dc.solve(bc, o);
      const auto sg = Dg.solve(bg, o);
      CHECK(sg.info.converged);
      CHECK(sg.x.local().device() == dev);
      CHECK((sg.x.local().cpu() - sc.x.local()).norm().item<double>() <= 1e-8 * sc.x.local().norm().item<double>() + 1e-12);
    }
  // Block CG and pipelined CG, three right-hand sides.
  const auto B = at::randn({n * n, 3}, gen, at::kDouble);
  const auto Bc = Dc.scatter(B);
  const auto sc = Dc.solve(Bc, {.preconditioner = P::jacobi, .rtol = 1e-10});
  const auto sg = Dg.solve(Dg.vector(Bc.local().to(dev)), {.preconditioner = P::jacobi, .rtol = 1e-10});
  CHECK((sg.x.local().cpu() - sc.x.local()).abs().max().item<double>() < 1e-8);
  const auto pc = Dg.solve(bg, {.rtol = 1e-10, .cg_variant = sp::CgVariant::pipelined});
  CHECK(pc.info.converged);
  // Mixed precision on the device: the float32 copy and its iterations stay there.
  const auto reference = Dc.solve(bc, {.preconditioner = P::jacobi, .rtol = 1e-10});
  const auto mixed = Dg.solve(bg, {.preconditioner = P::jacobi, .rtol = 1e-10, .precision = sp::Precision::mixed});
  CHECK(mixed.info.converged);
  CHECK((mixed.x.local().cpu() - reference.x.local()).norm().item<double>() <=
        1e-8 * reference.x.local().norm().item<double>() + 1e-12);
  // Saved from the host, loaded onto the device.
  long id = static_cast<long>(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const auto dir = (std::filesystem::temp_directory_path() / ("einshard_gpu_load_" + std::to_string(id))).string();
  Dc.save(dir);
  const auto loaded = sp::DSparseTensor::load(dir, mesh, {.device = dev});
  CHECK(loaded.values().device() == dev);
  CHECK((loaded.matvec(loaded.vector(bc.local().to(dev))).local().cpu() - Dc.matvec(bc).local()).abs().max().item<double>() <
        1e-12);
  MPI_Barrier(MPI_COMM_WORLD);
  if (w.rank == 0) std::filesystem::remove_all(dir);
  // AMG on the device: the hierarchy of a float64 host copy, each V-cycle staged through the host.
  const auto amg_host = Dc.solve(bc, {.preconditioner = P::amg, .rtol = 1e-10});
  const auto amg_device = Dg.solve(bg, {.preconditioner = P::amg, .rtol = 1e-10});
  CHECK(amg_device.info.converged);
  CHECK(std::abs(amg_device.info.iterations - amg_host.info.iterations) <= 1);
  CHECK(amg_device.x.local().device() == dev);
  CHECK((amg_device.x.local().cpu() - amg_host.x.local()).norm().item<double>() <=
        1e-8 * amg_host.x.local().norm().item<double>() + 1e-12);
  // A host-only preconditioner names the device ones, on every rank.
  std::string what;
  try {
    (void)Dg.solve(bg, {.preconditioner = P::block_jacobi});
  } catch (const es::Error& e) {
    what = e.what();
  }
  CHECK_THAT(what, Catch::Contains("runs on the host only") && Catch::Contains("smoothed_aggregation or amg"));
}

TEST_CASE("gpu: the sparse methods with passes of their own on CUDA tensors equal the CPU's", "[gpu][sparse]") {
  // Block BiCGStab and MINRES, LSQR, LSMR, eigsh, logdet, connected components, Newton, save and
  // load, a Matrix Market read: their arithmetic besides the products is ATen operations on the
  // device, their bookkeeping explicit host copies.
  namespace sp = einshard::sparse;
  if (no_gpu()) return;
  const auto dev = *rank_device();
  const auto w = et::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const std::int64_t n = 10, N = n * n;
  const auto [vc, rc, cc] = poisson_rows(n, at::kCPU);
  const auto Dc = sp::DSparseTensor::from_local(vc, rc, cc, {N, N}, mesh);
  const auto Dg = Dc.to(dev);
  REQUIRE(sp::kernels_for(Dg.values()) == "generic");
  const auto close = [](const at::Tensor& got, const at::Tensor& want, double tol) {
    CHECK(got.device().is_cuda());
    CHECK((got.cpu() - want).abs().max().item<double>() <= tol * (1.0 + want.abs().max().item<double>()));
  };
  using P = sp::Preconditioner;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto Bc = Dc.scatter(at::randn({N, 3}, gen, at::kDouble));
  const auto Bg = Dg.vector(Bc.local().to(dev));
  for (auto m : {sp::Method::bicgstab, sp::Method::minres})
    for (auto pc : {P::none, P::jacobi, P::neumann}) {
      CAPTURE(sp::to_string(m), sp::to_string(pc));
      const sp::SolveOptions o{.method = m, .preconditioner = pc, .rtol = 1e-10};
      const auto sg = Dg.solve(Bg, o);
      CHECK(sg.info.converged);
      close(sg.x.local(), Dc.solve(Bc, o).x.local(), 1e-8);
    }
  const auto bc = Dc.scatter(at::randn({N}, gen, at::kDouble));
  const auto bg = Dg.vector(bc.local().to(dev));
  const sp::LeastSquaresOptions lo{.damp = 0.5, .atol = 1e-12, .btol = 1e-12};
  close(Dg.lsqr(bg, lo).x.local(), Dc.lsqr(bc, lo).x.local(), 1e-8);
  close(Dg.lsmr(bg, lo).x.local(), Dc.lsmr(bc, lo).x.local(), 1e-8);
  for (auto which : {sp::Which::largest_algebraic, sp::Which::smallest_magnitude}) {
    const sp::EigshOptions eo{.k = 3, .which = which, .tol = 1e-9};
    const auto eg = Dg.eigsh(eo);
    CHECK(eg.converged);
    close(eg.eigenvalues, Dc.eigsh(eo).eigenvalues, 1e-7);
  }
  const sp::LogdetOptions lg{.probes = 8, .lanczos_steps = 20, .seed = 2};
  close(Dg.logdet(lg), Dc.logdet(lg), 1e-9);
  const auto cg = Dg.connected_components();
  const auto ccpu = Dc.connected_components();
  CHECK(cg.count == ccpu.count);
  CHECK(at::equal(cg.labels.local().cpu(), ccpu.labels.local()));
  const auto g = [](const at::Tensor& u) { return u.pow(3) - 1.0; };
  const auto dg = [](const at::Tensor& u) { return 3 * u.square(); };
  const sp::NewtonOptions no{.rtol = 1e-11, .linear_rtol = 1e-12, .preconditioner = P::jacobi};
  const auto ng = Dg.nonlinear_solve(g, dg, Dg.zeros(), no);
  CHECK(ng.info.converged);
  close(ng.u.local(), Dc.nonlinear_solve(g, dg, Dc.zeros(), no).u.local(), 1e-8);
  // Saved from the device, loaded onto it; a Matrix Market file read onto it.
  long id = static_cast<long>(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const auto dir = std::filesystem::temp_directory_path() / ("einshard_gpu_methods_" + std::to_string(id));
  const auto dense = Dc.full_tensor();
  if (w.rank == 0) {
    std::filesystem::create_directories(dir);
    const auto nz = dense.nonzero();
    const auto r = nz.select(1, 0).contiguous(), c = nz.select(1, 1).contiguous();
    sp::write_matrix_market((dir / "a.mtx").string(),
                            sp::SparseTensor(dense.flatten().index_select(0, r * N + c), r, c, {N, N}));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Dg.save((dir / "saved").string());
  const auto loaded = sp::DSparseTensor::load((dir / "saved").string(), mesh, {.device = dev});
  const auto read = sp::read_matrix_market((dir / "a.mtx").string(), mesh, {}, {.device = dev});
  const auto xc = Dc.scatter(at::randn({N}, gen, at::kDouble));
  const auto want = Dc.matvec(xc).local();
  for (const auto* M : {&loaded, &read}) {
    CHECK(M->values().device() == dev);
    close(M->matvec(M->vector(xc.local().to(dev))).local(), want, 1e-13);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (w.rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("gpu: a sparse matrix with CUDA values on one rank and CPU values on another is the same error everywhere",
          "[gpu][sparse]") {
  namespace sp = einshard::sparse;
  if (no_gpu()) return;
  const auto w = et::world();
  if (w.size < 2) return;
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const auto [v, r, c] = poisson_rows(6, w.rank == 1 ? *rank_device() : at::Device(at::kCPU));
  std::string what;
  try {
    (void)sp::DSparseTensor::from_local(v, r, c, {36, 36}, mesh);
  } catch (const es::Error& e) {
    what = e.what();
  }
  CHECK_THAT(what, Catch::Contains("ranks pass values on different kinds of device"));
}

}  // namespace test_gpu
