#pragma once
/// @file
/// A tally of the memory a rank's part of a distributed object holds: tensors counted once per
/// storage (views and tensors sharing storage, as a matrix's product CSR shares its values, count
/// once), host vectors by their capacity.

#include <ATen/ATen.h>

#include <cstdint>
#include <set>
#include <vector>

namespace einshard::sparse::detail {

class HeldBytes {
 public:
  void add(const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.layout() == at::kSparseCsr) {
      add(t.crow_indices());
      add(t.col_indices());
      add(t.values());
      return;
    }
    if (!t.has_storage()) return;
    const auto* storage = t.storage().unsafeGetStorageImpl();
    if (seen_.insert(storage).second) bytes_ += static_cast<std::int64_t>(t.storage().nbytes());
  }
  template <class T>
  void add(const std::vector<T>& v) {
    bytes_ += static_cast<std::int64_t>(v.capacity() * sizeof(T));
  }
  [[nodiscard]] std::int64_t bytes() const { return bytes_; }

 private:
  std::set<const void*> seen_;
  std::int64_t bytes_ = 0;
};

}  // namespace einshard::sparse::detail
