// The block pool (comm/pool.hpp): large CPU results reuse freed blocks of the same size, small ones
// and a zero capacity go to torch's allocator, and the pool never holds more than its capacity.

#include <ATen/ATen.h>

#include <einshard/comm/pool.hpp>

#include <catch2/catch.hpp>

namespace test_pool {

namespace comm = einshard::comm;

TEST_CASE("block pool: a freed large block serves the next request of its size", "[pool]") {
  auto& pool = comm::BlockPool::instance();
  const auto saved = pool.capacity();
  pool.set_capacity(std::int64_t{64} << 20);
  const auto options = at::TensorOptions(at::kDouble);
  void* first = nullptr;
  {
    auto a = comm::pooled_empty({1024, 256}, options);  // 2 MiB
    CHECK(a.is_contiguous());
    CHECK(a.sizes() == at::IntArrayRef({1024, 256}));
    a.fill_(3.0);
    CHECK(a.sum().item<double>() == 3.0 * 1024 * 256);
    first = a.data_ptr();
  }
  CHECK(pool.held() >= std::int64_t{2} << 20);
  {
    auto b = comm::pooled_empty({256, 1024}, options);  // same bytes, other shape: same block
    CHECK(b.data_ptr() == first);
    auto c = comm::pooled_empty({1024, 256}, options);  // the block is taken: a new one
    CHECK(c.data_ptr() != first);
  }
  // Small requests are torch's own tensors, never pooled.
  const auto held = pool.held();
  { auto s = comm::pooled_empty({16}, options); CHECK(s.numel() == 16); }
  CHECK(pool.held() == held);
  // Capacity bounds what is kept; zero frees everything and disables pooling.
  pool.set_capacity(std::int64_t{2} << 20);
  CHECK(pool.held() <= std::int64_t{2} << 20);
  pool.set_capacity(0);
  CHECK(pool.held() == 0);
  { auto d = comm::pooled_empty({1024, 256}, options); CHECK(d.numel() == 1024 * 256); }
  CHECK(pool.held() == 0);
  pool.set_capacity(saved);
}

}  // namespace test_pool
