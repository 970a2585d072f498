#pragma once
/// @file
/// Attaching a `ParameterState` to a tensor and finding it again. LibTorch tensors carry no
/// attributes, so states live in a process-wide table keyed by the tensor's implementation (which
/// a module's parameter, `named_parameters()` and an optimizer all share), with a weak reference
/// that tells a dead entry from a new tensor at a reused address.
///
/// Registration is all-or-nothing: `attach` merges and checks every entry of a batch before it
/// stores any, so a call that registers several parameters leaves nothing behind when one fails.

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/model/parameter_state.hpp"

namespace einshard {

namespace detail {

class ParameterRegistry {
 public:
  static ParameterRegistry& instance() {
    static ParameterRegistry r;
    return r;
  }

  std::shared_ptr<const ParameterState> find(const at::Tensor& t) {
    if (!t.defined()) return nullptr;
    std::lock_guard lock(mutex_);
    return find_locked(t.unsafeGetTensorImpl());
  }

  /// Merges each (tensor, state) into what is attached (or into an earlier entry of the same batch:
  /// a tensor may appear twice), checks the ranks, then stores all of them.
  void attach(const std::vector<std::pair<at::Tensor, ParameterState>>& batch, std::string_view op,
              bool replace = false) {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<at::Tensor, std::shared_ptr<const ParameterState>>> staged;
    for (const auto& [t, s] : batch) {
      if (!t.defined()) throw Error(std::string(op) + ": expected a defined tensor, got an undefined one");
      check_rank(t, s, op);
      std::shared_ptr<const ParameterState> base;
      for (auto& [u, st] : staged)
        if (u.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) base = st;
      if (!base && !replace) base = find_locked(t.unsafeGetTensorImpl());
      auto next = std::make_shared<const ParameterState>(base ? merge(*base, s, op) : s);
      bool found = false;
      for (auto& [u, st] : staged)
        if (u.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) st = next, found = true;
      if (!found) staged.emplace_back(t, std::move(next));
    }
    purge_locked();
    for (auto& [t, st] : staged)
      map_.insert_or_assign(t.unsafeGetTensorImpl(),
                            Entry{c10::weak_intrusive_ptr<c10::TensorImpl>(t.getIntrusivePtr()), std::move(st)});
  }

  void erase(const at::Tensor& t) {
    std::lock_guard lock(mutex_);
    map_.erase(t.unsafeGetTensorImpl());
  }

  static void check_rank(const at::Tensor& t, const ParameterState& s, std::string_view op) {
    const auto n = static_cast<std::int64_t>(s.axes.size());
    if (s.ellipsis ? t.dim() < n : t.dim() != n)
      throw Error(std::string(op) + ": parameter layout '" + s.layout() + "' names " +
                  std::to_string(n) + (s.ellipsis ? " or more" : "") +
                  " dimensions, but the parameter has " + std::to_string(t.dim()));
  }

 private:
  struct Entry {
    c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
    std::shared_ptr<const ParameterState> state;
  };

  std::shared_ptr<const ParameterState> find_locked(const c10::TensorImpl* impl) {
    const auto it = map_.find(impl);
    if (it == map_.end()) return nullptr;
    if (it->second.tensor.expired()) {  // the tensor died; this address is a new one's
      map_.erase(it);
      return nullptr;
    }
    return it->second.state;
  }

  // Dead entries go when the table has doubled since the last sweep: amortized O(1) per attach.
  void purge_locked() {
    if (map_.size() < 2 * swept_ + 64) return;
    for (auto it = map_.begin(); it != map_.end();)
      it = it->second.tensor.expired() ? map_.erase(it) : std::next(it);
    swept_ = map_.size();
  }

  std::mutex mutex_;
  std::unordered_map<const c10::TensorImpl*, Entry> map_;
  std::size_t swept_ = 0;
};

}  // namespace detail

/// The state attached to `w`, or nullptr.
inline std::shared_ptr<const ParameterState> find_parameter_state(const at::Tensor& w) {
  return detail::ParameterRegistry::instance().find(w);
}

/// The state attached to `w` (layout, shard groups, gradient and init-sync groups). The reference
/// stays valid while `w` lives and is not registered again.
inline const ParameterState& parameter_state(const at::Tensor& w) {
  // The registry keeps the state alive; the shared_ptr only guards concurrent replacement.
  const auto s = find_parameter_state(w);
  if (!s)
    throw Error("parameter_state: expected a tensor with parameter state (register it with "
                "register_parameter_layout, a [param] notation or einshard_like), found none");
  return *s;
}

inline bool has_parameter_state(const at::Tensor& w) { return find_parameter_state(w) != nullptr; }

/// Attaches `s` to `w`, merged with what `w` already has (the merge rules of `merge`).
inline void register_parameter_state(const at::Tensor& w, ParameterState s) {
  detail::ParameterRegistry::instance().attach({{w, std::move(s)}}, "register_parameter_state");
}

/// Attaches `s` to `w`, replacing what `w` had.
inline void set_parameter_state(const at::Tensor& w, ParameterState s) {
  detail::ParameterRegistry::instance().attach({{w, std::move(s)}}, "set_parameter_state", true);
}

/// Detaches whatever state `w` has.
inline void clear_parameter_state(const at::Tensor& w) { detail::ParameterRegistry::instance().erase(w); }

}  // namespace einshard
