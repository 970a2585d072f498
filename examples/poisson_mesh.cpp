// poisson_mesh: -Δu = f on an unstructured triangle mesh read from a Gmsh file, linear finite
// elements assembled on the ranks with DSparseTensor::from_local, solved with preconditioned CG,
// the solution written as a VTK file for ParaView or VisIt.
//
//   mpirun -n 4 build/release/examples/poisson_mesh [--mesh examples/data/square.msh] [--vtk u.vtk]
//
// The manufactured solution u = sin(πx) sin(πy) + xy (f = 2π² sin(πx) sin(πy), u = xy on the
// boundary) is compared with the computed one at the nodes (the P1 error is O(h²)), and with the
// same system assembled and solved densely on one process; the program exits nonzero if either
// check fails.
//
// How the work is shared: each rank assembles a contiguous slice of the triangles — whatever nodes
// they touch — and from_local sends each entry to the owner of its row, where duplicates are
// summed (PETSc's MatSetValues with ADD_VALUES, then assembly). Rows are owned by a recursive
// coordinate bisection of the nodes (sp::partition_ids, computed identically on every rank), since
// the file numbers its nodes in no useful order. Dirichlet rows become identity rows and their
// columns move to the right-hand side, which keeps the matrix symmetric for CG. The mesh is small
// and every rank reads it whole, as does the load vector (one all-reduce); a large run would read
// a partitioned mesh instead.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <einshard/sparse.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace es = einshard;
namespace sp = einshard::sparse;

namespace {

struct TriangleMesh {
  std::vector<std::array<double, 2>> nodes;
  std::vector<std::array<std::int64_t, 3>> triangles;  ///< 0-based node indices
  std::vector<bool> boundary;                          ///< on a boundary edge (line element)
};

/// Gmsh MSH 2.2 ASCII: $Nodes, and $Elements of type 1 (boundary lines) and 2 (triangles).
TriangleMesh read_gmsh(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("poisson_mesh: cannot open mesh file '" + path + "'");
  TriangleMesh m;
  std::string line;
  std::size_t number = 0;
  auto fail = [&](const std::string& what) {
    throw std::runtime_error("poisson_mesh: " + path + ":" + std::to_string(number) + ": " + what);
  };
  auto next = [&]() {
    if (!std::getline(in, line)) fail("unexpected end of file");
    ++number;
    return std::istringstream(line);
  };
  std::vector<std::int64_t> index;  // file node id -> position
  bool have_nodes = false, have_elements = false;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind("$MeshFormat", 0) == 0) {
      auto s = next();
      double version = 0;
      int ascii = -1;
      s >> version >> ascii;
      if (version < 2 || version >= 3 || ascii != 0) fail("expected MSH format 2.x ASCII, found '" + line + "'");
    } else if (line.rfind("$Nodes", 0) == 0) {
      std::int64_t n = 0;
      if (!(next() >> n) || n <= 0) fail("expected the node count");
      for (std::int64_t k = 0; k < n; ++k) {
        auto s = next();
        std::int64_t id = 0;
        double x = 0, y = 0, z = 0;
        if (!(s >> id >> x >> y >> z) || id <= 0) fail("expected 'id x y z'");
        if (static_cast<std::int64_t>(index.size()) <= id) index.resize(static_cast<std::size_t>(id) + 1, -1);
        index[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(m.nodes.size());
        m.nodes.push_back({x, y});
      }
      have_nodes = true;
    } else if (line.rfind("$Elements", 0) == 0) {
      if (!have_nodes) fail("$Elements before $Nodes");
      m.boundary.assign(m.nodes.size(), false);
      std::int64_t n = 0;
      if (!(next() >> n) || n < 0) fail("expected the element count");
      auto node = [&](std::int64_t id) {
        if (id <= 0 || id >= static_cast<std::int64_t>(index.size()) || index[static_cast<std::size_t>(id)] < 0)
          fail("unknown node " + std::to_string(id));
        return index[static_cast<std::size_t>(id)];
      };
      for (std::int64_t k = 0; k < n; ++k) {
        auto s = next();
        std::int64_t id = 0, type = 0, tags = 0, tag = 0;
        if (!(s >> id >> type >> tags) || tags < 0) fail("expected 'id type ntags ...'");
        for (std::int64_t t = 0; t < tags; ++t) s >> tag;
        std::int64_t a = 0, b = 0, c = 0;
        if (type == 1) {
          if (!(s >> a >> b)) fail("a line element needs 2 nodes");
          m.boundary[static_cast<std::size_t>(node(a))] = m.boundary[static_cast<std::size_t>(node(b))] = true;
        } else if (type == 2) {
          if (!(s >> a >> b >> c)) fail("a triangle needs 3 nodes");
          m.triangles.push_back({node(a), node(b), node(c)});
        }  // points and other elements: not needed here
      }
      have_elements = true;
    }
  }
  if (!have_nodes || !have_elements || m.triangles.empty()) fail("no $Nodes or no triangles in $Elements");
  return m;
}

double exact(const std::array<double, 2>& p) { return std::sin(M_PI * p[0]) * std::sin(M_PI * p[1]) + p[0] * p[1]; }
double source(const std::array<double, 2>& p) {
  return 2 * M_PI * M_PI * std::sin(M_PI * p[0]) * std::sin(M_PI * p[1]);
}

struct Assembly {
  std::vector<std::int64_t> rows, cols;
  std::vector<double> values;
  std::vector<double> load;  ///< global length: this rank's contributions
};

/// P1 stiffness and load of triangles [first, last), with Dirichlet columns moved to the load;
/// identity rows for the boundary nodes `own_boundary` says to add.
template <class OwnBoundary>
Assembly assemble(const TriangleMesh& m, std::size_t first, std::size_t last, OwnBoundary own_boundary) {
  Assembly a;
  a.load.assign(m.nodes.size(), 0.0);
  for (std::size_t t = first; t < last; ++t) {
    const auto& v = m.triangles[t];
    std::array<double, 3> bx{}, by{};
    const auto& p0 = m.nodes[static_cast<std::size_t>(v[0])];
    const auto& p1 = m.nodes[static_cast<std::size_t>(v[1])];
    const auto& p2 = m.nodes[static_cast<std::size_t>(v[2])];
    const double det = (p1[0] - p0[0]) * (p2[1] - p0[1]) - (p2[0] - p0[0]) * (p1[1] - p0[1]);
    const double area = 0.5 * std::abs(det);
    const std::array<const std::array<double, 2>*, 3> p{&p0, &p1, &p2};
    for (int i = 0; i < 3; ++i) {  // gradients of the barycentric coordinates, times det
      const auto& pj = *p[(i + 1) % 3];
      const auto& pk = *p[(i + 2) % 3];
      bx[i] = pj[1] - pk[1];
      by[i] = pk[0] - pj[0];
    }
    for (int i = 0; i < 3; ++i) {
      const auto gi = v[i];
      if (m.boundary[static_cast<std::size_t>(gi)]) continue;
      a.load[static_cast<std::size_t>(gi)] += area / 3 * source(*p[i]);
      for (int j = 0; j < 3; ++j) {
        const auto gj = v[j];
        const double k = (bx[i] * bx[j] + by[i] * by[j]) / (4 * area);
        if (m.boundary[static_cast<std::size_t>(gj)]) {
          a.load[static_cast<std::size_t>(gi)] -= k * exact(*p[j]);
        } else {
          a.rows.push_back(gi);
          a.cols.push_back(gj);
          a.values.push_back(k);
        }
      }
    }
  }
  for (std::size_t g = 0; g < m.nodes.size(); ++g)
    if (m.boundary[g] && own_boundary(static_cast<std::int64_t>(g))) {
      a.rows.push_back(static_cast<std::int64_t>(g));
      a.cols.push_back(static_cast<std::int64_t>(g));
      a.values.push_back(1.0);
      a.load[g] += exact(m.nodes[g]);
    }
  return a;
}

at::Tensor longs(const std::vector<std::int64_t>& v) {
  return at::tensor(v, at::kLong).view({static_cast<std::int64_t>(v.size())});
}
at::Tensor doubles(const std::vector<double>& v) {
  return at::tensor(v, at::kDouble).view({static_cast<std::int64_t>(v.size())});
}

void write_vtk(const std::string& path, const TriangleMesh& m, const at::Tensor& u) {
  std::ofstream out(path);
  out << "# vtk DataFile Version 3.0\npoisson_mesh: -laplace(u) = f, P1 finite elements\nASCII\n"
      << "DATASET UNSTRUCTURED_GRID\nPOINTS " << m.nodes.size() << " double\n";
  for (const auto& p : m.nodes) out << p[0] << ' ' << p[1] << " 0\n";
  out << "CELLS " << m.triangles.size() << ' ' << 4 * m.triangles.size() << '\n';
  for (const auto& t : m.triangles) out << "3 " << t[0] << ' ' << t[1] << ' ' << t[2] << '\n';
  out << "CELL_TYPES " << m.triangles.size() << '\n';
  for (std::size_t t = 0; t < m.triangles.size(); ++t) out << "5\n";
  out << "POINT_DATA " << m.nodes.size() << "\nSCALARS u double 1\nLOOKUP_TABLE default\n";
  const auto a = u.accessor<double, 1>();
  for (std::size_t g = 0; g < m.nodes.size(); ++g) out << a[static_cast<std::int64_t>(g)] << '\n';
  out << "SCALARS u_exact double 1\nLOOKUP_TABLE default\n";
  for (const auto& p : m.nodes) out << exact(p) << '\n';
  if (!out) throw std::runtime_error("poisson_mesh: cannot write '" + path + "'");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    at::set_num_threads(1);
    int P = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::string mesh_path = "square.msh", vtk = "poisson_mesh.vtk";
    for (int i = 1; i + 1 < argc; i += 2) {
      if (!std::strcmp(argv[i], "--mesh")) mesh_path = argv[i + 1];
      else if (!std::strcmp(argv[i], "--vtk")) vtk = argv[i + 1];
      else throw std::invalid_argument(std::string("unknown option ") + argv[i]);
    }
    const auto m = read_gmsh(mesh_path);
    const auto n = static_cast<std::int64_t>(m.nodes.size());
    const es::Mesh mesh(MPI_COMM_WORLD, {P}, {"ranks"});

    // Owners of the rows: recursive coordinate bisection of the nodes (same ids on every rank).
    std::vector<std::int64_t> er, ec;
    for (const auto& t : m.triangles)
      for (int i = 0; i < 3; ++i) {
        er.push_back(t[i]);
        ec.push_back(t[(i + 1) % 3]);
      }
    std::vector<double> xy;
    for (const auto& p : m.nodes) xy.insert(xy.end(), {p[0], p[1]});
    const auto coords = doubles(xy).view({n, 2});
    const auto ids = sp::partition_ids(longs(er), longs(ec), n, P, {.method = sp::PartitionMethod::rcb, .coords = coords});
    const auto owned = (ids == rank).nonzero().flatten();
    const auto* id = ids.data_ptr<std::int64_t>();

    // This rank's slice of the triangles.
    const auto T = m.triangles.size();
    const auto t0 = T * static_cast<std::size_t>(rank) / static_cast<std::size_t>(P);
    const auto t1 = T * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(P);
    auto mine = assemble(m, t0, t1, [&](std::int64_t g) { return id[g] == rank; });
    MPI_Allreduce(MPI_IN_PLACE, mine.load.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);

    const double start = MPI_Wtime();
    const auto A = sp::DSparseTensor::from_local(doubles(mine.values), longs(mine.rows), longs(mine.cols), {n, n},
                                                 mesh, {.owned_rows = owned});
    const auto b = A.scatter(doubles(mine.load));
    const auto s = A.solve(b, {.method = sp::Method::cg, .preconditioner = sp::Preconditioner::jacobi, .rtol = 1e-10,
                               .monitor = [&](int it, double r) {
                                 if (rank == 0 && it % 10 == 0) std::printf("  CG iteration %3d  residual %.3e\n", it, r);
                               }});
    const double seconds = MPI_Wtime() - start;
    const auto u = s.x.full_tensor();

    // Checks: the manufactured solution, and the same system solved densely on one process.
    std::vector<double> ue;
    for (const auto& p : m.nodes) ue.push_back(exact(p));
    const double err = (u - doubles(ue)).abs().max().item<double>();
    const auto whole = assemble(m, 0, T, [](std::int64_t) { return true; });
    const auto K = at::zeros({n, n}, at::kDouble).index_put_({longs(whole.rows), longs(whole.cols)},
                                                             doubles(whole.values), /*accumulate=*/true);
    const auto u1 = at::linalg_solve(K, doubles(whole.load));
    const double diff = (u - u1).abs().max().item<double>();
    const auto stored = A.global_nnz();  // collective: on every rank

    if (rank == 0) {
      write_vtk(vtk, m, u);
      std::printf("Poisson on %s: %lld nodes, %zu triangles, %d ranks (rows by rcb), %lld stored entries\n",
                  mesh_path.c_str(), static_cast<long long>(n), T, P, static_cast<long long>(stored));
      std::printf("CG + Jacobi: %s in %d iterations, residual %.3e, %.1f ms\n",
                  s.info.converged ? "converged" : "NOT converged", s.info.iterations, s.info.residual_norm,
                  seconds * 1e3);
      std::printf("max nodal error against the exact solution: %.3e\n", err);
      std::printf("max difference from the one-process dense solve: %.3e\n", diff);
      std::printf("wrote %s (open it in ParaView or VisIt)\n", vtk.c_str());
    }
    if (!(s.info.converged && err < 1.5e-2 && diff < 1e-8)) {
      if (rank == 0) std::printf("FAILED\n");
      status = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "poisson_mesh: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
