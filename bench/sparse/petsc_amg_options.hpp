// einshard's AMG settings spelled as PETSc PCHYPRE options, for the benchmarks that run PETSc +
// BoomerAMG with the same hierarchy as einshard's (amg_petsc.cpp, real_petsc.cpp).
#pragma once

#include <petscsys.h>

#include <map>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include <einshard/sparse.hpp>

#include "petsc_support.hpp"

namespace einshard_bench {

namespace sp = ::einshard::sparse;

/// `o` changed by a "key=value,key=value" list (amg_petsc.cpp's --amg): coarsen, interp, smoother,
/// agg_interp, pmax, agg, sweeps, levels, theta, functions, nodal.
inline sp::AmgOptions apply_amg_spec(sp::AmgOptions o, const std::string& spec) {
  for (const auto& item : spec.empty() ? std::vector<std::string>{} : split(spec)) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw std::runtime_error("--amg: expected key=value, got " + item);
    const auto key = item.substr(0, eq), v = item.substr(eq + 1);
    const auto pick = [&](auto& field, const std::map<std::string, std::decay_t<decltype(field)>>& names) {
      const auto it = names.find(v);
      if (it == names.end()) throw std::runtime_error("--amg: unknown " + key + " " + v);
      field = it->second;
    };
    if (key == "coarsen")
      pick(o.coarsening, {{"hmis", sp::AmgCoarsening::hmis}, {"pmis", sp::AmgCoarsening::pmis},
                          {"falgout", sp::AmgCoarsening::falgout}});
    else if (key == "interp")
      pick(o.interpolation, {{"ext+i", sp::AmgInterpolation::extended_i}, {"classical", sp::AmgInterpolation::classical},
                             {"direct", sp::AmgInterpolation::direct}, {"multipass", sp::AmgInterpolation::multipass},
                             {"standard", sp::AmgInterpolation::standard}});
    else if (key == "smoother")
      pick(o.smoother, {{"l1gs", sp::AmgSmoother::l1_gauss_seidel}, {"hgs", sp::AmgSmoother::hybrid_gauss_seidel},
                        {"l1jacobi", sp::AmgSmoother::l1_jacobi}, {"cheby", sp::AmgSmoother::chebyshev}});
    else if (key == "agg_interp")
      pick(o.aggressive_interpolation, {{"multipass", sp::AmgAggressiveInterpolation::multipass},
                                        {"2s-ext+i", sp::AmgAggressiveInterpolation::two_stage_extended_i},
                                        {"2s-std", sp::AmgAggressiveInterpolation::two_stage_standard},
                                        {"2s-ext", sp::AmgAggressiveInterpolation::two_stage_extended}});
    else if (key == "pmax") o.max_elements = std::stoi(v);
    else if (key == "agg") o.aggressive_levels = std::stoi(v);
    else if (key == "sweeps") o.sweeps = std::stoi(v);
    else if (key == "levels") o.max_levels = std::stoi(v);
    else if (key == "theta") o.strong_threshold = std::stod(v);
    else if (key == "functions") o.functions = std::stoi(v);
    else if (key == "nodal") o.nodal = v == "1" || v == "true";
    else throw std::runtime_error("--amg: unknown key " + key);
  }
  return o;
}

inline void set_option(const std::string& name, const std::string& value) {
  PETSC(PetscOptionsSetValue(nullptr, name.c_str(), value.c_str()));
}

/// The PETSc configurations of the AMG benchmarks, by solver name: options under a prefix of its own;
/// petsc_hypre_x gets es_amg's settings `o`, spelled as PCHYPRE's options.
inline void set_petsc_options(const sp::AmgOptions& o, const std::string& extra) {
  set_option("-petsc_hypre_pc_hypre_type", "boomeramg");
  set_option("-petsc_gamg_t_pc_gamg_threshold", "0.02");
  set_option("-petsc_gamg_t_pc_gamg_square_graph", "10");
  const std::string x = "-petsc_hypre_x_pc_hypre_";
  const auto name = [](auto value, const std::map<decltype(value), std::string>& names) { return names.at(value); };
  set_option(x + "type", "boomeramg");
  set_option(x + "boomeramg_coarsen_type", name(*o.coarsening, {{sp::AmgCoarsening::hmis, "HMIS"},
                                                              {sp::AmgCoarsening::pmis, "PMIS"},
                                                              {sp::AmgCoarsening::falgout, "Falgout"}}));
  set_option(x + "boomeramg_interp_type", name(*o.interpolation, {{sp::AmgInterpolation::extended_i, "ext+i"},
                                                                {sp::AmgInterpolation::classical, "classical"},
                                                                {sp::AmgInterpolation::direct, "direct"},
                                                                {sp::AmgInterpolation::multipass, "multipass"},
                                                                {sp::AmgInterpolation::standard, "standard"}}));
  set_option(x + "boomeramg_P_max", std::to_string(*o.max_elements));
  set_option(x + "boomeramg_strong_threshold", std::to_string(*o.strong_threshold));
  set_option(x + "boomeramg_agg_nl", std::to_string(*o.aggressive_levels));
  set_option(x + "boomeramg_max_levels", std::to_string(o.max_levels));
  set_option(x + "boomeramg_grid_sweeps_down", std::to_string(o.sweeps));
  set_option(x + "boomeramg_grid_sweeps_up", std::to_string(o.sweeps));
  const std::map<sp::AmgSmoother, std::pair<std::string, std::string>> relax{
      {sp::AmgSmoother::l1_gauss_seidel, {"l1-Gauss-Seidel", "backward-l1-Gauss-Seidel"}},
      {sp::AmgSmoother::hybrid_gauss_seidel, {"symmetric-SOR/Jacobi", "symmetric-SOR/Jacobi"}},
      {sp::AmgSmoother::l1_jacobi, {"l1scaled-Jacobi", "l1scaled-Jacobi"}},
      {sp::AmgSmoother::chebyshev, {"Chebyshev", "Chebyshev"}}};
  set_option(x + "boomeramg_relax_type_down", relax.at(o.smoother.value_or(sp::AmgSmoother::l1_gauss_seidel)).first);
  set_option(x + "boomeramg_relax_type_up", relax.at(o.smoother.value_or(sp::AmgSmoother::l1_gauss_seidel)).second);
  set_option(x + "boomeramg_relax_type_coarse", "Gaussian-elimination");
  if (!o.cf_order) set_option(x + "boomeramg_no_CF", "");  // row-order relaxation, hypre's default
  for (const auto& item : extra.empty() ? std::vector<std::string>{} : split(extra)) {
    const auto space = item.find(' ');
    set_option(item.substr(0, space), space == std::string::npos ? "" : item.substr(space + 1));
  }
}

}  // namespace einshard_bench
