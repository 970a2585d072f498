// Matrix Market I/O (sparse/io/matrix_market.hpp). On one process ([unit]): files committed under
// tests/data/matrix_market against their dense forms written out here, write -> read round trips
// for every format, field and symmetry, and malformed files, each error naming its line. The
// distributed read: each rank keeps only its rows (simple partition, or any method through rank 0's
// partition), and the product equals the one-process product of the same file read whole; a bad
// file is the same error on every rank.

#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <mpi.h>
#include <unistd.h>

#include <complex>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "einshard/sparse.hpp"
#include "einshard/sparse/io/matrix_market.hpp"
#include "sparse_problems.hpp"
#include "test_support.hpp"

namespace test_matrix_market {

namespace es = einshard;
namespace sp = einshard::sparse;
using sp::MatrixMarketField;
using sp::MatrixMarketFormat;
using sp::MatrixMarketSymmetry;

namespace {

/// tests/data/matrix_market/<name>: ctest sets $EINSHARD_TEST_DATA; run by hand from the build
/// directory, __FILE__ (relative to it under Ninja) finds the source tree.
std::string data(const std::string& name) {
  const char* dir = std::getenv("EINSHARD_TEST_DATA");
  const auto root = dir ? std::filesystem::path(dir) : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "data";
  return (root / "matrix_market" / name).string();
}

at::Tensor dense(std::initializer_list<double> v, std::int64_t rows, std::int64_t cols) {
  return at::tensor(std::vector<double>(v), at::kDouble).view({rows, cols});
}

/// The error a text raises, with the line it names.
std::pair<std::string, std::size_t> error_of(const std::string& text, const sp::MatrixMarketReadOptions& o = {}) {
  try {
    (void)sp::parse_matrix_market(text, o);
  } catch (const sp::MatrixMarketError& e) {
    return {e.what(), e.line()};
  }
  return {"no error", 0};
}

sp::SparseTensor round_trip(const sp::SparseTensor& A, const sp::MatrixMarketWriteOptions& o) {
  std::stringstream s;
  sp::write_matrix_market(s, A, o);
  INFO(s.str());
  s.seekg(0);
  return sp::read_matrix_market(s, {.dtype = A.dtype()});
}

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

TEST_CASE("Matrix Market: committed files read to their dense forms", "[sparse][matrix_market][unit]") {
  SECTION("coordinate real symmetric: both triangles") {
    const auto A = sp::read_matrix_market(data("symmetric_real.mtx"));
    CHECK(A.dtype() == at::kDouble);
    CHECK(A.nnz() == 8);
    CHECK(at::equal(A.to_dense(), dense({4, -1, 0, 0, -1, 4, -1, 0, 0, -1, 4, 0, 0, 0, 0, 2.5}, 4, 4)));
  }
  SECTION("coordinate complex hermitian: the upper triangle conjugated") {
    const auto A = sp::read_matrix_market(data("hermitian_complex.mtx"));
    CHECK(A.dtype() == at::kComplexDouble);
    using C = c10::complex<double>;
    const auto want = at::tensor(std::vector<C>{C(2, 0), C(1, 1), C(0, 0), C(1, -1), C(0, 0), C(0, -2), C(0, 0),
                                                C(0, 2), C(5, 0)})
                          .view({3, 3});
    CHECK(at::equal(A.to_dense(), want));
    CHECK(at::equal(A.to_dense(), A.to_dense().transpose(0, 1).conj().resolve_conj()));
  }
  SECTION("array real general: column-major") {
    const auto A = sp::read_matrix_market(data("array_general.mtx"));
    CHECK(at::equal(A.to_dense(), dense({1, 2, 3, 4, 5, 6}, 2, 3)));
  }
  SECTION("coordinate integer skew-symmetric: the upper triangle negated") {
    const auto A = sp::read_matrix_market(data("skew_integer.mtx"), {.dtype = at::kFloat});
    CHECK(A.dtype() == at::kFloat);
    CHECK(at::equal(A.to_dense(), dense({0, -7, 3, 7, 0, 0, -3, 0, 0}, 3, 3).to(at::kFloat)));
  }
  SECTION("coordinate pattern general: ones, rectangular") {
    const auto A = sp::read_matrix_market(data("pattern_general.mtx"));
    CHECK(A.shape() == std::array<std::int64_t, 2>{3, 4});
    CHECK(at::equal(A.to_dense(), dense({1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0}, 3, 4)));
    const auto h = [&] {
      std::ifstream in(data("pattern_general.mtx"));
      return sp::read_matrix_market_header(in);
    }();
    CHECK(h.field == MatrixMarketField::pattern);
    CHECK(h.entries == 4);
  }
}

TEST_CASE("Matrix Market: write then read gives the matrix back for every kind", "[sparse][matrix_market][unit]") {
  at::manual_seed(3);
  const auto r = at::randn({5, 5}, at::kDouble) * (at::rand({5, 5}, at::kDouble) < 0.5);
  const auto general = sp::SparseTensor::from_dense(r);
  const auto symmetric = sp::SparseTensor::from_dense(r + r.t());
  const auto skew = sp::SparseTensor::from_dense(r - r.t());
  const auto c = at::complex(r, at::randn({5, 5}, at::kDouble) * (r != 0));
  const auto complex_general = sp::SparseTensor::from_dense(c);
  const auto hermitian = sp::SparseTensor::from_dense(c + c.t().conj().resolve_conj());
  const auto integer = sp::SparseTensor::from_dense(at::round(r * 10));
  const auto rect = sp::SparseTensor::from_dense(r.narrow(0, 0, 3));

  struct Kind {
    const char* name;
    const sp::SparseTensor* A;
    sp::MatrixMarketWriteOptions o;
  };
  const Kind kinds[] = {
      {"coordinate real general", &general, {}},
      {"array real general", &general, {.format = MatrixMarketFormat::array}},
      {"coordinate real symmetric", &symmetric, {.symmetry = MatrixMarketSymmetry::symmetric}},
      {"array real symmetric", &symmetric, {.format = MatrixMarketFormat::array, .symmetry = MatrixMarketSymmetry::symmetric}},
      {"coordinate real skew", &skew, {.symmetry = MatrixMarketSymmetry::skew_symmetric}},
      {"array real skew", &skew, {.format = MatrixMarketFormat::array, .symmetry = MatrixMarketSymmetry::skew_symmetric}},
      {"coordinate complex general", &complex_general, {}},
      {"array complex general", &complex_general, {.format = MatrixMarketFormat::array}},
      {"coordinate complex hermitian", &hermitian, {.symmetry = MatrixMarketSymmetry::hermitian}},
      {"array complex hermitian", &hermitian, {.format = MatrixMarketFormat::array, .symmetry = MatrixMarketSymmetry::hermitian}},
      {"coordinate integer general", &integer, {.field = MatrixMarketField::integer}},
      {"coordinate real rectangular", &rect, {.comment = "a comment\nof two lines"}},
      {"array real rectangular", &rect, {.format = MatrixMarketFormat::array}},
  };
  for (const auto& k : kinds) {
    INFO(k.name);
    const auto B = round_trip(*k.A, k.o);
    CHECK(B.shape() == k.A->shape());
    CHECK(at::equal(B.to_dense(), k.A->to_dense()));  // 17 digits: bit for bit
  }
  // Pattern: the positions only.
  const auto P = round_trip(general, {.field = MatrixMarketField::pattern});
  CHECK(at::equal(P.to_dense(), (general.to_dense() != 0).to(at::kDouble)));

  // A file on disk, through the path overloads: one per process, as every rank runs this case and
  // one rank's remove must not race another's read.
  const auto path = (std::filesystem::temp_directory_path() /
                     ("einshard_test_matrix_market_" + std::to_string(::getpid()) + ".mtx")).string();
  sp::write_matrix_market(path, symmetric, {.symmetry = MatrixMarketSymmetry::symmetric});
  CHECK(at::equal(sp::read_matrix_market(path).to_dense(), symmetric.to_dense()));
  std::filesystem::remove(path);

  // The writer refuses what the matrix is not.
  std::stringstream s;
  CHECK_THROWS_WITH(sp::write_matrix_market(s, general, {.symmetry = MatrixMarketSymmetry::symmetric}),
                    Catch::Contains("is not symmetric"));
  CHECK_THROWS_WITH(sp::write_matrix_market(s, rect, {.symmetry = MatrixMarketSymmetry::symmetric}),
                    Catch::Contains("must be square"));
  CHECK_THROWS_WITH(sp::write_matrix_market(s, general, {.field = MatrixMarketField::integer}),
                    Catch::Contains("integral values"));
  CHECK_THROWS_WITH(sp::write_matrix_market(s, complex_general, {.field = MatrixMarketField::real}),
                    Catch::Contains("complex values need the complex field"));
  CHECK_THROWS_WITH(sp::write_matrix_market(s, general, {.format = MatrixMarketFormat::array,
                                                          .field = MatrixMarketField::pattern}),
                    Catch::Contains("pattern field needs the coordinate format"));
}

TEST_CASE("Matrix Market: malformed files name the line", "[sparse][matrix_market][unit]") {
  const std::string banner = "%%MatrixMarket matrix coordinate real general\n";
  struct Bad {
    std::string text, expect;
    std::size_t line;
  };
  const Bad bad[] = {
      {"", "empty input", 0},
      {"%%MatrixMarket matrix coordinate real\n", "expected the banner", 1},
      {"%%MatrixMarket vector coordinate real general\n", "only 'matrix' objects", 1},
      {"%%MatrixMarket matrix sparse real general\n", "format must be coordinate or array", 1},
      {"%%MatrixMarket matrix coordinate quaternion general\n", "field must be", 1},
      {"%%MatrixMarket matrix coordinate real upper\n", "symmetry must be", 1},
      {"%%MatrixMarket matrix array pattern general\n2 2\n", "array file cannot have the pattern field", 1},
      {"%%MatrixMarket matrix coordinate real hermitian\n", "hermitian symmetry needs the complex field", 1},
      {banner + "% only a comment\n", "expected the size line", 2},
      {banner + "3 3\n", "expected the size line 'rows cols nnz'", 2},
      {banner + "3 x 1\n", "non-negative integer cols, found 'x'", 2},
      {banner + "3 3 2\n1 1 1.0\n", "end of input after 1 of 2 entries", 3},
      {banner + "%c\n3 3 2\n1 1 1.0\n4 1 2.0\n", "entry (4, 1) is out of range: the matrix is 3 x 3", 5},
      {banner + "3 3 1\n0 1 2.0\n", "entry (0, 1) is out of range", 3},
      {banner + "3 3 1\n1 1\n", "expected 3 number(s) per entry, found 2", 3},
      {banner + "3 3 1\n1 1 abc\n", "expected a number, found 'abc'", 3},
      {banner + "3 3 1\n1 1 1.0\n2 2 2.0\n", "data after the 1 entries", 4},
      {"%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n", "must be square, found 2 x 3", 2},
      {"%%MatrixMarket matrix coordinate real symmetric\n3 3 1\n1 2 1.0\n", "above the diagonal", 3},
      {"%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 1\n2 2 1.0\n", "on the diagonal", 3},
      {"%%MatrixMarket matrix coordinate complex hermitian\n2 2 1\n1 1 1.0 0.5\n", "real diagonal", 3},
      {"%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n", "expected an integer value", 3},
      {"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n", "end of input after 3 of 4 entries", 5},
      {"%%MatrixMarket matrix array real general\n9999999999 9999999999\n", "larger than supported", 2},
      {banner + "3 3 99999999999\n1 1 1\n", "end of input after 1 of 99999999999 entries", 3},
  };
  for (const auto& b : bad) {
    INFO(b.text);
    const auto [what, line] = error_of(b.text);
    CHECK_THAT(what, Catch::Contains(b.expect));
    CHECK(line == b.line);
    if (b.line > 0) CHECK_THAT(what, Catch::Contains("<string>:" + std::to_string(b.line) + ":"));
  }
  // Complex values into a real dtype; a file that is not there.
  const auto complex = "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 2\n";
  CHECK_THAT(error_of(complex, {.dtype = at::kDouble}).first, Catch::Contains("real dtype"));
  CHECK_THROWS_AS(sp::read_matrix_market(std::string("/nonexistent/einshard.mtx")), sp::MatrixMarketError);
  // Tolerated: blank lines, comments between entries, CRLF line ends, upper-case banner words.
  const auto ok = sp::parse_matrix_market(
      "%%MatrixMarket MATRIX Coordinate Real General\r\n%c\r\n\r\n2 2 2\r\n1 1 1.5\r\n% mid\r\n2 1 -2e1\r\n\r\n");
  CHECK(at::equal(ok.to_dense(), dense({1.5, 0, -20, 0}, 2, 2)));
}

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

}  // namespace test_matrix_market
