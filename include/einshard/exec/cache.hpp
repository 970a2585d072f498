#pragma once
/// @file
/// `BoundedCache`: the one process-wide cache of prepared things by key (run-time notations, prepared
/// distributed calls). Entries are immutable and shared; the map is bounded (keys built from user
/// strings and shapes may be unbounded) and cleared when full. A repeated key on one thread is found
/// in a small per-thread memo first, without the lock.

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace einshard::exec {

namespace detail {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace detail

/// One instance per (Value, Tag): `Tag` keeps caches of the same value type apart.
template <class Value, std::size_t Capacity, class Tag = void>
class BoundedCache {
 public:
  static BoundedCache& instance() {
    static BoundedCache cache;
    return cache;
  }

  /// The entry of `key`, made by `make()` (which returns a `std::shared_ptr<const Value>`) when
  /// there is none. Two threads missing at once may both make it; the first stored wins.
  template <class Make>
  std::shared_ptr<const Value> get(std::string_view key, Make&& make) {
    const auto hash = detail::StringHash{}(key);
    auto& slot = memo()[hash % memo_slots];
    if (slot.value && slot.hash == hash && slot.key == key) return slot.value;
    std::shared_ptr<const Value> found;
    {
      std::lock_guard lock(mutex_);
      if (auto it = map_.find(key); it != map_.end()) found = it->second;
    }
    if (!found) {
      auto made = make();
      std::lock_guard lock(mutex_);
      if (map_.size() >= Capacity) map_.clear();
      found = map_.emplace(std::string(key), std::move(made)).first->second;
    }
    // An entry stays correct after the map lets go of it (its key says all it depends on).
    slot.hash = hash;
    slot.key.assign(key);
    slot.value = found;
    return found;
  }

  static constexpr std::size_t capacity = Capacity;

 private:
  static constexpr std::size_t memo_slots = 16;
  struct Slot {
    std::size_t hash = 0;
    std::string key;
    std::shared_ptr<const Value> value;
  };
  static std::array<Slot, memo_slots>& memo() {
    thread_local std::array<Slot, memo_slots> slots;
    return slots;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Value>, detail::StringHash, std::equal_to<>> map_;
};

}  // namespace einshard::exec
