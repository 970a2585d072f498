#pragma once
/// @file
/// A cache of large CPU blocks for the tensors einshard's data movers return (redistribution
/// results, FFT outputs), so that a loop calling the same operation reuses its memory instead of
/// page-faulting fresh memory in on every call.
///
/// Why: glibc serves blocks of 32 MiB and more straight from mmap and unmaps them on free, so every
/// call that returns a new large tensor first-touches all of it: a large share of a big FFT or
/// transpose (docs/performance.md), time FFTW-MPI and hand-written MPI codes, which keep their
/// arrays, do not spend. PyTorch's CUDA caching allocator does this for GPU memory; the CPU has none.
///
/// A block returns to the pool when the last tensor using it dies (the storage's deleter). Blocks
/// are matched by exact size (rounded up to 4 KiB), which is what iterative codes ask for again and
/// again. The pool keeps at most `capacity` bytes of free blocks (default 1 GiB, the environment
/// variable EINSHARD_POOL_BYTES overrides it, 0 disables pooling); beyond that, freed blocks go back
/// to the system, oldest first.

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace einshard::comm {

class BlockPool {
 public:
  /// Requests below this many bytes go to torch's allocator (glibc reuses small blocks itself).
  static constexpr std::int64_t min_bytes = std::int64_t{1} << 20;

  static BlockPool& instance() {
    // Never destroyed: tensors freed during static destruction still return their blocks safely.
    static auto* pool = new BlockPool();
    return *pool;
  }

  /// An uninitialized CPU tensor of `sizes` (contiguous) and `options`, from the pool when large.
  at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
    const auto bytes = static_cast<std::int64_t>(c10::multiply_integers(sizes)) *
                       static_cast<std::int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
    if (bytes < min_bytes || capacity() == 0 || !options.device().is_cpu())
      return at::empty(sizes, options);
    const auto size = round(bytes);
    void* block = take(size);
    if (block == nullptr) block = std::aligned_alloc(64, static_cast<std::size_t>(size));
    if (block == nullptr) return at::empty(sizes, options);
    return at::from_blob(
        block, sizes, [size](void* p) { BlockPool::instance().give(p, size); }, options);
  }

  /// Bytes of free blocks kept at most.
  std::int64_t capacity() const {
    std::lock_guard lock(mutex_);
    return capacity_;
  }
  void set_capacity(std::int64_t bytes) {
    std::lock_guard lock(mutex_);
    capacity_ = bytes;
    trim();
  }
  /// Bytes of free blocks held now.
  std::int64_t held() const {
    std::lock_guard lock(mutex_);
    return held_;
  }

 private:
  BlockPool() {
    const char* v = std::getenv("EINSHARD_POOL_BYTES");
    if (v != nullptr && *v != '\0') capacity_ = std::max<std::int64_t>(std::atoll(v), 0);
  }
  static std::int64_t round(std::int64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

  void* take(std::int64_t size) {
    std::lock_guard lock(mutex_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* block = it->second.back();
    it->second.pop_back();
    held_ -= size;
    std::erase_if(order_, [&](const auto& e) { return e.first == block; });
    return block;
  }

  void give(void* block, std::int64_t size) {
    std::lock_guard lock(mutex_);
    free_[size].push_back(block);
    order_.emplace_back(block, size);
    held_ += size;
    trim();
  }

  /// Frees the oldest free blocks until at most `capacity_` bytes are held. Holds the mutex.
  void trim() {
    while (held_ > capacity_ && !order_.empty()) {
      const auto [block, size] = order_.front();
      order_.pop_front();
      auto& list = free_[size];
      std::erase(list, block);
      held_ -= size;
      std::free(block);
    }
  }

  mutable std::mutex mutex_;
  std::int64_t capacity_ = std::int64_t{1} << 30;
  std::int64_t held_ = 0;
  std::map<std::int64_t, std::vector<void*>> free_;
  std::deque<std::pair<void*, std::int64_t>> order_;  ///< free blocks, oldest first
};

/// `at::empty(sizes, options)`, served from the BlockPool when large and on the CPU.
inline at::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return BlockPool::instance().empty(sizes, options);
}

}  // namespace einshard::comm
