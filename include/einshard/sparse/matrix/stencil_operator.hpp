#pragma once
/// @file
/// `StencilOperator`: a stencil applied matrix-free on a structured grid split into blocks over a
/// mesh (PETSc's MatShell over a DMDA, hypre's Struct interface). Each rank owns a box of the
/// grid, stored row-major (its rows in ascending global order, so a `DVector` of the operator is
/// the box flattened); a product reads x and writes y once, with the stencil's coefficients in
/// registers (or one coefficient tensor per point), where a CSR product also streams the values
/// and column indices of every entry.
///
/// ```cpp
/// sp::StencilOperator A(sp::Stencil::laplacian7(), {n, n, n}, mesh,
///                       {.boundary = {sp::StencilBoundary::dirichlet}, .axes = {"x", "y", ""}});
/// auto s = A.solve(A.scatter(b), {.method = sp::Method::cg, .preconditioner = sp::Preconditioner::jacobi});
/// auto D = A.assemble();   // the same rows as a DSparseTensor (AMG builds from it)
/// ```
///
/// The product: the box's interior (every point whose stencil stays in the box) runs while the
/// halo travels, as a contiguous loop along the last dimension per line; the box's faces then
/// read their out-of-box neighbours through a precomputed index into [x | ghosts] (the halo of a
/// `HaloPlan`, sent on comm::Messages), where the boundary conditions were resolved once.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <complex>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "einshard/comm/exchange.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/sparse/matrix/diagonal_runs.hpp"
#include "einshard/sparse/matrix/dsparse_tensor.hpp"
#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/halo.hpp"
#include "einshard/sparse/matrix/operator.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"
#include "einshard/sparse/matrix/stencil.hpp"

namespace einshard::sparse {

/// Options of `StencilOperator`.
struct StencilOptions {
  /// What lies outside the grid: one value for every dimension, or one per dimension.
  std::vector<StencilBoundary> boundary{StencilBoundary::dirichlet};
  /// axes[d]: the mesh axis whose coordinate splits grid dimension d ("" : not split). Every mesh
  /// axis of more than one rank splits one dimension. Default: dimension 0 over all the ranks.
  std::vector<std::string> axes{};
  /// splits[d]: the block sizes of dimension d, one per coordinate along its axis (an empty list:
  /// blocks of ceil(n / parts), the last ones short or empty). Default: all dimensions so.
  std::vector<std::vector<std::int64_t>> splits{};
  /// Variable coefficients: one tensor per stencil point, each shaped as this rank's box
  /// (`box_shape()`) or as the whole grid (then sliced); the coefficient of point s at grid point
  /// p multiplies x[p + offset_s] in row p. Empty: the stencil's constants.
  std::vector<at::Tensor> coefficients{};
  /// The values' type: float64 or float32.
  at::ScalarType dtype = at::kDouble;
};

namespace detail {

/// The interior of the box: lines along the last dimension, y[j] = Σ_s c_s x[j + off_s] with the
/// S points unrolled (S = 0: a runtime count), each line in vector lanes (offset_line).
/// Returns Σ w_j y_j over the rows written when w is given. A block of `cols` columns (row-major)
/// is the same loop over a last dimension `cols` times longer (n, r and off scaled by the caller,
/// constant coefficients only); its dots go per column into `dots` instead.
template <class V, int S, bool Variable>
double stencil_interior(const V* __restrict x, V* __restrict y, const V* __restrict w, const V* __restrict coef,
                        std::int64_t owned, const std::int64_t* n, const std::int64_t* r, const std::int64_t* off,
                        const V* c, int points, std::int64_t cols = 1, double* __restrict dots = nullptr) {
  double dot = 0;
  const std::int64_t lo = r[2], hi = n[2] - r[2];
  for (std::int64_t i0 = r[0]; i0 < n[0] - r[0]; ++i0)
    for (std::int64_t i1 = r[1]; i1 < n[1] - r[1]; ++i1) {
      const std::int64_t base = (i0 * n[1] + i1) * n[2];
      constexpr auto layout = Variable ? Coefficients::strided : Coefficients::constant;
      const bool per_column = w != nullptr && cols > 1;
      dot += offset_line<S, layout>(Variable ? coef + base + lo : c, owned, off, points, hi - lo, x + base + lo,
                                    y + base + lo, w != nullptr && !per_column ? w + base + lo : nullptr);
      if (per_column) {  // elementwise into dots, no reassociation
        const V* __restrict wb = w + base;
        const V* __restrict yb = y + base;
        for (std::int64_t j = lo; j < hi; j += cols)
          for (std::int64_t q = 0; q < cols; ++q) dots[q] += static_cast<double>(wb[j + q] * yb[j + q]);
      }
    }
  return dot;
}

/// The box's faces: row brow[b] reads point s at src[b * points + s] of [x | ghosts] (-1: a
/// Dirichlet zero).
template <class V, bool Variable>
double stencil_faces(const V* __restrict x, const V* __restrict ghosts, V* __restrict y, const V* __restrict w,
                     const V* __restrict coef, std::int64_t owned, const std::int64_t* __restrict brow,
                     const std::int32_t* __restrict src, std::int64_t faces, const V* c, int points) {
  double dot = 0;
  for (std::int64_t b = 0; b < faces; ++b) {
    const auto row = brow[b];
    const auto* __restrict sb = src + b * points;
    V acc = 0;
    for (int s = 0; s < points; ++s) {
      const std::int64_t k = sb[s];
      if (k < 0) continue;
      const V v = k < owned ? x[k] : ghosts[k - owned];
      acc += (Variable ? coef[s * owned + row] : c[s]) * v;
    }
    y[row] = acc;
    if (w != nullptr) dot += static_cast<double>(w[row] * acc);
  }
  return dot;
}

/// stencil_faces for a block of `cols` columns (row-major, constant coefficients): a row's columns
/// inner, accumulated in `acc` (cols values), the dots per column into `dots`.
template <class V>
void stencil_faces_block(const V* __restrict x, const V* __restrict ghosts, V* __restrict y, const V* __restrict w,
                         std::int64_t owned, const std::int64_t* __restrict brow, const std::int32_t* __restrict src,
                         std::int64_t faces, const V* c, int points, std::int64_t cols, V* __restrict acc,
                         double* __restrict dots) {
  for (std::int64_t b = 0; b < faces; ++b) {
    const auto row = brow[b];
    const auto* __restrict sb = src + b * points;
    for (std::int64_t q = 0; q < cols; ++q) acc[q] = 0;
    for (int s = 0; s < points; ++s) {
      const std::int64_t k = sb[s];
      if (k < 0) continue;
      const V* __restrict v = k < owned ? x + k * cols : ghosts + (k - owned) * cols;
      const V cs = c[s];
      for (std::int64_t q = 0; q < cols; ++q) acc[q] += cs * v[q];
    }
    V* __restrict yr = y + row * cols;
    for (std::int64_t q = 0; q < cols; ++q) yr[q] = acc[q];
    if (w != nullptr)
      for (std::int64_t q = 0; q < cols; ++q) dots[q] += static_cast<double>(w[row * cols + q] * acc[q]);
  }
}

}  // namespace detail

class StencilOperator final : public detail::Operator, public detail::SolveMembers<StencilOperator> {
 public:
  /// The operator of `stencil` on a grid of `shape` (as many dimensions as the stencil), split
  /// over `mesh` as `options` says. Collective over the mesh; bad input (shapes, axes, splits,
  /// coefficients, a grid smaller than the stencil's reach under Neumann or periodic boundaries)
  /// is the same Error on every rank.
  StencilOperator(Stencil stencil, std::vector<std::int64_t> shape, const Mesh& mesh, StencilOptions options = {})
      : stencil_(std::move(stencil)), shape_(std::move(shape)), mesh_(mesh), dtype_(options.dtype) {
    const MPI_Comm comm = mesh_.comm();
    std::string fault;
    try {
      configure(options);
    } catch (const std::exception& e) {
      fault = e.what();
    }
    comm::raise_if_any(comm, fault);
    build_layout(comm);
    build_faces();
  }

  // ---- the grid -------------------------------------------------------------------------------
  [[nodiscard]] const Stencil& stencil() const { return stencil_; }
  /// The grid's shape.
  [[nodiscard]] const std::vector<std::int64_t>& grid_shape() const { return shape_; }
  /// This rank's box: its first grid index and its extent per dimension (an extent may be 0).
  [[nodiscard]] std::vector<std::int64_t> box_begin() const { return trim(first_); }
  [[nodiscard]] std::vector<std::int64_t> box_shape() const { return trim(n_); }
  [[nodiscard]] std::array<std::int64_t, 2> shape() const { return {size(), size()}; }
  [[nodiscard]] std::int64_t size() const { return layout_->global_size(); }
  [[nodiscard]] at::ScalarType dtype() const { return dtype_; }
  [[nodiscard]] const Mesh& mesh() const { return mesh_; }
  [[nodiscard]] const std::shared_ptr<const RowLayout>& layout() const override { return layout_; }

  // ---- vectors --------------------------------------------------------------------------------
  /// This rank's box of a grid every rank holds: shaped as the grid, or flattened (N), or a block
  /// (N, k) of k flattened grids.
  [[nodiscard]] DVector scatter(const at::Tensor& global) const {
    const auto n = size();
    at::Tensor flat;
    if (global.sizes() == at::IntArrayRef(shape_))
      flat = global.reshape({n});
    else if ((global.dim() == 1 || global.dim() == 2) && global.size(0) == n)
      flat = global;
    else
      throw Error("StencilOperator::scatter: expected the grid " + std::string(c10::str(at::IntArrayRef(shape_))) +
                  ", a vector of " + std::to_string(n) + " or a block (" + std::to_string(n) + ", k), got shape " +
                  std::string(c10::str(global.sizes())));
    return {layout_, layout_->scatter(flat.to(dtype_))};
  }
  [[nodiscard]] DVector vector(at::Tensor owned) const { return {layout_, std::move(owned)}; }
  [[nodiscard]] DVector zeros() const { return {layout_, at::zeros({layout_->local_size()}, at::TensorOptions(dtype_))}; }

  // ---- products -------------------------------------------------------------------------------
  /// y = A x (x a vector or an (owned, k) block of the operator's partition). Collective.
  [[nodiscard]] DVector matvec(const DVector& x) const {
    check(x, "StencilOperator::matvec");
    const auto xl = x.local().detach().to(dtype_).contiguous();
    auto y = at::empty_like(xl);
    if (xl.dim() == 2)
      (void)apply_block(xl, y, {});
    else
      (void)apply(xl, y, {});
    return {layout_, y};
  }
  friend DVector operator*(const StencilOperator& a, const DVector& x) { return a.matvec(x); }

  /// The diagonal, boundary conditions included (what Jacobi and Chebyshev scale by).
  [[nodiscard]] DVector diagonal() const { return {layout_, diagonal_}; }

  /// The same rows as a distributed matrix, in the operator's partition (`DSparseTensor::from_local`):
  /// for AMG, or to compare. Collective.
  [[nodiscard]] DSparseTensor assemble() const {
    const auto owned = layout_->owned();
    std::vector<at::Tensor> values, rows, cols;
    const auto coords = box_coordinates(at::arange(layout_->local_size(), at::kLong));
    for (int s = 0; s < points(); ++s) {
      const auto [global, valid] = neighbour(coords, s);
      const auto v = coefficient(s).masked_select(valid);
      values.push_back(v);
      rows.push_back(owned.masked_select(valid));
      cols.push_back(global.masked_select(valid));
    }
    return DSparseTensor::from_local(at::cat(values), at::cat(rows), at::cat(cols), {size(), size()}, mesh_,
                                     {.owned_rows = owned});
  }

  // solve (detail::SolveMembers, defined in krylov/solve.hpp): every Krylov method; the
  // preconditioners jacobi and chebyshev from the diagonal, the others (AMG, ILU, SSOR, ...) from
  // the assembled rows; lsqr and lsmr need an adjoint product, which a stencil does not offer.

  // ---- what the Krylov code calls (owned slices, detail::Operator) ------------------------------
  std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    auto& ghosts = scratch_.ghosts(x);
    const auto& exchange = scratch_.exchange();
    exchange->start(x, ghosts);
    double dot = 0;
    AT_DISPATCH_FLOATING_TYPES(dtype_, "einshard::sparse::StencilOperator", [&] {
      const auto* xp = x.data_ptr<scalar_t>();
      auto* yp = y.data_ptr<scalar_t>();
      const auto* wp = w.defined() ? w.data_ptr<scalar_t>() : nullptr;
      const auto* cp = variable_ ? coef_.data_ptr<scalar_t>() : nullptr;
      std::vector<scalar_t> c(constants_.begin(), constants_.end());
      dot = interior<scalar_t>(xp, yp, wp, cp, c.data());
      exchange->finish_receives();
      const auto owned = layout_->local_size();
      const auto* gp = ghosts.data_ptr<scalar_t>();
      const auto* brow = face_rows_.data_ptr<std::int64_t>();
      const auto* src = face_sources_.data_ptr<std::int32_t>();
      const auto faces = face_rows_.numel();
      dot += variable_ ? detail::stencil_faces<scalar_t, true>(xp, gp, yp, wp, cp, owned, brow, src, faces, c.data(), points())
                       : detail::stencil_faces<scalar_t, false>(xp, gp, yp, wp, cp, owned, brow, src, faces, c.data(), points());
    });
    exchange->finish();
    return {dot, 0.0};
  }

  /// Y = A X for an (owned, k) block: one halo exchange of whole rows, the interior as the vector's
  /// loop over lines k times longer. Variable coefficients go column by column (the base class).
  std::vector<double> apply_block(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const override {
    if (variable_ || !x.is_contiguous() || !y.is_contiguous() || (w.defined() && !w.is_contiguous()))
      return detail::Operator::apply_block(x, y, w);
    const auto k = x.size(1);
    std::vector<double> dots(static_cast<std::size_t>(k), 0.0);
    auto& ghosts = scratch_.ghosts(x);
    const auto& exchange = scratch_.exchange();
    exchange->start(x, ghosts);
    AT_DISPATCH_FLOATING_TYPES(dtype_, "einshard::sparse::StencilOperator", [&] {
      const auto* xp = x.data_ptr<scalar_t>();
      auto* yp = y.data_ptr<scalar_t>();
      const auto* wp = w.defined() ? w.data_ptr<scalar_t>() : nullptr;
      std::vector<scalar_t> c(constants_.begin(), constants_.end());
      (void)interior<scalar_t>(xp, yp, wp, nullptr, c.data(), k, dots.data());
      exchange->finish_receives();
      std::vector<scalar_t> acc(static_cast<std::size_t>(k));
      detail::stencil_faces_block<scalar_t>(xp, ghosts.data_ptr<scalar_t>(), yp, wp, layout_->local_size(),
                                            face_rows_.data_ptr<std::int64_t>(), face_sources_.data_ptr<std::int32_t>(),
                                            face_rows_.numel(), c.data(), points(), k, acc.data(), dots.data());
    });
    exchange->finish();
    if (!w.defined()) dots.clear();
    return dots;
  }

 private:
  friend struct detail::SolvePipeline;

  [[nodiscard]] int points() const { return stencil_.points(); }
  [[nodiscard]] int ndim() const { return stencil_.ndim(); }
  [[nodiscard]] std::vector<std::int64_t> trim(const std::array<std::int64_t, 3>& a) const {
    return {a.begin() + (3 - ndim()), a.end()};
  }

  void check(const DVector& x, const std::string& what) const {
    detail::check_partition(x, *layout_, what, "operator's", "", "make it with scatter(), vector() or zeros() of this operator");
  }

  /// The options, checked (local: the constructor agrees on the fault before anything collective).
  void configure(const StencilOptions& o) {
    const auto d = static_cast<std::size_t>(ndim());
    if (shape_.size() != d)
      throw Error("StencilOperator: a " + std::to_string(d) + "-D stencil needs a " + std::to_string(d) +
                  "-D grid, got shape " + std::string(c10::str(at::IntArrayRef(shape_))));
    for (const auto e : shape_)
      if (e < 1) throw Error("StencilOperator: expected a grid of positive extents, got " + std::string(c10::str(at::IntArrayRef(shape_))));
    if (dtype_ != at::kDouble && dtype_ != at::kFloat)
      throw Error(std::string("StencilOperator: expected dtype float64 or float32, got ") + c10::toString(dtype_));
    if (o.boundary.size() != 1 && o.boundary.size() != d)
      throw Error("StencilOperator: expected one boundary or one per dimension (" + std::to_string(d) + "), got " +
                  std::to_string(o.boundary.size()));
    const std::size_t pad = 3 - d;
    for (std::size_t k = 0; k < d; ++k) {
      N_[pad + k] = shape_[k];
      boundary_[pad + k] = o.boundary.size() == 1 ? o.boundary[0] : o.boundary[k];
    }
    for (int s = 0; s < points(); ++s)
      for (std::size_t k = 0; k < d; ++k) {
        const auto reach = std::abs(stencil_.offsets()[static_cast<std::size_t>(s)][k]);
        reach_[pad + k] = std::max<std::int64_t>(reach_[pad + k], reach);
        if (boundary_[pad + k] != StencilBoundary::dirichlet && reach > shape_[k])
          throw Error("StencilOperator: dimension " + std::to_string(k) + " of the grid (" +
                      std::to_string(shape_[k]) + ") is shorter than the stencil's reach (" + std::to_string(reach) +
                      ") under a " + to_string(boundary_[pad + k]) + " boundary");
      }
    // The split: which mesh axis cuts which dimension, and this rank's block along it.
    std::array<int, 3> parts{1, 1, 1}, coordinate{0, 0, 0};
    if (o.axes.empty()) {
      parts[pad] = mesh_.size();
      coordinate[pad] = comm::rank_of(mesh_.comm());
    } else {
      if (o.axes.size() != d)
        throw Error("StencilOperator: expected one mesh axis (or \"\") per grid dimension (" + std::to_string(d) +
                    "), got " + std::to_string(o.axes.size()));
      std::set<std::string> used;
      int product = 1;
      for (std::size_t k = 0; k < d; ++k) {
        if (o.axes[k].empty()) continue;
        if (!mesh_.has(o.axes[k]))
          throw Error("StencilOperator: the mesh has no axis \"" + o.axes[k] + "\"");
        if (!used.insert(o.axes[k]).second) throw Error("StencilOperator: axis \"" + o.axes[k] + "\" splits two dimensions");
        parts[pad + k] = mesh_.size(o.axes[k]);
        coordinate[pad + k] = mesh_.coordinate(o.axes[k]);
        product *= parts[pad + k];
      }
      if (product != mesh_.size())
        throw Error("StencilOperator: the axes split the grid over " + std::to_string(product) + " of the mesh's " +
                    std::to_string(mesh_.size()) + " ranks; every axis of more than one rank must split a dimension");
    }
    if (!o.splits.empty() && o.splits.size() != d)
      throw Error("StencilOperator: expected one list of block sizes per grid dimension (" + std::to_string(d) +
                  "), got " + std::to_string(o.splits.size()));
    for (std::size_t k = 0; k < 3; ++k) {
      const auto& split = k >= pad && !o.splits.empty() ? o.splits[k - pad] : std::vector<std::int64_t>{};
      if (split.empty()) {
        first_[k] = detail::block_first(N_[k], parts[k], coordinate[k]);
        n_[k] = detail::block_first(N_[k], parts[k], coordinate[k] + 1) - first_[k];
        continue;
      }
      std::int64_t total = 0;
      for (const auto b : split) total += b < 0 ? -N_[k] - 1 : b;
      if (split.size() != static_cast<std::size_t>(parts[k]) || total != N_[k])
        throw Error("StencilOperator: the block sizes of dimension " + std::to_string(k - pad) + " must be " +
                    std::to_string(parts[k]) + " nonnegative numbers summing to " + std::to_string(N_[k]) + ", got " +
                    std::string(c10::str(at::IntArrayRef(split))));
      first_[k] = 0;
      for (int c = 0; c < coordinate[k]; ++c) first_[k] += split[static_cast<std::size_t>(c)];
      n_[k] = split[static_cast<std::size_t>(coordinate[k])];
    }
    // The coefficients: constants, or one box-shaped tensor per point.
    constants_ = stencil_.coefficients();
    variable_ = !o.coefficients.empty();
    const auto owned = n_[0] * n_[1] * n_[2];
    if (variable_) {
      if (o.coefficients.size() != static_cast<std::size_t>(points()))
        throw Error("StencilOperator: expected one coefficient tensor per stencil point (" + std::to_string(points()) +
                    "), got " + std::to_string(o.coefficients.size()));
      const auto box = box_shape();
      std::vector<at::Tensor> c;
      for (std::size_t s = 0; s < o.coefficients.size(); ++s) {
        auto t = o.coefficients[s];
        if (!t.defined() || (t.sizes() != at::IntArrayRef(box) && t.sizes() != at::IntArrayRef(shape_)))
          throw Error("StencilOperator: coefficient tensor " + std::to_string(s) + " must have the box's shape " +
                      std::string(c10::str(at::IntArrayRef(box))) + " or the grid's " +
                      std::string(c10::str(at::IntArrayRef(shape_))) + ", got " +
                      (t.defined() ? std::string(c10::str(t.sizes())) : std::string("an undefined tensor")));
        if (t.sizes() != at::IntArrayRef(box))
          for (std::size_t k = 0; k < d; ++k) t = t.narrow(static_cast<std::int64_t>(k), first_[pad + k], n_[pad + k]);
        c.push_back(t.detach().to(dtype_).reshape({owned}));
      }
      coef_ = at::stack(c).contiguous();
    }
  }

  /// The rows this rank owns (its box, ascending) and their halo plan.
  void build_layout(MPI_Comm comm) {
    layout_ = std::make_shared<const RowLayout>(global_index(box_coordinates(at::arange(n_[0] * n_[1] * n_[2], at::kLong)),
                                                             first_),
                                                size_of_grid(), comm);
  }
  [[nodiscard]] std::int64_t size_of_grid() const { return N_[0] * N_[1] * N_[2]; }

  /// Box coordinates (3, m) of local rows.
  [[nodiscard]] at::Tensor box_coordinates(const at::Tensor& local) const {
    // An empty box has no rows: the divisors only need to be nonzero.
    const auto plane = std::max<std::int64_t>(n_[1] * n_[2], 1), line = std::max<std::int64_t>(n_[2], 1);
    return at::stack({at::floor_divide(local, plane), at::remainder(at::floor_divide(local, line), std::max<std::int64_t>(n_[1], 1)),
                      at::remainder(local, line)});
  }
  /// Global index of coordinates (3, m) relative to `origin`.
  [[nodiscard]] at::Tensor global_index(const at::Tensor& c, const std::array<std::int64_t, 3>& origin) const {
    return ((c[0] + origin[0]) * N_[1] + (c[1] + origin[1])) * N_[2] + (c[2] + origin[2]);
  }

  /// Where point s of the rows at box coordinates `c` (3, m) reads: its global index after the
  /// boundary conditions, and whether it exists (false: a Dirichlet zero).
  [[nodiscard]] std::pair<at::Tensor, at::Tensor> neighbour(const at::Tensor& c, int s) const {
    auto valid = at::ones({c.size(1)}, at::kBool);
    std::array<at::Tensor, 3> g;
    const auto pad = static_cast<std::size_t>(3 - ndim());
    for (std::size_t k = 0; k < 3; ++k) {
      const auto o = k < pad ? 0 : stencil_.offsets()[static_cast<std::size_t>(s)][k - pad];
      auto gk = c[static_cast<std::int64_t>(k)] + (first_[k] + o);
      const auto n = N_[k];
      switch (boundary_[k]) {
        case StencilBoundary::dirichlet: valid = valid & (gk >= 0) & (gk < n); break;
        case StencilBoundary::neumann: gk = at::where(gk < 0, -1 - gk, at::where(gk >= n, 2 * n - 1 - gk, gk)); break;
        case StencilBoundary::periodic: gk = at::remainder(gk, n); break;
      }
      g[k] = gk.clamp(0, n - 1);
    }
    return {(g[0] * N_[1] + g[1]) * N_[2] + g[2], valid};
  }

  /// The coefficient of point s at every owned row.
  [[nodiscard]] at::Tensor coefficient(int s) const {
    return variable_ ? coef_[s] : at::full({layout_->local_size()}, constants_[static_cast<std::size_t>(s)], at::TensorOptions(dtype_));
  }

  /// The faces (rows whose stencil leaves the box), where each of their points reads, the halo
  /// plan of the ghosts they read, and the diagonal. Collective (the plan's handshake).
  void build_faces() {
    const auto owned = layout_->local_size();
    const auto all = at::arange(owned, at::kLong);
    const auto c = box_coordinates(all);
    auto face = at::zeros({owned}, at::kBool);
    for (std::int64_t k = 0; k < 3; ++k) face = face | (c[k] < reach_[k]) | (c[k] >= n_[k] - reach_[k]);
    face_rows_ = all.masked_select(face).contiguous();
    const auto fc = c.index_select(1, face_rows_);
    const auto faces = face_rows_.numel();
    // Each point's source: an owned row, or (global index, to become a ghost slot), or none.
    auto local = at::full({faces, points()}, -1, at::kLong);
    auto ghost_ids = at::full({faces, points()}, -1, at::kLong);
    for (int s = 0; s < points(); ++s) {
      const auto [g, valid] = neighbour(fc, s);
      // Box coordinates of the global index g, to tell owned from ghost.
      const auto z = at::floor_divide(g, N_[1] * N_[2]) - first_[0];
      const auto yy = at::remainder(at::floor_divide(g, N_[2]), N_[1]) - first_[1];
      const auto xx = at::remainder(g, N_[2]) - first_[2];
      const auto in_box = (z >= 0) & (z < n_[0]) & (yy >= 0) & (yy < n_[1]) & (xx >= 0) & (xx < n_[2]);
      local.select(1, s).copy_(at::where(valid & in_box, (z * n_[1] + yy) * n_[2] + xx, -1));
      ghost_ids.select(1, s).copy_(at::where(valid & ~in_box, g, -1));
    }
    const auto is_ghost = ghost_ids >= 0;
    const auto wanted = ghost_ids.masked_select(is_ghost);
    const auto ghosts = std::get<0>(at::_unique(wanted, /*sorted=*/true));
    plan_ = HaloPlan::build(layout_, ghosts);
    scratch_ = detail::HaloScratch(plan_);
    const auto [sorted, slot_of_sorted] = plan_->ghosts.sort();
    local.masked_scatter_(is_ghost, slot_of_sorted.index_select(0, at::searchsorted(sorted, wanted)) + owned);
    std::string fault;
    if (owned + plan_->ghost_count() > std::numeric_limits<std::int32_t>::max())
      fault = "StencilOperator: a box of more than 2^31 points with its halo; split the grid over more ranks";
    comm::raise_if_any(layout_->comm(), fault);
    face_sources_ = local.to(at::kInt).contiguous();
    // The diagonal: the centre, plus on the faces every point that reads its own row (Neumann's
    // mirror, a periodic wrap onto itself).
    diagonal_ = stencil_.center() >= 0 ? coefficient(stencil_.center()).clone() : at::zeros({owned}, at::TensorOptions(dtype_));
    if (faces > 0) {
      auto extra = at::zeros({faces}, at::TensorOptions(dtype_));
      for (int s = 0; s < points(); ++s) {
        if (s == stencil_.center()) continue;
        const auto self = local.select(1, s) == face_rows_;
        extra += at::where(self, coefficient(s).index_select(0, face_rows_), at::zeros({}, at::TensorOptions(dtype_)));
      }
      diagonal_.index_add_(0, face_rows_, extra);
    }
    // In-box offsets of the interior's points.
    const auto pad = static_cast<std::size_t>(3 - ndim());
    offsets_.assign(static_cast<std::size_t>(points()), 0);
    for (int s = 0; s < points(); ++s) {
      std::array<std::int64_t, 3> o{0, 0, 0};
      for (std::size_t k = pad; k < 3; ++k) o[k] = stencil_.offsets()[static_cast<std::size_t>(s)][k - pad];
      offsets_[static_cast<std::size_t>(s)] = (o[0] * n_[1] + o[1]) * n_[2] + o[2];
    }
  }

  /// The interior kernel for this stencil's point count; `cols` > 1: a block (constant
  /// coefficients), the last dimension and the offsets scaled by it.
  template <class V>
  double interior(const V* x, V* y, const V* w, const V* coef, const V* c, std::int64_t cols = 1,
                  double* dots = nullptr) const {
    const auto owned = layout_->local_size();
    std::vector<std::int64_t> scaled;
    const auto* off = offsets_.data();
    auto n = n_;
    auto r = reach_;
    if (cols > 1) {
      for (const auto o : offsets_) scaled.push_back(o * cols);
      off = scaled.data();
      n[2] *= cols;
      r[2] *= cols;
    }
    const auto run = [&](auto fixed) {
      constexpr int S = decltype(fixed)::value;
      return variable_ ? detail::stencil_interior<V, S, true>(x, y, w, coef, owned, n.data(), r.data(), off, c, points())
                       : detail::stencil_interior<V, S, false>(x, y, w, coef, owned, n.data(), r.data(), off, c, points(),
                                                               cols, dots);
    };
    switch (points()) {
      case 5: return run(std::integral_constant<int, 5>{});
      case 7: return run(std::integral_constant<int, 7>{});
      case 9: return run(std::integral_constant<int, 9>{});
      case 27: return run(std::integral_constant<int, 27>{});
      default: return run(std::integral_constant<int, 0>{});
    }
  }

  Stencil stencil_;
  std::vector<std::int64_t> shape_;
  Mesh mesh_;
  at::ScalarType dtype_;
  // The grid as three dimensions (a 2-D grid is 1 × n0 × n1): global extents, this box's first
  // index and extents, the stencil's reach, the boundary conditions.
  std::array<std::int64_t, 3> N_{1, 1, 1}, first_{0, 0, 0}, n_{1, 1, 1}, reach_{0, 0, 0};
  std::array<StencilBoundary, 3> boundary_{StencilBoundary::dirichlet, StencilBoundary::dirichlet,
                                           StencilBoundary::dirichlet};
  std::vector<double> constants_;
  bool variable_ = false;
  at::Tensor coef_;                      ///< (points, owned) when variable_
  std::vector<std::int64_t> offsets_;    ///< in-box linear offset of each point
  std::shared_ptr<const RowLayout> layout_;
  std::shared_ptr<const HaloPlan> plan_;
  at::Tensor face_rows_;                 ///< local rows whose stencil leaves the box, ascending
  at::Tensor face_sources_;              ///< (faces, points) int32 into [x | ghosts], -1: none
  at::Tensor diagonal_;
  mutable detail::HaloScratch scratch_;
};

}  // namespace einshard::sparse
