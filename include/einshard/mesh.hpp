#pragma once
/// @file
/// `Mesh`: an MPI communicator laid out as a named Cartesian grid, the C++ counterpart of a PyTorch
/// DeviceMesh. One sub-communicator per group: each dimension and each compound (`dp-sp`).

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "einshard/comm/backend.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh_shape.hpp"

namespace einshard {

namespace detail {

struct MeshState {
  MPI_Comm cart = MPI_COMM_NULL;
  MeshShape shape;
  std::vector<int> coords;      // this rank's
  std::vector<int> all_coords;  // rank-major: the coordinates of every rank of `cart`
  // The communicator of every group, indexed by its bits (`groups[0]` is MPI_COMM_SELF's stand-in,
  // never used): all made when the mesh is, so asking for one is an index, never a collective.
  std::vector<MPI_Comm> groups;
  // Distinct for every mesh this process makes (MPI reuses the handles of freed communicators).
  std::uint64_t id = 0;
  comm::BackendOptions backend;  // also an attribute of every communicator above

  MeshState() = default;
  MeshState(const MeshState&) = delete;
  MeshState& operator=(const MeshState&) = delete;
  ~MeshState() {
    if (comm::mpi_ended()) return;  // a Mesh that outlives MPI_Finalize has nothing left to free
    for (auto& comm : groups)
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    if (cart != MPI_COMM_NULL) MPI_Comm_free(&cart);
  }
};

inline bool valid_dimension_name(std::string_view n) {
  return !n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace detail

/// A named Cartesian grid over an MPI communicator. Copies are cheap and share the communicators.
/// Ranks are laid out row-major (`MPI_Cart_create` without reordering), so group ranks follow mesh
/// order exactly as in a PyTorch DeviceMesh.
///
/// Constructing a mesh is collective over `comm` and makes the communicator of every group (each
/// dimension and each compound), so asking for a group later is local;
/// its arguments are checked before any communication, so bad arguments (which are the same on every
/// rank in SPMD code) throw the same `Error` everywhere.
///
/// `backend` chooses how tensor data travels over the mesh's communicators (comm/backend.hpp):
/// by default MPI for CPU tensors and NCCL for CUDA tensors where the program has NCCL, MPI
/// otherwise; `{.backend = comm::BackendKind::mpi}` keeps CUDA tensors on MPI (several ranks
/// sharing one GPU), `{.stage_through_host = true}` forces MPI's host staging.
class Mesh {
 public:
  Mesh() = default;

  Mesh(MPI_Comm comm, std::vector<int> sizes, std::vector<std::string> names, comm::BackendOptions backend = {})
      : state_(std::make_shared<detail::MeshState>()) {
    comm::check_backend_options(backend);
    if (sizes.size() != names.size())
      throw Error("Mesh: expected one name per size (" + std::to_string(sizes.size()) + " sizes), found " +
                  std::to_string(names.size()) + " names");
    if (sizes.empty()) throw Error("Mesh: expected at least one dimension, found none");
    if (sizes.size() > max_dims)
      throw Error("Mesh: expected at most " + std::to_string(max_dims) + " dimensions, found " +
                  std::to_string(sizes.size()));
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto& n = names[i];
      if (n.empty()) throw Error("Mesh: expected a mesh dimension name, found an empty one");
      if (!detail::valid_dimension_name(n))
        throw Error("Mesh: expected a mesh dimension name of letters, digits and '_' ('-' joins compound "
                    "groups), found '" + n + "'");
      if (std::count(names.begin(), names.end(), n) > 1)
        throw Error("Mesh: expected distinct mesh dimension names, found '" + n + "' twice");
      if (sizes[i] <= 0)
        throw Error("Mesh: expected a positive size of mesh dimension '" + n + "', found " + std::to_string(sizes[i]));
    }
    int world = 0;
    comm::check(MPI_Comm_size(comm, &world), "MPI_Comm_size");
    const auto product =
        std::accumulate(sizes.begin(), sizes.end(), std::int64_t{1}, std::multiplies<>());
    if (product != world)
      throw Error("Mesh: expected sizes that multiply to the communicator's " + std::to_string(world) +
                  " ranks, found a product of " + std::to_string(product));
    const int ndim = static_cast<int>(sizes.size());
    std::vector<int> periods(sizes.size(), 0);
    comm::check(MPI_Cart_create(comm, ndim, sizes.data(), periods.data(), 0, &state_->cart),
                      "MPI_Cart_create");
    int rank = 0;
    MPI_Comm_rank(state_->cart, &rank);
    state_->coords.resize(sizes.size());
    MPI_Cart_coords(state_->cart, rank, ndim, state_->coords.data());
    // Every rank's coordinates follow from the sizes: MPI numbers a Cartesian communicator made
    // without reordering row-major (asking MPI_Cart_coords for each of P ranks is P calls per rank).
    state_->all_coords.resize(static_cast<std::size_t>(world) * sizes.size());
    for (int r = 0; r < world; ++r)
      for (int d = ndim - 1, rest = r; d >= 0; --d) {
        const auto k = static_cast<std::size_t>(d);
        state_->all_coords[static_cast<std::size_t>(r) * sizes.size() + k] = rest % sizes[k];
        rest /= sizes[k];
      }
    state_->shape = {std::move(names), std::move(sizes)};
    // Every group's communicator, in the same order on every rank (this constructor is collective).
    state_->groups.assign(std::size_t{1} << ndim, MPI_COMM_NULL);
    std::vector<int> remain(static_cast<std::size_t>(ndim));
    for (std::size_t bits = 1; bits < state_->groups.size(); ++bits) {
      for (int d = 0; d < ndim; ++d) remain[static_cast<std::size_t>(d)] = (bits >> d) & 1u;
      comm::check(MPI_Cart_sub(state_->cart, remain.data(), &state_->groups[bits]), "MPI_Cart_sub");
    }
    state_->backend = backend;
    if (!backend.is_default()) {
      comm::set_backend_options(state_->cart, backend);
      for (std::size_t bits = 1; bits < state_->groups.size(); ++bits)
        comm::set_backend_options(state_->groups[bits], backend);
    }
    static std::atomic<std::uint64_t> next_id{1};
    state_->id = next_id++;
  }

  /// The most dimensions a mesh may have: every group's communicator is made with the mesh (2^n - 1
  /// of them).
  static constexpr std::size_t max_dims = 8;

  /// Distinct for every mesh made in this process (copies share it): what caches key a mesh by.
  [[nodiscard]] std::uint64_t id() const { return state().id; }

  [[nodiscard]] explicit operator bool() const noexcept { return state_ != nullptr; }
  /// How tensor data travels over this mesh's communicators.
  [[nodiscard]] const comm::BackendOptions& backend() const { return state().backend; }
  /// Names and sizes, for planning without MPI.
  [[nodiscard]] const MeshShape& shape() const { return state().shape; }
  [[nodiscard]] int ndim() const { return static_cast<int>(shape().sizes.size()); }
  [[nodiscard]] const std::vector<std::string>& names() const { return shape().names; }
  [[nodiscard]] const std::vector<int>& sizes() const { return shape().sizes; }
  /// The whole mesh's communicator (row-major Cartesian).
  [[nodiscard]] MPI_Comm comm() const { return state().cart; }
  /// Number of ranks in the mesh.
  [[nodiscard]] int size() const {
    return std::accumulate(sizes().begin(), sizes().end(), 1, std::multiplies<>());
  }
  /// Number of ranks in a dimension or compound group (`"sp"`, `"dp-sp"`).
  [[nodiscard]] int size(std::string_view group) const { return shape().size(group); }
  [[nodiscard]] int size(const Group& group) const { return shape().size(group); }
  /// This rank's coordinate along a dimension or compound group (row-major within the group),
  /// which is also its rank in `comm(group)`.
  [[nodiscard]] int coordinate(std::string_view group) const { return coordinate(shape().group(group)); }
  [[nodiscard]] int coordinate(const Group& group) const {
    return shape().coordinate(group, state().coords);
  }
  [[nodiscard]] int rank(std::string_view group) const { return coordinate(group); }
  /// This rank in `comm()`.
  [[nodiscard]] int rank() const {
    int r = 0;
    MPI_Comm_rank(state().cart, &r);
    return r;
  }
  /// The coordinates (one per dimension) of rank `r` of `comm()`.
  [[nodiscard]] std::span<const int> coordinates_of(int r) const {
    const auto& s = state();
    const auto n = s.shape.sizes.size();
    return {s.all_coords.data() + static_cast<std::size_t>(r) * n, n};
  }
  [[nodiscard]] bool has(std::string_view group) const {
    return state_ && !group.empty() && shape().find_group(group).has_value();
  }
  /// Mesh dimension indices of a group, sorted in mesh order.
  [[nodiscard]] std::vector<int> components(std::string_view group) const {
    return shape().components(group);
  }

  /// The communicator of a dimension or compound group (`"dp-sp"` and `"sp-dp"` are one).
  [[nodiscard]] MPI_Comm comm(std::string_view group) const { return comm(shape().group(group)); }
  /// The communicator of a resolved group: an index, no lock, no collective. The empty group's is
  /// MPI_COMM_SELF (a group of one rank).
  [[nodiscard]] MPI_Comm comm(const Group& group) const {
    if (group.empty()) return MPI_COMM_SELF;
    const auto& groups = state().groups;
    if (group.bits() >= groups.size())
      throw Error("Mesh::comm: expected a group of this mesh (" + shape().joined_names() + "), found '" +
                  group.name() + "'");
    return groups[group.bits()];
  }

 private:
  [[nodiscard]] detail::MeshState& state() const {
    if (!state_) throw Error("Mesh: expected a mesh, found an empty (default-constructed) one");
    return *state_;
  }

  std::shared_ptr<detail::MeshState> state_;
};

}  // namespace einshard
