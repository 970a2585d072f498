#pragma once
/// @file
/// The NCCL backend (comm/backend.hpp), for CUDA tensors. Include this header in one translation
/// unit of a program to make NCCL available to every mesh of it (it registers itself); without
/// EINSHARD_HAS_NCCL (CMake: EINSHARD_WITH_NCCL found no NCCL) it is empty, and asking for NCCL
/// raises an error naming NCCL. It is kept out of einshard.hpp: nccl.h brings the CUDA runtime
/// headers, which every other translation unit would pay for (docs/design.md, "GPUs").
///
/// One NCCL communicator per MPI communicator, made the first time a CUDA tensor travels over it:
/// rank 0's ncclGetUniqueId is broadcast over the MPI communicator, then every rank joins with
/// ncclCommInitRank on the tensor's device. Every operation is enqueued on the tensor's current
/// CUDA stream (no device synchronisation); uneven pieces use grouped ncclSend/ncclRecv
/// (gathers) and one ncclReduce per root (reduce-scatters), even ones NCCL's own collectives.

#ifdef EINSHARD_HAS_NCCL

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "einshard/comm/backend.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/error.hpp"

namespace einshard::comm {

namespace detail {

inline void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r));
}

/// NCCL's type for reducing `dtype`, and how many NCCL elements one torch element is (complex
/// numbers sum as pairs of reals).
struct NcclType {
  ncclDataType_t type;
  std::int64_t per_element;
  ncclRedOp_t sum;
};

inline NcclType nccl_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return {ncclFloat32, 1, ncclSum};
    case at::kDouble: return {ncclFloat64, 1, ncclSum};
    case at::kHalf: return {ncclFloat16, 1, ncclSum};
    case at::kBFloat16: return {ncclBfloat16, 1, ncclSum};
    case at::kComplexHalf: return {ncclFloat16, 2, ncclSum};
    case at::kComplexFloat: return {ncclFloat32, 2, ncclSum};
    case at::kComplexDouble: return {ncclFloat64, 2, ncclSum};
    case at::kLong: return {ncclInt64, 1, ncclSum};
    case at::kInt: return {ncclInt32, 1, ncclSum};
    case at::kChar: return {ncclInt8, 1, ncclSum};
    case at::kByte: return {ncclUint8, 1, ncclSum};
    case at::kBool: return {ncclUint8, 1, ncclMax};  // torch's bool sum is a logical or
    default: throw Error(std::string("NCCL: cannot sum dtype ") + c10::toString(dtype) + " across ranks");
  }
}

}  // namespace detail

class NcclBackend final : public Backend {
 public:
  /// Collective over `comm`.
  NcclBackend(MPI_Comm comm, const at::Device& device) : device_(device), size_(size_of(comm)), rank_(rank_of(comm)) {
    if (!device.is_cuda()) throw Error("NCCL: expected a CUDA device, got " + device.str());
    ncclUniqueId id{};
    int ok = 1;
    if (rank_ == 0) ok = ncclGetUniqueId(&id) == ncclSuccess ? 1 : 0;
    check(MPI_Bcast(&ok, 1, MPI_INT, 0, comm), "MPI_Bcast");
    if (ok == 0) throw Error("NCCL: ncclGetUniqueId failed on rank 0 of the communicator");
    check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm), "MPI_Bcast");
    const c10::DeviceGuard guard(device);
    const auto r = ncclCommInitRank(&comm_, size_, id, rank_);
    int good = r == ncclSuccess ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &good, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    if (good == 0) {
      if (r == ncclSuccess) ncclCommDestroy(comm_);
      comm_ = nullptr;
      throw Error(std::string("NCCL: ncclCommInitRank failed on some rank (here: ") + ncclGetErrorString(r) +
                  "); several ranks on one GPU need the MPI backend");
    }
  }
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;
  ~NcclBackend() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }

  [[nodiscard]] BackendKind kind() const override { return BackendKind::nccl; }

  void all_reduce(const at::Tensor& in, const at::Tensor& out, MPI_Comm) override {
    const auto t = detail::nccl_type(in.scalar_type());
    detail::nccl_check(ncclAllReduce(in.const_data_ptr(), out.data_ptr(), elements(in.numel(), t), t.type, t.sum,
                                     comm_, stream(in)),
                       "ncclAllReduce");
  }

  void all_gatherv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts,
                   std::span<const int> displs, MPI_Comm) override {
    const auto s = stream(in);
    const auto size = static_cast<std::size_t>(in.element_size());
    if (even(counts, displs)) {
      detail::nccl_check(ncclAllGather(in.const_data_ptr(), out.data_ptr(), static_cast<std::size_t>(counts[0]) * size,
                                       ncclUint8, comm_, s),
                         "ncclAllGather");
      return;
    }
    auto* base = static_cast<char*>(out.data_ptr());
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      if (counts[r] > 0)
        detail::nccl_check(ncclRecv(base + static_cast<std::size_t>(displs[r]) * size,
                                    static_cast<std::size_t>(counts[r]) * size, ncclUint8, r, comm_, s),
                           "ncclRecv");
      if (in.numel() > 0)
        detail::nccl_check(ncclSend(in.const_data_ptr(), static_cast<std::size_t>(in.numel()) * size, ncclUint8, r,
                                    comm_, s),
                           "ncclSend");
    }
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void reduce_scatterv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts, MPI_Comm) override {
    const auto t = detail::nccl_type(in.scalar_type());
    const auto s = stream(in);
    if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; })) {
      detail::nccl_check(ncclReduceScatter(in.const_data_ptr(), out.data_ptr(), elements(counts[0], t), t.type, t.sum,
                                           comm_, s),
                         "ncclReduceScatter");
      return;
    }
    const auto* base = static_cast<const char*>(in.const_data_ptr());
    const auto size = static_cast<std::size_t>(in.element_size());
    std::size_t offset = 0;
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      if (counts[r] > 0)
        detail::nccl_check(ncclReduce(base + offset * size, r == rank_ ? out.data_ptr() : nullptr,
                                      elements(counts[r], t), t.type, t.sum, r, comm_, s),
                           "ncclReduce");
      offset += static_cast<std::size_t>(counts[r]);
    }
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void broadcast(const at::Tensor& buffer, int root, MPI_Comm) override {
    detail::nccl_check(ncclBroadcast(buffer.data_ptr(), buffer.data_ptr(),
                                     static_cast<std::size_t>(buffer.numel()) * buffer.element_size(), ncclUint8,
                                     root, comm_, stream(buffer)),
                       "ncclBroadcast");
  }

  void exchange(std::span<const Message> sends, std::span<const Message> recvs, const at::Tensor& like, int,
                MPI_Comm, void (*overlap)(void*), void* overlap_state) override {
    const auto s = stream(like);
    const auto size = static_cast<std::size_t>(like.element_size());
    detail::nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (const auto& m : recvs)
      if (m.count > 0)
        detail::nccl_check(ncclRecv(m.data, static_cast<std::size_t>(m.count) * size, ncclUint8, m.peer, comm_, s),
                           "ncclRecv");
    for (const auto& m : sends)
      if (m.count > 0)
        detail::nccl_check(ncclSend(m.data, static_cast<std::size_t>(m.count) * size, ncclUint8, m.peer, comm_, s),
                           "ncclSend");
    detail::nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    if (overlap != nullptr) overlap(overlap_state);
  }

 private:
  static std::size_t elements(std::int64_t n, const detail::NcclType& t) {
    return static_cast<std::size_t>(n * t.per_element);
  }
  static bool even(std::span<const int> counts, std::span<const int> displs) {
    for (std::size_t r = 0; r < counts.size(); ++r)
      if (counts[r] != counts[0] || displs[r] != static_cast<int>(r) * counts[0]) return false;
    return true;
  }
  /// The current CUDA stream of `t`'s device, which must be the communicator's.
  cudaStream_t stream(const at::Tensor& t) const {
    if (t.device() != device_)
      throw Error("NCCL: this communicator works on " + device_.str() + ", got a tensor on " + t.device().str());
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    return static_cast<cudaStream_t>(impl->getStreamNativeHandle(impl->getStream(t.device())));
  }

  at::Device device_;
  int size_ = 1, rank_ = 0;
  ncclComm_t comm_ = nullptr;
};

namespace detail {

inline std::unique_ptr<Backend> make_nccl_backend(MPI_Comm comm, const at::Device& device) {
  return std::make_unique<NcclBackend>(comm, device);
}

/// Registers NCCL with the seam when the program starts (once, whichever translation unit).
inline const bool nccl_registered = [] {
  nccl_factory().store(&make_nccl_backend);
  return true;
}();

}  // namespace detail

}  // namespace einshard::comm

#endif  // EINSHARD_HAS_NCCL
