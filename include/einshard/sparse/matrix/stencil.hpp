#pragma once
/// @file
/// `Stencil`: the points of a structured-grid stencil (offsets from the point a row belongs to) and
/// their constant coefficients, with the Laplacians most codes start from; and `StencilBoundary`,
/// what a stencil reads outside the grid. `StencilOperator` (stencil_operator.hpp) applies one.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "einshard/error.hpp"

namespace einshard::sparse {

/// What a stencil point outside the grid reads, per grid dimension: zero (`dirichlet`, the
/// homogeneous condition: move the boundary values into b), the mirrored point inside (`neumann`,
/// zero flux across the face half a cell out: index -1 reads 0, index n reads n - 1), or the
/// point on the other side (`periodic`).
enum class StencilBoundary { dirichlet, neumann, periodic };

inline const char* to_string(StencilBoundary b) {
  switch (b) {
    case StencilBoundary::dirichlet: return "dirichlet";
    case StencilBoundary::neumann: return "neumann";
    case StencilBoundary::periodic: return "periodic";
  }
  return "unknown";
}

/// Row p of the operator is Σ_s coefficient_s · x[p + offset_s]. One to three dimensions; the
/// offsets are distinct, the zero offset (the diagonal) may be absent.
class Stencil {
 public:
  Stencil(std::vector<std::vector<int>> offsets, std::vector<double> coefficients)
      : offsets_(std::move(offsets)), coefficients_(std::move(coefficients)) {
    if (offsets_.empty()) throw Error("Stencil: expected at least one point");
    if (offsets_.size() != coefficients_.size())
      throw Error("Stencil: expected one coefficient per point, got " + std::to_string(offsets_.size()) +
                  " points and " + std::to_string(coefficients_.size()) + " coefficients");
    const auto d = offsets_.front().size();
    if (d < 1 || d > 3) throw Error("Stencil: expected offsets of 1 to 3 dimensions, got " + std::to_string(d));
    for (std::size_t s = 0; s < offsets_.size(); ++s) {
      if (offsets_[s].size() != d)
        throw Error("Stencil: every offset must have " + std::to_string(d) + " dimensions, point " +
                    std::to_string(s) + " has " + std::to_string(offsets_[s].size()));
      for (std::size_t t = 0; t < s; ++t)
        if (offsets_[t] == offsets_[s]) throw Error("Stencil: points " + std::to_string(t) + " and " +
                                                    std::to_string(s) + " have the same offset");
      bool zero = true;
      for (const int o : offsets_[s]) zero = zero && o == 0;
      if (zero) center_ = static_cast<int>(s);
    }
  }

  /// −Δ on a 2-D grid of unit spacing: 4 on the diagonal, −1 at the four neighbours.
  static Stencil laplacian5() { return star(2); }
  /// −Δ on a 3-D grid of unit spacing: 6 on the diagonal, −1 at the six neighbours.
  static Stencil laplacian7() { return star(3); }
  /// The compact fourth-order (Mehrstellen) −Δ on a 2-D grid, times 6: 20 on the diagonal, −4 at
  /// the edge neighbours, −1 at the corners.
  static Stencil laplacian9() {
    std::vector<std::vector<int>> o;
    std::vector<double> c;
    for (int i = -1; i <= 1; ++i)
      for (int j = -1; j <= 1; ++j) {
        o.push_back({i, j});
        c.push_back(i == 0 && j == 0 ? 20.0 : (i == 0 || j == 0) ? -4.0 : -1.0);
      }
    return {std::move(o), std::move(c)};
  }
  /// The 27-point operator of HPCG: 26 on the diagonal, −1 at every neighbour of the 3×3×3 cube.
  static Stencil laplacian27() {
    std::vector<std::vector<int>> o;
    std::vector<double> c;
    for (int i = -1; i <= 1; ++i)
      for (int j = -1; j <= 1; ++j)
        for (int k = -1; k <= 1; ++k) {
          o.push_back({i, j, k});
          c.push_back(i == 0 && j == 0 && k == 0 ? 26.0 : -1.0);
        }
    return {std::move(o), std::move(c)};
  }

  [[nodiscard]] int ndim() const { return static_cast<int>(offsets_.front().size()); }
  [[nodiscard]] int points() const { return static_cast<int>(offsets_.size()); }
  [[nodiscard]] const std::vector<std::vector<int>>& offsets() const { return offsets_; }
  [[nodiscard]] const std::vector<double>& coefficients() const { return coefficients_; }
  /// The point of offset zero, or -1 when the stencil has none.
  [[nodiscard]] int center() const { return center_; }

 private:
  static Stencil star(int d) {
    std::vector<std::vector<int>> o{std::vector<int>(static_cast<std::size_t>(d), 0)};
    std::vector<double> c{2.0 * d};
    for (int k = 0; k < d; ++k)
      for (const int sign : {-1, 1}) {
        std::vector<int> e(static_cast<std::size_t>(d), 0);
        e[static_cast<std::size_t>(k)] = sign;
        o.push_back(std::move(e));
        c.push_back(-1.0);
      }
    return {std::move(o), std::move(c)};
  }

  std::vector<std::vector<int>> offsets_;
  std::vector<double> coefficients_;
  int center_ = -1;
};

}  // namespace einshard::sparse
