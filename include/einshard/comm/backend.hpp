#pragma once
/// @file
/// The communication-backend seam: how the data of a collective or a point-to-point exchange
/// travels, chosen per communicator (a `Mesh` sets it on every group's communicator) and per
/// tensor device.
///
/// - `mpi` (comm/staging.hpp): CPU tensors go straight to MPI, exactly as before this seam
///   existed. Device tensors go straight to MPI too when the MPI library is CUDA-aware (detected
///   at run time, `mpi_cuda_aware()`), after the current stream has finished producing them; else
///   they are staged through pinned host buffers.
/// - `nccl` (comm/nccl.hpp, only with EINSHARD_WITH_NCCL): one NCCL communicator per MPI
///   communicator, made on first use, and every operation enqueued on the tensor's current CUDA
///   stream without a device synchronisation.
///
/// The interface works on flat contiguous buffers; the collectives of comm/collectives.hpp keep
/// the packing, the shapes and the uneven pieces, so every backend moves the same bytes.
///
/// Who decides: a communicator's `BackendOptions` (an MPI attribute, so copies made by
/// MPI_Comm_dup inherit it), else the process default. With `BackendKind::automatic`, CUDA tensors
/// use NCCL when it is available in the program and MPI otherwise; the environment variable
/// EINSHARD_COMM_BACKEND (`mpi`, `nccl`, `auto`) overrides that default, and
/// EINSHARD_STAGE_THROUGH_HOST=1 forces the staged path everywhere (CPU tensors included: that is
/// how the staging is tested without a GPU).
///
/// Cost on the CPU path: one relaxed atomic load and a virtual call per collective while no
/// communicator asks for anything but the default.

#include <ATen/ATen.h>
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "einshard/comm/check.hpp"
#include "einshard/error.hpp"

namespace einshard::comm {

/// Which library moves a communicator's tensor data.
enum class BackendKind : std::uint8_t {
  automatic,  ///< NCCL for CUDA tensors when available (or EINSHARD_COMM_BACKEND), else MPI
  mpi,
  nccl,  ///< CUDA tensors only; a CPU tensor on such a communicator is an error
};

/// A communicator's backend choice.
struct BackendOptions {
  BackendKind backend = BackendKind::automatic;
  /// MPI backend: move every tensor through host buffers even where MPI could take it directly
  /// (a device tensor with CUDA-aware MPI, or a CPU tensor). For testing the staging path and for
  /// MPI libraries whose CUDA support misbehaves.
  bool stage_through_host = false;

  [[nodiscard]] bool is_default() const { return backend == BackendKind::automatic && !stage_through_host; }
};

/// One point-to-point message of an exchange: `count` elements at `data` (of the exchange's dtype
/// and device) to or from `peer` (a rank of the communicator).
struct Message {
  int peer = 0;
  void* data = nullptr;
  std::int64_t count = 0;
};

/// How a backend moves flat buffers. Every call is collective over `comm` (exchange: over the
/// peers named), all buffers are contiguous and on one device, counts and displacements are in
/// elements. A backend returns when the host may reuse the buffers' handles: the MPI backend when
/// the data has moved, NCCL when the work is enqueued on the current stream (stream order then
/// keeps later uses correct).
class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual BackendKind kind() const = 0;
  /// `out` = sum over the ranks of `in` (same shape and dtype).
  virtual void all_reduce(const at::Tensor& in, const at::Tensor& out, MPI_Comm comm) = 0;
  /// Rank r's `in` (counts[r] elements) lands at out[displs[r]].
  virtual void all_gatherv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts,
                           std::span<const int> displs, MPI_Comm comm) = 0;
  /// `out` (counts[me] elements) = sum over the ranks of their `in` block me (blocks in rank
  /// order, counts[r] elements each).
  virtual void reduce_scatterv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts,
                               MPI_Comm comm) = 0;
  /// `buffer` of rank `root` to every rank's `buffer`.
  virtual void broadcast(const at::Tensor& buffer, int root, MPI_Comm comm) = 0;
  /// Every receive and send posted, then `overlap()` (local work that needs no message), then all
  /// completed. `like` gives the elements' dtype and device.
  virtual void exchange(std::span<const Message> sends, std::span<const Message> recvs, const at::Tensor& like,
                        int tag, MPI_Comm comm, void (*overlap)(void*), void* overlap_state) = 0;
};

namespace detail {

/// What a communicator carries (as an MPI attribute): its options and, once a CUDA tensor has
/// travelled over NCCL on it, its NCCL communicator.
struct CommState {
  BackendOptions options;
  std::mutex mutex;  // guards the lazy creation of `nccl`
  std::unique_ptr<Backend> nccl;
};

/// Communicators whose options are not the default, alive now: while none are (and staging is
/// not forced by the environment), CPU tensors skip every lookup.
inline std::atomic<int>& special_comms() {
  static std::atomic<int> n{0};
  return n;
}

inline int copy_state(MPI_Comm, int, void*, void* value, void* copy, int* flag) {
  auto* state = new CommState;
  state->options = static_cast<CommState*>(value)->options;
  special_comms().fetch_add(1, std::memory_order_relaxed);
  *static_cast<CommState**>(copy) = state;
  *flag = 1;
  return MPI_SUCCESS;
}

inline int delete_state(MPI_Comm, int, void* value, void*) {
  delete static_cast<CommState*>(value);
  special_comms().fetch_sub(1, std::memory_order_relaxed);
  return MPI_SUCCESS;
}

inline int state_key() {
  static const int key = [] {
    int k = MPI_KEYVAL_INVALID;
    check(MPI_Comm_create_keyval(&copy_state, &delete_state, &k, nullptr), "MPI_Comm_create_keyval");
    return k;
  }();
  return key;
}

inline CommState* state_of(MPI_Comm comm) {
  if (special_comms().load(std::memory_order_relaxed) == 0) return nullptr;
  void* value = nullptr;
  int found = 0;
  check(MPI_Comm_get_attr(comm, state_key(), &value, &found), "MPI_Comm_get_attr");
  return found ? static_cast<CommState*>(value) : nullptr;
}

/// EINSHARD_COMM_BACKEND, read once: the meaning of BackendKind::automatic for device tensors.
inline BackendKind environment_backend() {
  static const BackendKind k = [] {
    const char* v = std::getenv("EINSHARD_COMM_BACKEND");
    const std::string s = v == nullptr ? "" : v;
    if (s.empty() || s == "auto" || s == "automatic") return BackendKind::automatic;
    if (s == "mpi") return BackendKind::mpi;
    if (s == "nccl") return BackendKind::nccl;
    throw Error("EINSHARD_COMM_BACKEND: expected mpi, nccl or auto, got '" + s + "'");
  }();
  return k;
}

inline bool environment_staging() {
  static const bool on = [] {
    const char* v = std::getenv("EINSHARD_STAGE_THROUGH_HOST");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

/// Makes the NCCL backend of one communicator (collective over it); set by comm/nccl.hpp when a
/// translation unit of the program includes it.
using NcclFactory = std::unique_ptr<Backend> (*)(MPI_Comm, const at::Device&);
inline std::atomic<NcclFactory>& nccl_factory() {
  static std::atomic<NcclFactory> f{nullptr};
  return f;
}

}  // namespace detail

/// Whether this program can use the NCCL backend (built with EINSHARD_WITH_NCCL and
/// einshard/comm/nccl.hpp included in some translation unit).
[[nodiscard]] inline bool nccl_available() { return detail::nccl_factory().load() != nullptr; }

/// Refuses options this program cannot honour. Checked by `Mesh` before it communicates, so the
/// same arguments fail the same way on every rank.
inline void check_backend_options(const BackendOptions& options) {
  if (options.backend == BackendKind::nccl && !nccl_available())
    throw Error(
        "Mesh backend: expected a backend this program has, found nccl, which it lacks (einshard was built "
        "without EINSHARD_WITH_NCCL, or no translation unit includes einshard/comm/nccl.hpp)");
  if (options.backend == BackendKind::nccl && options.stage_through_host)
    throw Error("Mesh backend: expected stage_through_host only with the MPI backend, found it with nccl");
}

/// Gives `comm` its backend options (local, no communication; every rank must give the same).
/// Communicators duplicated from it later inherit them; its NCCL communicator, if any, is not.
inline void set_backend_options(MPI_Comm comm, const BackendOptions& options) {
  check_backend_options(options);
  if (detail::state_of(comm) != nullptr) check(MPI_Comm_delete_attr(comm, detail::state_key()), "MPI_Comm_delete_attr");
  if (options.is_default()) return;
  auto* state = new detail::CommState;
  state->options = options;
  detail::special_comms().fetch_add(1, std::memory_order_relaxed);
  check(MPI_Comm_set_attr(comm, detail::state_key(), state), "MPI_Comm_set_attr");
}

/// `comm`'s backend options (the default when it has none).
[[nodiscard]] inline BackendOptions backend_options(MPI_Comm comm) {
  const auto* state = detail::state_of(comm);
  return state != nullptr ? state->options : BackendOptions{};
}

/// Whether MPI takes CUDA device pointers: OpenMPI's MPIX_Query_cuda_support where mpi-ext.h
/// offers it, MPICH's MPIX_GPU_query_support, or EINSHARD_MPI_CUDA_AWARE=0/1 to override.
[[nodiscard]] inline bool mpi_cuda_aware();

/// The MPI backend (comm/staging.hpp): direct, or staged through host buffers.
[[nodiscard]] inline Backend& mpi_backend(bool staged);

/// The backend that moves `x` over `comm`. Every rank of `comm` must ask with a tensor of the same
/// device kind (the agreement checks that before data moves); the NCCL communicator is created on
/// the first CUDA tensor, collectively.
[[nodiscard]] inline Backend& backend_for(const at::Tensor& x, MPI_Comm comm) {
  const bool cpu = x.device().is_cpu();
  if (cpu && detail::special_comms().load(std::memory_order_relaxed) == 0 && !detail::environment_staging())
    return mpi_backend(false);
  auto* state = detail::state_of(comm);
  const auto options = state != nullptr ? state->options : BackendOptions{};
  auto kind = options.backend;
  // The environment (and the default) decide for device tensors only: CPU tensors always have MPI.
  if (kind == BackendKind::automatic && !cpu) kind = detail::environment_backend();
  if (kind == BackendKind::automatic)
    kind = x.device().is_cuda() && nccl_available() ? BackendKind::nccl : BackendKind::mpi;
  if (kind == BackendKind::nccl) {
    if (!x.device().is_cuda())
      throw Error("NCCL backend: expected a CUDA tensor, found one on " + x.device().str() +
                  " (make the mesh with backend mpi for CPU tensors)");
    if (!nccl_available()) check_backend_options({.backend = BackendKind::nccl});
    if (state == nullptr) {
      // A communicator without options (MPI_COMM_SELF, or chosen by the environment): give it a
      // state to hold its NCCL communicator, which lives as long as the communicator.
      set_backend_options(comm, {.backend = BackendKind::nccl});
      state = detail::state_of(comm);
    }
    std::lock_guard lock(state->mutex);
    if (!state->nccl) state->nccl = detail::nccl_factory().load()(comm, x.device());
    return *state->nccl;
  }
  const bool staged = options.stage_through_host || detail::environment_staging() || (!cpu && !mpi_cuda_aware());
  return mpi_backend(staged);
}

}  // namespace einshard::comm

#include "einshard/comm/staging.hpp"
