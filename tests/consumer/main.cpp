// The program every consumer project (find_package, add_subdirectory, build tree) builds: it
// includes the umbrella headers through the einshard::einshard target, runs one notation and
// partitions a graph (with libmetis when einshard found it, so its link line is checked too).
#include <einshard/einshard.hpp>
#include <einshard/sparse.hpp>
#include <ATen/ATen.h>

#include <cstdint>
#include <iostream>

int main() {
  static_assert(einshard::version_major == EINSHARD_VERSION_MAJOR);
  const at::Tensor y = einshard::einshard<"a b -> b a">(at::ones({2, 3}));
  if (y.sizes() != at::IntArrayRef{3, 2}) {
    std::cerr << "einshard consumer: expected shape [3, 2], got " << y.sizes() << '\n';
    return 1;
  }
  // A run-time notation: defined in einshard_compiled when the target links it, so this checks
  // that link line too.
  const at::Tensor z = einshard::einshard("a b -> b a", {at::ones({2, 3})});
  if (!at::equal(y, z)) {
    std::cerr << "einshard consumer: the run-time notation disagrees with the compile-time one\n";
    return 1;
  }
#if defined(EINSHARD_COMPILED)
  const char* mode = "compiled";
#else
  const char* mode = "header-only";
#endif
#if defined(EINSHARD_HAS_METIS)
  constexpr auto method = einshard::sparse::PartitionMethod::metis;
#else
  constexpr auto method = einshard::sparse::PartitionMethod::simple;
#endif
  const at::Tensor ring = at::arange(8);
  const at::Tensor next = at::remainder(ring + 1, 8);
  const at::Tensor ids = einshard::sparse::partition_ids(ring, next, 8, 2, {.method = method});
  if (ids.bincount().min().item<std::int64_t>() < 2) {
    std::cerr << "einshard consumer: expected two parts of a ring of 8, got " << ids << '\n';
    return 1;
  }
  std::cout << "einshard " << einshard::version_major << '.' << einshard::version_minor << '.'
            << einshard::version_patch << " (" << mode << "): a b -> b a gives " << y.sizes() << '\n';
  return 0;
}
