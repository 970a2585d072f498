#pragma once
/// @file
/// `detail::Operator`: what a Krylov method needs of a matrix — its row partition and a product
/// y = A x on owned slices that also returns the local part of <w, y>, so a solver gets the
/// product and the dot of the same iteration in one pass; the least-squares methods also need
/// the domain partition and the adjoint product x = Aᴴ y. And `detail::SolveMembers`: the solves
/// every operator offers its users, declared here and defined by the solve pipeline.

#include <ATen/ATen.h>

#include <complex>
#include <memory>
#include <string>
#include <vector>

#include "einshard/error.hpp"

#include "einshard/sparse/matrix/dvector.hpp"
#include "einshard/sparse/matrix/vector_kernels.hpp"
#include "einshard/sparse/matrix/row_layout.hpp"

namespace einshard::sparse {

struct SolveOptions;         // krylov/options.hpp
struct SolveResult;          // krylov/options.hpp
struct LeastSquaresOptions;  // krylov/least_squares.hpp
struct LeastSquaresResult;   // krylov/least_squares.hpp

namespace detail {

/// The solves of an operator `Op` (DSparseTensor, LinearOperator derive from it), defined by the
/// solve pipeline (krylov/solve.hpp; include <einshard/sparse.hpp>). The option types are
/// template parameters only so that an operator's header needs their names, not their
/// definitions: a default argument of a class template's member is made where a call uses it, so
/// `A.solve(b)` and `A.lsqr(b)` take `{}` there.
template <class Op, class Options = SolveOptions, class LsOptions = LeastSquaresOptions>
class SolveMembers {
 public:
  /// Solves A x = b (see `SolveOptions` for the methods, the stop test and the defaults).
  /// Collective. Several right-hand sides: `b` an (n_local, k) block (`scatter` of an (N, k)
  /// tensor) gives an (n_local, k) x and `info.columns`; every method runs them as k coupled
  /// recurrences (one product and one all-reduce per reduction step for all k, columns converging
  /// independently). A matrix's solve is differentiable in b and its values (one adjoint solve).
  [[nodiscard]] SolveResult solve(const DVector& b, const Options& options = {}) const;
  /// min ‖A x − b‖² + damp² ‖x‖² by LSQR (SciPy's `lsqr`); b in the range, x in the domain.
  [[nodiscard]] LeastSquaresResult lsqr(const DVector& b, const LsOptions& options = {}) const;
  /// The same problem by LSMR (SciPy's `lsmr`): ‖Aᴴ r‖ decreases monotonically.
  [[nodiscard]] LeastSquaresResult lsmr(const DVector& b, const LsOptions& options = {}) const;
};

class Operator {
 public:
  virtual ~Operator() = default;
  [[nodiscard]] virtual const std::shared_ptr<const RowLayout>& layout() const = 0;
  /// y = A x (x, y: owned slices, contiguous, the operator's dtype); returns this rank's partial
  /// sum of conj(w_i) y_i when `w` is defined (zero otherwise). Collective.
  virtual std::complex<double> apply(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const = 0;
  /// Y = A X for k vectors at once, X and Y (owned, k) row-major, returning this rank's partial
  /// Re <w_j, y_j> of every column when `w` is defined (empty otherwise). By default one product
  /// per column; an operator that can do better (DSparseTensor: one halo exchange for all k)
  /// overrides it. Collective.
  virtual std::vector<double> apply_block(const at::Tensor& x, at::Tensor& y, const at::Tensor& w) const {
    std::vector<double> dots;
    for (std::int64_t j = 0; j < x.size(1); ++j) {
      auto yj = at::empty({y.size(0)}, y.options());
      const auto d = apply(x.select(1, j).contiguous(), yj, w.defined() ? w.select(1, j).contiguous() : at::Tensor());
      if (w.defined()) dots.push_back(d.real());
      y.select(1, j).copy_(yj);
    }
    return dots;
  }
  /// y = A x + beta y (y read, then overwritten), returning this rank's partial ‖y‖²: the update
  /// LSQR and LSMR make of u each step. DSparseTensor fuses it into its product (y read and
  /// written once, no product vector); by default a product into `scratch` (owned, like y), then
  /// one pass. Collective.
  virtual double apply_update(const at::Tensor& x, at::Tensor& y, double beta, at::Tensor& scratch) const {
    apply(x, scratch, {});
    return detail::axpby_norm(1.0, scratch, beta, y);
  }
  /// The partition of x (the columns); the row partition unless the operator is rectangular.
  [[nodiscard]] virtual const std::shared_ptr<const RowLayout>& domain_layout() const { return layout(); }
  /// x = Aᴴ y (y: owned slice of the range, x: of the domain). Collective.
  virtual void apply_adjoint(const at::Tensor& /*y*/, at::Tensor& /*x*/) const {
    throw Error("Operator::apply_adjoint: this operator has no adjoint product");
  }
};

/// Throws unless `x` is a vector (or block) of partition `l`: its global length first (local test,
/// global sizes: every rank throws together), then the rows each rank owns (collective). `whose`:
/// "matrix's" or "operator's"; `side`: "range" or "domain" for one whose two differ, empty
/// otherwise; `hint`: how to make a vector of the right partition.
inline void check_partition(const DVector& x, const RowLayout& l, const std::string& what, const std::string& whose,
                            const std::string& side, const std::string& hint) {
  if (!x.defined()) throw Error(what + ": undefined vector");
  if (x.size() != l.global_size())
    throw Error(what + ": expected a vector of the " + whose + " " + (side.empty() ? "range" : side) + " (" +
                std::to_string(l.global_size()) + " rows), got " + std::to_string(x.size()) + " rows");
  if (x.layout().get() != &l && !x.layout()->same_as(l))
    throw Error(what + ": expected a vector of the " + whose + " " + (side.empty() ? std::string() : side + " ") +
                "partition, got another (" + x.layout()->difference(l) + "); " + hint);
}

}  // namespace detail
}  // namespace einshard::sparse
