#pragma once
/// @file
/// The MPI backend (comm/backend.hpp): buffers go straight to MPI (CPU memory, or device memory
/// when MPI is CUDA-aware, once the current stream has produced them), or through host copies:
/// pinned host buffers for device tensors, plain ones for CPU tensors (the forced staging that
/// tests this path without a GPU). Both modes run the same MPI calls on the same bytes, so their
/// results are bitwise equal.

#include <ATen/ATen.h>
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_Query_cuda_support, MPICH's MPIX_GPU_query_support
#endif

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "einshard/comm/backend.hpp"
#include "einshard/comm/check.hpp"
#include "einshard/comm/messages.hpp"
#include "einshard/comm/mpi.hpp"

namespace einshard::comm {

inline bool mpi_cuda_aware() {
  static const bool aware = [] {
    if (const char* v = std::getenv("EINSHARD_MPI_CUDA_AWARE"); v != nullptr && *v != '\0')
      return std::string_view(v) != "0";
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
    int supported = 0;
    return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported != 0;
#else
    return false;
#endif
  }();
  return aware;
}

namespace detail {

/// MPI knows nothing of streams: work queued on `t`'s current stream must be done before MPI
/// touches its memory. Nothing to wait for on the CPU.
inline void finish_stream(const at::Tensor& t) {
  if (t.device().is_cpu()) return;
  const auto* impl = c10::impl::getDeviceGuardImpl(t.device().type());
  impl->synchronizeStream(impl->getStream(t.device()));
}

/// A host buffer of `n` elements of `like`'s dtype: pinned for a device tensor (DMA from and to
/// it needs no bounce buffer), pageable for a CPU one.
inline at::Tensor host_buffer(const at::Tensor& like, std::int64_t n) {
  auto options = at::TensorOptions(like.scalar_type()).device(at::kCPU);
  if (!like.device().is_cpu()) options = options.pinned_memory(true);
  return at::empty({n}, options);
}

inline at::Tensor host_copy(const at::Tensor& flat) {
  auto h = host_buffer(flat, flat.numel());
  h.copy_(flat.reshape({-1}));
  return h;
}

/// The `count` elements at `data` as a flat tensor of `like`'s dtype and device.
inline at::Tensor view_of(void* data, std::int64_t count, const at::Tensor& like) {
  return at::from_blob(data, {count}, at::TensorOptions(like.scalar_type()).device(like.device()));
}

}  // namespace detail

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(bool staged) : staged_(staged) {}
  [[nodiscard]] BackendKind kind() const override { return BackendKind::mpi; }
  [[nodiscard]] bool staged() const { return staged_; }

  void all_reduce(const at::Tensor& in, const at::Tensor& out, MPI_Comm comm) override {
    if (!staged_) return direct_all_reduce(in, out, comm);
    auto h = detail::host_buffer(out, out.numel());
    direct_all_reduce(detail::host_copy(in), h, comm);
    out.view({-1}).copy_(h);
  }

  void all_gatherv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts,
                   std::span<const int> displs, MPI_Comm comm) override {
    if (!staged_) return direct_all_gatherv(in, out, counts, displs, comm);
    auto h = detail::host_buffer(out, out.numel());
    direct_all_gatherv(detail::host_copy(in), h, counts, displs, comm);
    out.view({-1}).copy_(h);
  }

  void reduce_scatterv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts,
                       MPI_Comm comm) override {
    if (!staged_) return direct_reduce_scatterv(in, out, counts, comm);
    auto h = detail::host_buffer(out, out.numel());
    direct_reduce_scatterv(detail::host_copy(in), h, counts, comm);
    out.view({-1}).copy_(h);
  }

  void broadcast(const at::Tensor& buffer, int root, MPI_Comm comm) override {
    if (!staged_) return direct_broadcast(buffer, root, comm);
    auto h = detail::host_copy(buffer);
    direct_broadcast(h, root, comm);
    buffer.view({-1}).copy_(h);
  }

  void exchange(std::span<const Message> sends, std::span<const Message> recvs, const at::Tensor& like, int tag,
                MPI_Comm comm, void (*overlap)(void*), void* overlap_state) override {
    if (!staged_) {
      detail::finish_stream(like);
      return direct_exchange(sends, recvs, like.scalar_type(), tag, comm, overlap, overlap_state);
    }
    // One host block for every message, sends copied in before anything is posted.
    std::int64_t total = 0;
    for (const auto& m : sends) total += m.count;
    for (const auto& m : recvs) total += m.count;
    auto block = detail::host_buffer(like, total);
    auto* base = static_cast<char*>(block.data_ptr());
    const auto size = static_cast<std::int64_t>(block.element_size());
    std::vector<Message> hs(sends.begin(), sends.end()), hr(recvs.begin(), recvs.end());
    std::int64_t at = 0;
    for (auto& m : hs) {
      auto piece = block.narrow(0, at, m.count);
      if (m.count > 0) piece.copy_(detail::view_of(m.data, m.count, like));
      m.data = base + at * size;
      at += m.count;
    }
    for (auto& m : hr) {
      m.data = base + at * size;
      at += m.count;
    }
    direct_exchange(hs, hr, like.scalar_type(), tag, comm, overlap, overlap_state);
    for (std::size_t i = 0; i < hr.size(); ++i)
      if (recvs[i].count > 0)
        detail::view_of(recvs[i].data, recvs[i].count, like).copy_(detail::view_of(hr[i].data, hr[i].count, block));
  }

 private:
  static void direct_all_reduce(const at::Tensor& in, const at::Tensor& out, MPI_Comm comm) {
    detail::finish_stream(in);
    check(MPI_Allreduce(in.const_data_ptr(), out.data_ptr(), count(in.numel()), datatype(in.scalar_type()),
                        sum_op(in.scalar_type()), comm),
          "MPI_Allreduce");
  }
  static void direct_all_gatherv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts,
                                 std::span<const int> displs, MPI_Comm comm) {
    detail::finish_stream(in);
    const auto elem = datatype(in.scalar_type());
    check(MPI_Allgatherv(in.const_data_ptr(), count(in.numel()), elem, out.data_ptr(), counts.data(),
                         displs.data(), elem, comm),
          "MPI_Allgatherv");
  }
  static void direct_reduce_scatterv(const at::Tensor& in, const at::Tensor& out, std::span<const int> counts,
                                     MPI_Comm comm) {
    detail::finish_stream(in);
    check(MPI_Reduce_scatter(in.const_data_ptr(), out.data_ptr(), counts.data(), datatype(in.scalar_type()),
                             sum_op(in.scalar_type()), comm),
          "MPI_Reduce_scatter");
  }
  static void direct_broadcast(const at::Tensor& buffer, int root, MPI_Comm comm) {
    detail::finish_stream(buffer);
    check(MPI_Bcast(buffer.data_ptr(), count(buffer.numel()), datatype(buffer.scalar_type()), root, comm),
          "MPI_Bcast");
  }
  static void direct_exchange(std::span<const Message> sends, std::span<const Message> recvs, at::ScalarType dtype,
                              int tag, MPI_Comm comm, void (*overlap)(void*), void* overlap_state) {
    const auto elem = datatype(dtype);
    Messages messages;
    for (const auto& m : recvs) messages.receive(m.data, m.count, elem, m.peer, tag, comm);
    for (const auto& m : sends) messages.send(m.data, m.count, elem, m.peer, tag, comm);
    if (overlap != nullptr) overlap(overlap_state);
    messages.wait();
  }

  bool staged_;
};

inline Backend& mpi_backend(bool staged) {
  static MpiBackend direct(false), through_host(true);
  return staged ? static_cast<Backend&>(through_host) : static_cast<Backend&>(direct);
}

}  // namespace einshard::comm
