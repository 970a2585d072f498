// save / load: round trips at the same world size (the partition kept, bitwise-equal products),
// loads at other world sizes (sub-communicators of the world, simple repartition, bitwise equal to
// assembling the same matrix there), files pre-sharded on one process, and damaged directories
// (the same error, naming the file, on every rank).

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "operations_support.hpp"

namespace test_save_load {

namespace es = einshard;
namespace sp = einshard::sparse;
using es::testing::Coo;

namespace {

/// A fresh directory name shared by every rank (rank 0's pid), removed when the test ends.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    long pid = static_cast<long>(::getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    path = std::filesystem::temp_directory_path() / ("einshard_io_" + tag + "_" + std::to_string(pid));
    if (es::testing::world().rank == 0) std::filesystem::remove_all(path);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~TempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (es::testing::world().rank == 0) std::filesystem::remove_all(path);
  }
  [[nodiscard]] std::string str() const { return path.string(); }
};

/// Rank 0 edits the directory; the others wait for it.
template <class F>
void on_rank0(F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (es::testing::world().rank == 0) f();
  MPI_Barrier(MPI_COMM_WORLD);
}

at::Tensor seeded(std::int64_t n, std::uint64_t seed, at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({n}, gen, at::kDouble).to(dtype);
}

/// y = A x gathered; products of equally assembled matrices must agree bit for bit.
at::Tensor product(const sp::DSparseTensor& D, std::uint64_t seed = 3) {
  return D.matvec(D.scatter(seeded(D.rows(), seed, D.dtype()))).full_tensor();
}

/// The ranks [0, q) of the world as a mesh (nullopt on the others, which sit the load out).
std::optional<es::Mesh> first_ranks(int q, MPI_Comm& comm) {
  const auto w = es::testing::world();
  MPI_Comm_split(MPI_COMM_WORLD, w.rank < q ? 0 : MPI_UNDEFINED, w.rank, &comm);
  if (comm == MPI_COMM_NULL) return std::nullopt;
  return es::Mesh(comm, {q}, {"x"});
}

}  // namespace

TEST_CASE("save / load at the same world size keeps the partition and the bits", "[sparse][io]") {
  const auto mesh = es::testing::world_mesh();
  using M = sp::PartitionMethod;
  for (auto dtype : {at::kDouble, at::kFloat, at::kComplexDouble}) {
    for (auto method : {M::simple, M::rcb}) {
      TempDir dir("same");
      auto coo = es::testing::poisson2d(9, 7);
      coo.values = coo.values.to(dtype) * (1.0 + 0.01 * at::arange(coo.values.numel()).to(dtype));
      const auto D = es::testing::distribute(coo, mesh, method, es::testing::grid_coords(9, 7));
      D.save(dir.str());
      const auto E = sp::DSparseTensor::load(dir.str(), mesh);
      CHECK(E.dtype() == dtype);
      CHECK(E.rows() == D.rows());
      CHECK(at::equal(E.layout()->owned(), D.layout()->owned()));
      CHECK(at::equal(E.values(), D.values()));
      CHECK(at::equal(product(E), product(D)));
      CHECK(E.global_nnz() == D.global_nnz());
    }
  }
}

// A load maps its files copy-on-write (no copy out of the page cache): the matrix must not change
// when its directory is saved over (a save renames new files into place), and writing its values
// must not reach the files.
TEST_CASE("save / load: a loaded matrix keeps its bits when its directory is saved over or its values written",
          "[sparse][io]") {
  const auto mesh = es::testing::world_mesh();
  TempDir dir("mapped");
  const auto coo = es::testing::poisson2d(11, 6);
  const auto D = es::testing::distribute(coo, mesh, sp::PartitionMethod::rcb, es::testing::grid_coords(11, 6));
  D.save(dir.str());
  const auto E = sp::DSparseTensor::load(dir.str(), mesh);
  const auto before = product(D);
  CHECK(at::equal(product(E), before));
  const auto F = D.with_values(D.values() * 2.0 + 1.0);
  F.save(dir.str());
  CHECK(at::equal(product(E), before));
  E.values().mul_(3.0);  // in place: a private copy of the pages it touches, not the files
  CHECK(at::equal(E.values(), D.values() * 3.0));
  const auto G = sp::DSparseTensor::load(dir.str(), mesh);
  CHECK(at::equal(G.values(), F.values()));
  CHECK(at::equal(product(G), product(F)));
  // .device names where the matrix lives (test_gpu.cpp loads onto CUDA).
  const auto H = sp::DSparseTensor::load(dir.str(), mesh, {.device = at::Device(at::kCPU)});
  CHECK(H.values().device().is_cpu());
  CHECK(at::equal(product(H), product(F)));
}

TEST_CASE("save / load: files of 4 partitions load at 1, 2, 3 ranks and the whole world", "[sparse][io]") {
  const auto w = es::testing::world();
  const auto coo = es::testing::unsymmetric_with_duplicates(50);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto coords = at::rand({coo.n, 2}, at::make_generator<at::CPUGeneratorImpl>(4), at::kDouble);
  TempDir dir("four");
  on_rank0([&] { sp::save_partitioned(A, dir.str(), 4, {.method = sp::PartitionMethod::rcb, .coords = coords}); });
  for (int q : {1, 2, 3, w.size}) {
    if (q > w.size) continue;
    MPI_Comm comm = MPI_COMM_NULL;
    const auto mesh = first_ranks(q, comm);
    if (mesh) {
      const auto E = sp::DSparseTensor::load(dir.str(), *mesh);
      // At 4 ranks the saved RCB partition is kept; elsewhere the rows come in simple blocks.
      const auto R = q == 4 ? sp::DSparseTensor::partition(A, *mesh, {.method = sp::PartitionMethod::rcb, .coords = coords})
                            : sp::DSparseTensor::partition(A, *mesh);
      CHECK(at::equal(E.layout()->owned(), R.layout()->owned()));
      CHECK(at::equal(product(E), product(R)));
      CHECK(E.global_nnz() == R.global_nnz());
      MPI_Comm_free(&comm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // A collective save at this world size reloads on fewer ranks too.
  TempDir again("again");
  const auto D = sp::DSparseTensor::partition(A, es::testing::world_mesh(), {.method = sp::PartitionMethod::rcb, .coords = coords});
  D.save(again.str());
  MPI_Comm comm = MPI_COMM_NULL;
  const int q = (w.size + 1) / 2;
  if (const auto mesh = first_ranks(q, comm)) {
    const auto E = sp::DSparseTensor::load(again.str(), *mesh);
    const auto R = q == w.size ? D : sp::DSparseTensor::partition(A, *mesh);
    CHECK(at::equal(product(E), product(R)));
    MPI_Comm_free(&comm);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("save / load: the seed's single-process case, 2, 4 and 8 pre-sharded partitions loaded on one process",
          "[sparse][io]") {
  const auto coo = es::testing::poisson2d(16, 16);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  for (int parts : {2, 4, 8}) {
    TempDir dir("single_" + std::to_string(parts));
    on_rank0([&] { sp::save_partitioned(A, dir.str(), parts); });
    MPI_Comm comm = MPI_COMM_NULL;
    if (const auto mesh = first_ranks(1, comm)) {
      const auto E = sp::DSparseTensor::load(dir.str(), *mesh);
      CHECK(E.shape() == A.shape());
      CHECK(at::equal(E.full_tensor(), es::testing::dense(coo)));
      MPI_Comm_free(&comm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("save / load: a collective save at 4 ranks loads at 1, 2, 3 and 8 with bitwise-equal products", "[sparse][io]") {
  const auto w = es::testing::world();
  if (w.size < 4) return;  // the save needs 4 ranks (the 4- and 8-rank runs)
  const auto coo = es::testing::unsymmetric_with_duplicates(60, 11);
  const sp::SparseTensor A(coo.values, coo.rows, coo.cols, {coo.n, coo.n});
  const auto coords = at::rand({coo.n, 2}, at::make_generator<at::CPUGeneratorImpl>(5), at::kDouble);
  TempDir dir("save4");
  {
    MPI_Comm comm = MPI_COMM_NULL;
    if (const auto mesh = first_ranks(4, comm)) {
      sp::DSparseTensor::partition(A, *mesh, {.method = sp::PartitionMethod::rcb, .coords = coords}).save(dir.str());
      MPI_Comm_free(&comm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  for (int q : {1, 2, 3, 4, 8}) {
    if (q > w.size) continue;
    MPI_Comm comm = MPI_COMM_NULL;
    if (const auto mesh = first_ranks(q, comm)) {
      const auto E = sp::DSparseTensor::load(dir.str(), *mesh);
      // At 4 ranks the saved RCB partition comes back; elsewhere the simple one.
      const auto R = q == 4 ? sp::DSparseTensor::partition(A, *mesh, {.method = sp::PartitionMethod::rcb, .coords = coords})
                            : sp::DSparseTensor::partition(A, *mesh);
      INFO("loaded at " << q << " ranks");
      CHECK(at::equal(E.layout()->owned(), R.layout()->owned()));
      for (std::uint64_t seed : {3, 4}) CHECK(at::equal(product(E, seed), product(R, seed)));
      CHECK(at::equal(E.rmatvec(E.scatter(seeded(E.rows(), 6, E.dtype()))).full_tensor(),
                      R.rmatvec(R.scatter(seeded(R.rows(), 6, R.dtype()))).full_tensor()));
      CHECK(E.global_nnz() == R.global_nnz());
      MPI_Comm_free(&comm);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("save / load: empty shards and a matrix without entries", "[sparse][io]") {
  const auto mesh = es::testing::world_mesh();
  TempDir dir("empty");
  const auto coo = es::testing::poisson2d(3, 1);  // 3 rows: empty shards at 4 and 8 ranks
  const auto D = es::testing::distribute(coo, mesh, sp::PartitionMethod::simple, {});
  D.save(dir.str());
  const auto E = sp::DSparseTensor::load(dir.str(), mesh);
  CHECK(at::equal(product(E), product(D)));
  const Coo none{at::zeros({0}, at::kDouble), at::zeros({0}, at::kLong), at::zeros({0}, at::kLong), 5};
  const auto Z = es::testing::distribute(none, mesh, sp::PartitionMethod::simple, {});
  Z.save(dir.str());  // over the previous save
  const auto F = sp::DSparseTensor::load(dir.str(), mesh);
  CHECK(F.rows() == 5);
  CHECK(F.global_nnz() == 0);
}

TEST_CASE("save / load: damaged directories raise the same error, naming the file, on every rank", "[sparse][io]") {
  const auto mesh = es::testing::world_mesh();
  TempDir dir("bad");
  const auto D = es::testing::distribute(es::testing::poisson2d(6, 5), mesh, sp::PartitionMethod::simple, {});
  const auto load_error = [&] {
    return es::testing::error_of([&] { (void)sp::DSparseTensor::load(dir.str(), mesh); });
  };
  const auto part0 = (dir.path / "partition_0.bin").string();
  const auto meta = (dir.path / "metadata.txt").string();
  const auto expect = [&](const std::string& needle, const std::string& also) {
    const auto e = load_error();
    INFO(e);
    CHECK(e.find(needle) != std::string::npos);
    CHECK(e.find(also) != std::string::npos);
    CHECK(es::testing::agrees_on_every_rank(e));
  };
  const auto edit_metadata = [&](const std::string& from, const std::string& to) {
    on_rank0([&] {
      std::ifstream in(meta);
      std::string text((std::istreambuf_iterator<char>(in)), {});
      text.replace(text.find(from), from.size(), to);
      std::ofstream(meta, std::ios::trunc) << text;
    });
  };

  expect("metadata.txt", "expected opening it to succeed");  // nothing saved yet
  D.save(dir.str());
  on_rank0([&] { std::filesystem::remove(part0); });
  expect(part0, "expected opening it to succeed");
  D.save(dir.str());
  on_rank0([&] { std::filesystem::resize_file(part0, std::filesystem::file_size(part0) - 5); });
  expect(part0, "truncated");
  D.save(dir.str());
  on_rank0([&] {
    std::fstream f(part0, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  });
  expect(part0, "corrupt");
  D.save(dir.str());
  edit_metadata("einshard-dsparse 3", "einshard-dsparse 7");
  expect("found version 7", "expected format version 3");
  expect("version 7", meta);  // names the file
  D.save(dir.str());
  edit_metadata("dtype float64", "dtype float32");
  expect(part0, "dtype");
  D.save(dir.str());
  CHECK(at::equal(product(sp::DSparseTensor::load(dir.str(), mesh)), product(D)));  // repaired by a save
}

namespace {
/// Rank 0 rewrites every partition file of `dir` through `edit` (its bytes, its header and
/// sections), then the metadata with each file's checksum recomputed, so the load gets past the
/// checksum to whatever `edit` did.
template <class F>
void rewrite_files(const TempDir& dir, F&& edit) {
  on_rank0([&] {
    std::ifstream in(dir.path / "metadata.txt");
    std::string meta((std::istreambuf_iterator<char>(in)), {});
    const auto parsed = sp::detail::parse_metadata(meta, "metadata.txt");
    auto parts = parsed.parts;
    for (auto& e : parts) {
      const auto file = dir.path / e.file;
      std::ifstream f(file, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(f)), {});
      std::array<std::int64_t, sp::detail::header_words> w{};
      std::memcpy(w.data(), bytes.data() + 8, sizeof w);
      auto h = sp::detail::PartitionHeader::of(w.data());
      sp::detail::PartitionSections sections;
      REQUIRE(sp::detail::sections_of(h, static_cast<std::int64_t>(bytes.size()), sections));
      edit(bytes, h, sections);
      e.checksum = sp::detail::checksum_of(reinterpret_cast<const unsigned char*>(bytes.data()),
                                           static_cast<std::int64_t>(bytes.size()));
      std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    }
    std::ofstream(dir.path / "metadata.txt", std::ios::trunc)
        << sp::detail::metadata_text(parsed.m, parsed.n, parsed.dtype, parts);
  });
}
}  // namespace

TEST_CASE("save / load: damage past a good checksum is found by the checks over the read chunks", "[sparse][io]") {
  const auto mesh = es::testing::world_mesh();
  const auto coords = es::testing::grid_coords(9, 7);
  for (auto method : {sp::PartitionMethod::simple, sp::PartitionMethod::rcb}) {
    const auto D = es::testing::distribute(es::testing::poisson2d(9, 7), mesh, method, coords);
    TempDir dir("damage");
    // The first two columns of the first row of two or more entries swapped on the last
    // partition: the checksum matches, the checks over the read chunks see it.
    D.save(dir.str());
    const auto last = static_cast<std::int64_t>(es::testing::world().size - 1);
    rewrite_files(dir, [&](std::string& bytes, const sp::detail::PartitionHeader& h,
                              const sp::detail::PartitionSections& s) {
      if (h.id != last) return;
      for (std::int64_t r = 0; r < h.R; ++r) {
        const auto lo = sp::detail::io_check::index(reinterpret_cast<const unsigned char*>(bytes.data()), s.rowptr,
                                                    h.rowptr_size, r);
        const auto hi = sp::detail::io_check::index(reinterpret_cast<const unsigned char*>(bytes.data()), s.rowptr,
                                                    h.rowptr_size, r + 1);
        if (hi - lo < 2) continue;
        auto* first = bytes.data() + s.col.begin + lo * h.col_size;
        std::swap_ranges(first, first + h.col_size, first + h.col_size);
        return;
      }
    });
    const auto e = es::testing::error_of([&] { (void)sp::DSparseTensor::load(dir.str(), mesh); });
    INFO(e);
    CHECK(e.find("partition_" + std::to_string(last) + ".bin") != std::string::npos);
    CHECK(e.find("expected columns ascending in each row") != std::string::npos);
    CHECK(es::testing::agrees_on_every_rank(e));
  }
}

TEST_CASE("save / load: a rectangular matrix (its own column partition) at this and fewer ranks", "[sparse][io]") {
  const auto w = es::testing::world();
  const auto mesh = es::testing::world_mesh();
  const auto D = es::testing::rectangular_13x9(mesh);
  TempDir dir("rect");
  D.save(dir.str());
  const auto E = sp::DSparseTensor::load(dir.str(), mesh);
  CHECK(E.shape() == D.shape());
  CHECK(at::equal(E.values(), D.values()));
  const auto whole = es::testing::rectangular_13x9_dense();
  CHECK(at::equal(D.full_tensor(), whole));
  CHECK(at::equal(E.full_tensor(), whole));
  MPI_Comm comm = MPI_COMM_NULL;
  if (const auto sub = first_ranks((w.size + 1) / 2, comm)) {
    const auto F = sp::DSparseTensor::load(dir.str(), *sub);
    CHECK(F.shape() == D.shape());
    CHECK(at::equal(F.full_tensor(), whole));
    MPI_Comm_free(&comm);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("save / load: partition files of different saves raise the same error on every rank", "[sparse][io]") {
  const auto w = es::testing::world();
  if (w.size < 2) return;  // one partition has no halo plan to disagree with
  const auto mesh = es::testing::world_mesh();
  TempDir a("mix_a"), b("mix_b");
  const auto coo = es::testing::poisson2d(8, 5);
  const auto coords = es::testing::grid_coords(8, 5);
  es::testing::distribute(coo, mesh, sp::PartitionMethod::simple, {}).save(a.str());
  es::testing::distribute(coo, mesh, sp::PartitionMethod::rcb, coords).save(b.str());
  // Rank 1's file (and its metadata line) from the other save: each file is sound on its own.
  on_rank0([&] {
    std::filesystem::copy_file(b.path / "partition_1.bin", a.path / "partition_1.bin",
                               std::filesystem::copy_options::overwrite_existing);
    std::ifstream ma(a.path / "metadata.txt"), mb(b.path / "metadata.txt");
    std::string ta((std::istreambuf_iterator<char>(ma)), {}), tb((std::istreambuf_iterator<char>(mb)), {});
    const auto line = [](const std::string& t) {
      const auto at = t.find("partition 1 ");
      return t.substr(at, t.find('\n', at) - at);
    };
    ta.replace(ta.find(line(ta)), line(ta).size(), line(tb));
    std::ofstream(a.path / "metadata.txt", std::ios::trunc) << ta;
  });
  const auto e = es::testing::error_of([&] { (void)sp::DSparseTensor::load(a.str(), mesh); });
  INFO(e);
  CHECK(!e.empty());
  CHECK(es::testing::agrees_on_every_rank(e));
}

}  // namespace test_save_load
