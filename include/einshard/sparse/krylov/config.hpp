#pragma once
/// @file
/// `SolverConfig`: scoped solver defaults (RAII), torch-sla's `SolverConfig` context. Inside the
/// scope, `SolveOptions` made without a field take it from the scope: method, preconditioner,
/// rtol, atol, maxiter, dtol and restart. Precedence, strongest first: a field written in the
/// options (`D.solve(b, {.rtol = 1e-8})`), the innermost live SolverConfig, the library default.
/// Scopes nest (an inner one starts from the outer one's values for the fields it leaves out) and
/// are per thread; every rank must open the same scopes, as it makes the same solve calls.

#include "einshard/sparse/krylov/options.hpp"

namespace einshard::sparse {

class SolverConfig {
 public:
  /// `defaults`: made inside the enclosing scope, so the fields it leaves out keep their values.
  explicit SolverConfig(const SolveOptions& defaults) : saved_(detail::solve_defaults()) {
    detail::solve_defaults() = {defaults.method, defaults.preconditioner, defaults.rtol,   defaults.atol,
                                defaults.maxiter, defaults.dtol,          defaults.restart};
  }
  ~SolverConfig() { detail::solve_defaults() = saved_; }
  SolverConfig(const SolverConfig&) = delete;
  SolverConfig& operator=(const SolverConfig&) = delete;

 private:
  detail::SolveDefaults saved_;
};

}  // namespace einshard::sparse
