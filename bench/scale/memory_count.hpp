// Per-rank memory of the scaling benchmarks, by the phases of mpi_count.hpp: what each rank holds
// in tensors and in the C++ heap (einshard's plans, caches, layouts and halo lists, LibTorch's
// tensor and autograd objects), as the number of ranks grows. Include it in the program's one
// translation unit (it defines the global operator new and delete) and call
// einshard_scale::count_memory() on every rank right after MPI_Init; mpi_count.hpp's report() then
// adds to every phase's JSON line
//
//   "mem":{"tensor_peak":..,"tensor_held":..,"tensor_total":..,"tensor_allocs":..,
//          "heap_peak":..,"heap_held":..,"heap_total":..,"heap_allocs":..}
//
// each the maximum over ranks of this rank's figure:
//   *_peak    the most bytes held above what was held when the phase began (over its entries)
//   *_held    bytes held when it ended less those held when it began (summed over its entries):
//             what the phase leaves behind (caches, plans, results the program keeps)
//   *_total   bytes held when it last ended, everything since count_memory()
//   *_allocs  allocations made in it
// tensor: tensor storage from LibTorch's CPU allocator (replaced here by a counting one); heap:
// blocks of operator new. Bytes are those asked for, not what malloc rounds them to.
//
// Both are booked to the rank whose code allocates (PMPI_Comm_rank of MPI_COMM_WORLD under SMPI;
// under a real MPI the process's rank) and given back to that rank wherever the block is freed.
// Under SMPI every simulated rank is one copy of the program, but LibTorch is loaded once and
// binds its operator new to one of those copies: the counters and the table of live blocks are
// therefore one object per process, kept in the counting CPU allocator, which the first rank
// installs and the others find.
//
// Not counted: what MPI allocates, blocks allocated before count_memory(), and tensors LibTorch
// allocates from another allocator (none on a CPU).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "mpi_count.hpp"

namespace einshard_scale {

namespace memory_detail {

/// std::allocator's interface over malloc: the counts' own tables must not count themselves.
template <class T>
struct MallocAllocator {
  using value_type = T;
  MallocAllocator() = default;
  template <class U>
  MallocAllocator(const MallocAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    if (void* p = std::malloc(n * sizeof(T))) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const MallocAllocator<U>&) const noexcept { return true; }
};

}  // namespace memory_detail

/// Bytes held now, the most held since the peak was last restarted, and allocations made.
struct Bytes {
  std::atomic<std::int64_t> current{0}, peak{0}, allocs{0};
  void add(std::int64_t n) {
    const auto now = current.fetch_add(n) + n;
    allocs.fetch_add(1);
    for (auto p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
    }
  }
  void remove(std::int64_t n) { current.fetch_sub(n); }
  void restart_peak() { peak.store(current.load()); }
};

/// The process's counters: per rank, tensors and heap, and the heap blocks alive with the counter
/// each was booked to. Index `ranks` books what no rank's code allocated.
struct MemoryTable {
  explicit MemoryTable(int ranks, int own)
      : size(ranks), own_rank(own), tensor(std::size_t(ranks) + 1), heap(std::size_t(ranks) + 1) {}
  int size, own_rank;
  std::vector<Bytes, memory_detail::MallocAllocator<Bytes>> tensor, heap;
  std::mutex lock;
  std::unordered_map<void*, std::pair<Bytes*, std::int64_t>, std::hash<void*>, std::equal_to<>,
                     memory_detail::MallocAllocator<std::pair<void* const, std::pair<Bytes*, std::int64_t>>>>
      live;

  [[nodiscard]] std::size_t calling_rank() const {
    int r = own_rank;
#ifdef SMPI_H
    // One process runs every simulated rank: the one whose code runs now.
    int up = 0, down = 0;
    r = size;
    PMPI_Initialized(&up);
    if (up) PMPI_Finalized(&down);
    if (up && !down) PMPI_Comm_rank(MPI_COMM_WORLD, &r);
#endif
    return static_cast<std::size_t>(r >= 0 && r < size ? r : size);
  }
  void book(void* p, std::size_t n) {
    auto* counter = &heap[calling_rank()];
    const std::lock_guard<std::mutex> g(lock);
    live.emplace(p, std::pair{counter, static_cast<std::int64_t>(n)});
    counter->add(static_cast<std::int64_t>(n));
  }
  void unbook(void* p) {
    const std::lock_guard<std::mutex> g(lock);
    // Not found: allocated before counting began.
    if (const auto it = live.find(p); it != live.end()) {
      it->second.first->remove(it->second.second);
      live.erase(it);
    }
  }
};

/// LibTorch's CPU allocator, counting per rank. The block starts with a header naming the counter
/// and the size, so that a tensor freed by any rank's code is given back to the one that made it;
/// the context is the data pointer, as the default allocator's, so LibTorch's raw allocation
/// interface still works.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(int ranks, int own_rank) : table_(ranks, own_rank) {}

  c10::DataPtr allocate(std::size_t n) override {
    auto* base = static_cast<unsigned char*>(c10::alloc_cpu(n + header));
    auto* h = reinterpret_cast<Header*>(base);
    h->counter = &table_.tensor[table_.calling_rank()];
    h->bytes = static_cast<std::int64_t>(n);
    h->counter->add(h->bytes);
    void* data = base + header;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  [[nodiscard]] c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  [[nodiscard]] MemoryTable& table() { return table_; }

 private:
  // A multiple of the alignment LibTorch promises, so that the data keeps it.
  static constexpr std::size_t header = c10::gAlignment;
  struct Header {
    Bytes* counter;
    std::int64_t bytes;
  };
  static_assert(sizeof(Header) <= header);

  static void release(void* data) {
    auto* base = static_cast<unsigned char*>(data) - header;
    const auto* h = reinterpret_cast<const Header*>(base);
    h->counter->remove(h->bytes);
    c10::free_cpu(base);
  }

  MemoryTable table_;
};

namespace memory_detail {

// Internal linkage: one per copy of the program (one per simulated rank), set by count_memory().
static std::atomic<MemoryTable*>& table() {
  static std::atomic<MemoryTable*> t{nullptr};
  return t;
}

inline void* heap_allocate(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) return nullptr;
  if (auto* t = table().load()) t->book(p, n);
  return p;
}

inline void heap_free(void* p) {
  if (p == nullptr) return;
  if (auto* t = table().load()) t->unbook(p);
  std::free(p);
}

/// One rank's figures per phase (indexed as mpi_count.hpp's phases), and where the current entry
/// began.
struct Phases {
  struct Kind {
    double peak = 0, held = 0, total = 0, allocs = 0;
  };
  struct Start {
    std::int64_t current = 0, allocs = 0;
  };
  std::vector<std::array<Kind, 2>, MallocAllocator<std::array<Kind, 2>>> of;  // [phase][tensor, heap]
  std::array<Start, 2> start{};
  std::array<Bytes*, 2> counter{};  // this rank's, in the table
};

static Phases& phases() {
  // Never destroyed: under SMPI's mmap privatization every rank's static registers its destructor,
  // and at exit they all run on the one data segment mapped then (a double free).
  static auto& p = *new Phases;
  return p;
}

/// Closes the entry of phase `left` and opens one of `entered`.
inline void switched(int left, int entered) {
  auto& p = phases();
  const auto need = static_cast<std::size_t>(std::max(left, entered)) + 1;
  if (p.of.size() < need) p.of.resize(need);
  for (std::size_t k = 0; k < 2; ++k) {
    auto& c = *p.counter[k];
    auto& f = p.of[static_cast<std::size_t>(left)][k];
    const auto now = c.current.load(), allocs = c.allocs.load();
    f.peak = std::max(f.peak, static_cast<double>(c.peak.load() - p.start[k].current));
    f.held += static_cast<double>(now - p.start[k].current);
    f.total = static_cast<double>(now);
    f.allocs += static_cast<double>(allocs - p.start[k].allocs);
    p.start[k] = {now, allocs};
    c.restart_peak();
  }
}

constexpr int fields = 8;

inline void values(int phase, double* out) {
  auto& p = phases();
  const auto i = static_cast<std::size_t>(phase);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto f = i < p.of.size() ? p.of[i][k] : Phases::Kind{};
    out[4 * k + 0] = f.peak, out[4 * k + 1] = f.held, out[4 * k + 2] = f.total, out[4 * k + 3] = f.allocs;
  }
}

inline std::string json(const double* m) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                ",\"mem\":{\"tensor_peak\":%.0f,\"tensor_held\":%.0f,\"tensor_total\":%.0f,\"tensor_allocs\":%.0f,"
                "\"heap_peak\":%.0f,\"heap_held\":%.0f,\"heap_total\":%.0f,\"heap_allocs\":%.0f}",
                m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]);
  return buf;
}

}  // namespace memory_detail

/// Starts counting on this rank and follows mpi_count.hpp's phases from the current one. Collective
/// over MPI_COMM_WORLD, right after MPI_Init.
inline void count_memory() {
  (void)state();  // its phases' room is the benchmark's, not the first phase's
  int P = 1, rank = 0;
  PMPI_Comm_size(MPI_COMM_WORLD, &P);
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // The ranks' copies of the program have type_info objects of their own: compared by name.
  c10::Allocator* current = c10::GetCPUAllocator();
  auto* counting = std::strcmp(typeid(*current).name(), typeid(CountingCpuAllocator).name()) == 0
                       ? static_cast<CountingCpuAllocator*>(current)
                       : nullptr;
  if (counting == nullptr) {
    // Never freed: tensors and blocks freed at exit still reach it.
    counting = new (std::malloc(sizeof(CountingCpuAllocator))) CountingCpuAllocator(P, rank);
    c10::SetCPUAllocator(counting, /*priority=*/100);
  }
  auto& t = counting->table();
  auto& p = memory_detail::phases();
  p.counter = {&t.tensor[static_cast<std::size_t>(rank)], &t.heap[static_cast<std::size_t>(rank)]};
  // Every copy of the program knows the table before any rank counts: LibTorch's operator new may
  // be another rank's copy's.
  memory_detail::table().store(&t);
  PMPI_Barrier(MPI_COMM_WORLD);
  for (std::size_t k = 0; k < 2; ++k) {
    p.start[k] = {p.counter[k]->current.load(), p.counter[k]->allocs.load()};
    p.counter[k]->restart_peak();
  }
  state().follower = {&memory_detail::switched, memory_detail::fields, &memory_detail::values, &memory_detail::json};
}

}  // namespace einshard_scale

// ---- operator new and delete --------------------------------------------------------------------
// NOLINTBEGIN(misc-new-delete-overloads)
void* operator new(std::size_t n) {
  if (void* p = einshard_scale::memory_detail::heap_allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = einshard_scale::memory_detail::heap_allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return einshard_scale::memory_detail::heap_allocate(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return einshard_scale::memory_detail::heap_allocate(n);
}
void operator delete(void* p) noexcept { einshard_scale::memory_detail::heap_free(p); }
void operator delete[](void* p) noexcept { einshard_scale::memory_detail::heap_free(p); }
void operator delete(void* p, std::size_t) noexcept { einshard_scale::memory_detail::heap_free(p); }
void operator delete[](void* p, std::size_t) noexcept { einshard_scale::memory_detail::heap_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { einshard_scale::memory_detail::heap_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { einshard_scale::memory_detail::heap_free(p); }
// NOLINTEND(misc-new-delete-overloads)
