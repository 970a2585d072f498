#pragma once
/// @file
/// Test matrices of the sparse suite, built globally (for the one-process reference) or by rows
/// (for distributed assembly).

#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace einshard::testing {

struct Coo {
  at::Tensor values, rows, cols;
  std::int64_t n = 0;
};

/// 2-D 5-point Laplacian (Dirichlet) on an nx x ny grid, rows [first, last) only.
inline Coo poisson2d_rows(std::int64_t nx, std::int64_t ny, std::int64_t first, std::int64_t last,
                          at::ScalarType dtype = at::kDouble) {
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  for (std::int64_t i = first; i < last; ++i) {
    const auto x = i % nx, y = i / nx;
    r.push_back(i); c.push_back(i); v.push_back(4.0);
    const auto add = [&](std::int64_t j) { r.push_back(i); c.push_back(j); v.push_back(-1.0); };
    if (x > 0) add(i - 1);
    if (x + 1 < nx) add(i + 1);
    if (y > 0) add(i - nx);
    if (y + 1 < ny) add(i + nx);
  }
  const auto m = static_cast<std::int64_t>(r.size());
  return {at::tensor(v, at::kDouble).view({m}).to(dtype), at::tensor(r, at::kLong).view({m}),
          at::tensor(c, at::kLong).view({m}), nx * ny};
}
inline Coo poisson2d(std::int64_t nx, std::int64_t ny) { return poisson2d_rows(nx, ny, 0, nx * ny); }

/// Grid coordinates of poisson2d's unknowns, (n, 2) float64.
inline at::Tensor grid_coords(std::int64_t nx, std::int64_t ny) {
  const auto i = at::arange(nx * ny, at::kLong);
  return at::stack({at::remainder(i, nx), at::div(i, nx, "floor")}, 1).to(at::kDouble);
}

/// 3-D 7-point Laplacian (Dirichlet) on an nx x ny x nz grid.
inline Coo poisson3d(std::int64_t nx, std::int64_t ny, std::int64_t nz) {
  std::vector<std::int64_t> r, c;
  std::vector<double> v;
  for (std::int64_t i = 0; i < nx * ny * nz; ++i) {
    const auto x = i % nx, y = (i / nx) % ny, z = i / (nx * ny);
    r.push_back(i); c.push_back(i); v.push_back(6.0);
    const auto add = [&](bool inside, std::int64_t j) {
      if (inside) { r.push_back(i); c.push_back(j); v.push_back(-1.0); }
    };
    add(x > 0, i - 1); add(x + 1 < nx, i + 1);
    add(y > 0, i - nx); add(y + 1 < ny, i + nx);
    add(z > 0, i - nx * ny); add(z + 1 < nz, i + nx * ny);
  }
  const auto m = static_cast<std::int64_t>(r.size());
  return {at::tensor(v, at::kDouble).view({m}), at::tensor(r, at::kLong).view({m}), at::tensor(c, at::kLong).view({m}),
          nx * ny * nz};
}

/// Grid coordinates of poisson3d's unknowns, (n, 3) float64.
inline at::Tensor grid_coords3d(std::int64_t nx, std::int64_t ny, std::int64_t nz) {
  const auto i = at::arange(nx * ny * nz, at::kLong);
  return at::stack({at::remainder(i, nx), at::remainder(at::div(i, nx, "floor"), ny), at::div(i, nx * ny, "floor")}, 1)
      .to(at::kDouble);
}

/// Anisotropic diffusion -eps u_xx - u_yy on an nx x ny grid (5-point, Dirichlet): strong
/// couplings in y only, the case where AMG's strength of connection and coarsening matter.
inline Coo anisotropic2d(std::int64_t nx, std::int64_t ny, double eps) {
  auto a = poisson2d(nx, ny);
  const auto horizontal = (a.rows - a.cols).abs() == 1;
  const auto diagonal = a.rows == a.cols;
  a.values = at::where(horizontal, a.values * eps, at::where(diagonal, at::full_like(a.values, 2 + 2 * eps), a.values));
  return a;
}

/// An unsymmetric matrix with duplicate entries: advection-diffusion on a 1-D periodic ring with
/// long-range couplings, every entry listed twice (half values each) — seeded, global.
inline Coo unsymmetric_with_duplicates(std::int64_t n, std::uint64_t seed = 7) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> r, c, v;
  const auto i = at::arange(n, at::kLong);
  r.push_back(i); c.push_back(i); v.push_back(at::full({n}, 3.0, at::kDouble));
  r.push_back(i); c.push_back(at::remainder(i + 1, n)); v.push_back(at::full({n}, -1.5, at::kDouble));
  r.push_back(i); c.push_back(at::remainder(i + 7, n)); v.push_back(at::rand({n}, gen, at::kDouble));
  auto rows = at::cat(r), cols = at::cat(c), vals = at::cat(v);
  return {at::cat({vals, vals}) * 0.5, at::cat({rows, rows}), at::cat({cols, cols}), n};
}

/// 2-D convection-diffusion: the 5-point Laplacian plus a central difference of c·∂x (nonsymmetric).
inline Coo convection_diffusion(std::int64_t nx, std::int64_t ny, double c) {
  auto a = poisson2d(nx, ny);
  const auto east = a.cols == a.rows + 1, west = a.cols == a.rows - 1;
  a.values = a.values + c * east.to(at::kDouble) - c * west.to(at::kDouble);
  return a;
}

/// The Laplacian shifted by -sigma: symmetric, indefinite for sigma inside its spectrum.
inline Coo shifted_laplacian(std::int64_t nx, std::int64_t ny, double sigma) {
  auto a = poisson2d(nx, ny);
  a.values = a.values - sigma * (a.rows == a.cols).to(at::kDouble);
  return a;
}

/// A reproducible standard-normal vector (right-hand sides), the same on every rank.
inline at::Tensor random_vector(std::int64_t n, std::uint64_t seed, at::ScalarType dtype = at::kDouble) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn({n}, gen, dtype);
}

/// ‖x − ref‖₂ / ‖ref‖₂.
inline double relative_error(const at::Tensor& x, const at::Tensor& ref) {
  const double gap = (x - ref).norm().item<double>();
  return gap == 0.0 ? 0.0 : gap / ref.norm().item<double>();  // equal, or both empty (a rank may own nothing)
}

/// max |x − ref| / max |ref|: the relative error of the largest entry.
inline double rel(const at::Tensor& x, const at::Tensor& ref) {
  return (x - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

/// The largest magnitude of `t`, 0 for an empty tensor.
inline double max_abs(const at::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

inline at::Tensor dense(const Coo& a) {
  return at::zeros({a.n, a.n}, a.values.options()).index_put_({a.rows, a.cols}, a.values, /*accumulate=*/true);
}

}  // namespace einshard::testing
