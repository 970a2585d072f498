#pragma once
/// @file
/// The rigid body modes of a linear elasticity problem, from its node coordinates: the
/// near-null space that `AmgOptions::near_null_space` takes (amg_options.hpp). An elastic body
/// without boundary conditions stores no energy under a rigid motion, so these vectors span the
/// null space of its stiffness matrix; with boundary conditions they are the near-null space
/// that the AMG's coarse levels must represent.

#include <ATen/ATen.h>

#include <string>

#include "einshard/error.hpp"

namespace einshard::sparse {

/// (nodes × functions, 3) in 2-D or (nodes × functions, 6) in 3-D: the translations along each
/// axis, then the rotations about the origin (2-D: (−y, x); 3-D: about z (−y, x, 0), x
/// (0, −z, y) and y (z, 0, −x)), for the unknowns numbered as `AmgOptions::functions` says,
/// node-major: row n·functions + f is unknown f of node n. `coords` is (nodes, dim), dim 2 or 3,
/// this rank's owned nodes in the order of their rows; unknowns past the `dim` displacement
/// components of a node (functions > dim: a temperature, a pressure) are 0 in every mode. Local:
/// each rank passes its own nodes. The rotations grow with the distance from the origin, so a
/// body far from it is better described by coordinates shifted to near its centre (any shift
/// every rank applies alike spans the same modes).
inline at::Tensor rigid_body_modes(const at::Tensor& coords, int functions) {
  if (!coords.defined() || coords.dim() != 2 || (coords.size(1) != 2 && coords.size(1) != 3) ||
      !at::isFloatingType(coords.scalar_type()))
    throw Error("rigid_body_modes: expected coords of shape (nodes, 2) or (nodes, 3), real floating point, found " +
                (coords.defined() ? c10::str(coords.sizes(), " ", coords.scalar_type()) : std::string("none")));
  const auto dim = static_cast<int>(coords.size(1));
  if (functions < dim)
    throw Error("rigid_body_modes: expected functions ≥ " + std::to_string(dim) +
                " (the displacement components of a node in " + std::to_string(dim) + "-D), found " +
                std::to_string(functions));
  const auto nodes = coords.size(0);
  const auto modes = dim == 2 ? 3 : 6;
  auto z = at::zeros({nodes, functions, modes}, coords.options());
  for (int d = 0; d < dim; ++d) z.select(1, d).select(1, d).fill_(1.0);  // translations
  const auto x = coords.select(1, 0), y = coords.select(1, 1);
  if (dim == 2) {
    z.select(1, 0).select(1, 2).copy_(-y);
    z.select(1, 1).select(1, 2).copy_(x);
  } else {
    const auto c = coords.select(1, 2);
    z.select(1, 0).select(1, 3).copy_(-y);  // about z
    z.select(1, 1).select(1, 3).copy_(x);
    z.select(1, 1).select(1, 4).copy_(-c);  // about x
    z.select(1, 2).select(1, 4).copy_(y);
    z.select(1, 0).select(1, 5).copy_(c);   // about y
    z.select(1, 2).select(1, 5).copy_(-x);
  }
  return z.reshape({nodes * functions, modes});
}

}  // namespace einshard::sparse
