// The distributed Matrix Market read: each rank keeps only its rows (simple partition, or any
// method through rank 0's partition), and the product equals the one-process product of the same
// file read whole; a bad file is the same error on every rank (ctest: 1, 2, 3, 4, 8 ranks).

#include <catch2/catch.hpp>

#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "einshard/sparse.hpp"
#include "einshard/sparse/io/matrix_market.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

/// A file name every rank agrees on (rank 0's pid), in the temp directory.
std::string shared_path(const std::string& stem) {
  long long pid = static_cast<long long>(::getpid());
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(pid) + ".mtx")).string();
}

void write_on_rank0(const std::string& path, const std::string& text) {
  if (es::testing::world().rank == 0) {
    std::ofstream out(path);
    out << text;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

TEST_CASE("read_matrix_market(path, mesh): each rank keeps its rows; products match one process",
          "[sparse][matrix_market]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const std::int64_t nx = 7, ny = 5, n = nx * ny;  // 35 rows: uneven blocks; rank 7 of 8 owns none
  const auto coo = es::testing::poisson2d(nx, ny);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {n, n});
  const auto path = shared_path("einshard_dist_read");
  if (w.rank == 0) sp::write_matrix_market(path, A, {.symmetry = sp::MatrixMarketSymmetry::symmetric});
  MPI_Barrier(MPI_COMM_WORLD);

  const auto whole = sp::read_matrix_market(path);  // the one-process reference, from the same file
  REQUIRE(at::equal(whole.to_dense(), A.to_dense()));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto x = at::randn({n}, gen, at::kDouble);
  const auto ref = whole.to_dense().mv(x);

  SECTION("simple partition") {
    const auto D = sp::read_matrix_market(path, mesh);
    const auto [first, last] = sp::simple_rows(n, MPI_COMM_WORLD);
    // Only this rank's rows: as many entries as the reference has in them.
    const auto mine = ((coo.rows >= first) & (coo.rows < last)).sum().item<std::int64_t>();
    CHECK(D.nnz() == mine);
    CHECK(D.global_nnz() == A.nnz());
    CHECK((D.matvec(D.scatter(x)).full_tensor() - ref).abs().max().item<double>() < 1e-12);
  }
  SECTION("rcb partition through rank 0") {
    const auto D = sp::read_matrix_market(path, mesh,
                                          {.method = sp::PartitionMethod::rcb, .coords = es::testing::grid_coords(nx, ny)});
    CHECK(D.global_nnz() == A.nnz());
    CHECK((D.matvec(D.scatter(x)).full_tensor() - ref).abs().max().item<double>() < 1e-12);
  }
  SECTION("float32 values") {
    const auto D = sp::read_matrix_market(path, mesh, {}, {.dtype = at::kFloat});
    CHECK(D.dtype() == at::kFloat);
    CHECK((D.matvec(D.scatter(x.to(at::kFloat))).full_tensor().to(at::kDouble) - ref).abs().max().item<double>() < 1e-4);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (w.rank == 0) std::filesystem::remove(path);
}

TEST_CASE("read_matrix_market(path, mesh): bad files are the same error on every rank", "[sparse][matrix_market]") {
  const auto w = es::testing::world();
  const es::Mesh mesh(MPI_COMM_WORLD, {w.size}, {"x"});
  const auto path = shared_path("einshard_bad_read");
  auto message = [&](const sp::PartitionOptions& p = {}) {
    try {
      (void)sp::read_matrix_market(path, mesh, p);
    } catch (const es::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto same_everywhere = [](const std::string& s) {  // rank 0's text, compared on every rank
    int len = static_cast<int>(s.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string root = s;
    root.resize(static_cast<std::size_t>(len));
    MPI_Bcast(root.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
    int same = root == s ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return same == 1;
  };
  // Truncated: announces 3 entries, holds 2 (line 4 is the last).
  write_on_rank0(path, "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n2 2 1\n");
  auto m = message();
  CHECK_THAT(m, Catch::Contains(path + ":4: end of input after 2 of 3 entries"));
  CHECK(same_everywhere(m));
  m = message({.method = sp::PartitionMethod::rcb, .coords = at::zeros({3, 1}, at::kDouble)});
  CHECK_THAT(m, Catch::Contains("end of input after 2 of 3 entries"));
  CHECK(same_everywhere(m));
  // Not square.
  write_on_rank0(path, "%%MatrixMarket matrix coordinate real general\n3 2 1\n1 1 1\n");
  m = message();
  CHECK_THAT(m, Catch::Contains("must be square, the file is 3 x 2"));
  CHECK(same_everywhere(m));
  if (w.rank == 0) std::filesystem::remove(path);
  MPI_Barrier(MPI_COMM_WORLD);
  // Missing.
  m = message();
  CHECK_THAT(m, Catch::Contains("cannot open the file"));
  CHECK(same_everywhere(m));
}
