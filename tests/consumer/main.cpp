// The program every consumer project (find_package, add_subdirectory, build tree) builds: it
// includes the umbrella header through the einshard::einshard target and runs one notation.
#include <einshard/einshard.hpp>
#include <torch/torch.h>

#include <iostream>

int main() {
  static_assert(einshard::version_major == EINSHARD_VERSION_MAJOR);
  const torch::Tensor y = einshard::einshard<"a b -> b a">(torch::ones({2, 3}));
  if (y.sizes() != torch::IntArrayRef{3, 2}) {
    std::cerr << "einshard consumer: expected shape [3, 2], got " << y.sizes() << '\n';
    return 1;
  }
  std::cout << "einshard " << einshard::version_major << '.' << einshard::version_minor << '.'
            << einshard::version_patch << ": a b -> b a gives " << y.sizes() << '\n';
  return 0;
}
