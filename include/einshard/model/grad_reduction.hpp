#pragma once
/// @file
/// Doing what parameter states say: `init_params` broadcasts each parameter over its init-sync
/// groups, `reduce_grads` sums each `.grad` over its gradient groups after backward, and
/// `register_grad_reduction_hooks` starts those sums from autograd hooks while backward still runs
/// (the C++/MPI counterpart of PyTorch's DistributedDataParallel).
///
/// All three work on buckets: parameters with the same groups, scale and dtype are packed into one
/// flat buffer of at most `bucket_bytes`, and each bucket costs one collective. A parameter's
/// gradient groups are disjoint (a rule of its state), so their sum is one all-reduce over the
/// compound group of all of them: a bucket needs a single reduction whatever its groups.
///
/// Collective over the mesh. Every rank must have registered the same parameters with the same
/// states (SPMD code does); two small all-gathers at the start of `init_params`, `reduce_grads`
/// and the hooks' registration check it (and agree on which gradients exist), so a mismatch throws
/// the same Error everywhere.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "einshard/comm/collectives.hpp"
#include "einshard/comm/nonblocking.hpp"
#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/model/parameter_layout.hpp"
#include "einshard/model/parameter_registry.hpp"
#include "einshard/model/parameter_state.hpp"

namespace einshard {

/// `{.bucket_bytes = 25 << 20, .average = "dp"}`. Gradients are summed over their groups (the
/// original's convention) unless `average` names a group: then a gradient reduced over (part of)
/// that group is divided by the size of that part, as DDP averages over data-parallel replicas.
struct GradReductionOptions {
  std::int64_t bucket_bytes = 25 << 20;
  std::string average{};
};

namespace detail {

struct BucketEntry {
  at::Tensor param;
  std::string name;
  std::int64_t offset = 0;  ///< in elements, into the bucket's buffer
  bool defined = false;     ///< its gradient exists on some rank (reduce_grads)
};

struct Bucket {
  MPI_Comm comm = MPI_COMM_NULL;  ///< of the compound group of every component the entries reduce over
  double scale = 1;
  at::ScalarType dtype = at::kFloat;
  std::int64_t numel = 0;
  std::vector<BucketEntry> entries;
};

/// What a bucketed operation reduces: the groups of a state (`reduce()` or `shared()`).
using GroupsOf = std::vector<std::string> (*)(const ParameterState&);

/// A registered parameter with something to reduce.
struct Item {
  std::string name;
  at::Tensor param;
  Group group;
  int averaged = 1;        ///< the size of the part of the averaging group it reduces over
  std::int64_t numel = 0;  ///< the largest over the ranks: bucket boundaries must not depend on the rank
  bool defined = false;    ///< its gradient exists on some rank
};

/// The agreement before a bucketed operation, collective over the mesh (two small all-gathers):
/// every rank must have the same items (groups, averaging, dtypes) and the ranks of an item's
/// group the same sizes, or every rank throws the same Error. Then each item's size is the largest
/// over the ranks, and `defined` says whether some rank has its gradient.
inline void agree_items(std::vector<Item>& items, const Mesh& mesh, std::string_view op) {
  const auto n = static_cast<std::int64_t>(items.size());
  std::uint64_t fp = 0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(n);
  auto mix = [&](std::uint64_t v) { fp = (fp ^ v) * 0x100000001b3ull; };
  std::vector<std::int64_t> payload;
  for (const auto& it : items) {
    mix(it.group.bits());
    mix(static_cast<std::uint64_t>(it.param.scalar_type()));
    mix(static_cast<std::uint64_t>(it.averaged));
    payload.push_back(it.param.numel());
    payload.push_back(it.param.grad().defined() ? 1 : 0);
  }
  const int P = mesh.size();
  const std::int64_t head[2] = {n, static_cast<std::int64_t>(fp >> 1)};
  const auto heads = comm::all_gather_values(head, mesh.comm());
  for (int r = 1; r < P; ++r)
    if (heads[2 * r] != heads[0] || heads[2 * r + 1] != heads[1])
      throw Error(std::string(op) + ": ranks registered different parameters (rank " + std::to_string(r) +
                  "'s gradient or init-sync groups, dtypes or parameter counts differ from rank 0's); "
                  "expected the same model on every rank");
  const auto w = 2 * n;
  const auto all = comm::all_gather_values(payload, mesh.comm());
  const auto& shape = mesh.shape();
  for (std::size_t k = 0; k < items.size(); ++k) {
    auto& it = items[k];
    const auto at = [&](int rank, std::size_t field) {
      return all[static_cast<std::size_t>(rank * w) + 2 * k + field];
    };
    it.numel = 0;
    it.defined = false;
    for (int r = 0; r < P; ++r) {
      it.numel = std::max(it.numel, at(r, 0));
      it.defined = it.defined || at(r, 1) != 0;
      // The rank of r's group at group coordinate 0 (ranks are row-major over the mesh).
      const auto c = mesh.coordinates_of(r);
      int root = 0;
      for (std::size_t d = 0; d < c.size(); ++d) root = root * shape.sizes[d] + (it.group.contains(static_cast<int>(d)) ? 0 : c[d]);
      if (at(r, 0) != at(root, 0))
        throw Error(std::string(op) + ": parameter '" + it.name + "' has " + std::to_string(at(r, 0)) +
                    " elements on rank " + std::to_string(r) + " but " + std::to_string(at(root, 0)) +
                    " on rank " + std::to_string(root) + ", which reduce together over '" + it.group.name() +
                    "'; expected equal shards on the ranks of a group");
    }
  }
}

/// Buckets over the registered parameters of `module` (reversed when `reverse`: the order in which
/// backward produces gradients), after the agreement. Checks every state first: the mesh, pending
/// inference (when `refuse_pending`), and the options.
template <HasParameters M>
std::vector<Bucket> make_buckets(M& module, const Mesh& mesh, const GradReductionOptions& o, GroupsOf groups_of,
                                 bool refuse_pending, bool reverse, std::string_view op) {
  if (!mesh) throw Error(std::string(op) + ": expected a mesh, got an empty one");
  if (o.bucket_bytes <= 0)
    throw Error(std::string(op) + ": expected .bucket_bytes > 0, got " + std::to_string(o.bucket_bytes));
  const auto& shape = mesh.shape();
  const Group average = o.average.empty() ? Group{} : union_of(parse_groups(o.average, shape, "average", op), shape);
  auto states = parameter_states(module);
  if (const auto bad = state_problems(states, shape, refuse_pending); !bad.empty())
    throw Error(std::string(op) + ": " + bad);
  if (reverse) std::reverse(states.begin(), states.end());
  std::vector<Item> items;
  for (const auto& [name, p, s] : states) {
    const auto group = union_of(groups_of(*s), shape);
    if (group.empty()) continue;
    const int averaged = shape.size(shape.group(group.bits() & average.bits()));
    items.push_back({name, p, group, averaged});
  }
  agree_items(items, mesh, op);

  std::vector<Bucket> buckets;
  std::vector<std::int64_t> sizes;  // rank-invariant elements of each bucket, for its boundary
  std::map<std::tuple<std::uint32_t, int, int>, std::size_t> open;  // key -> index in buckets
  for (const auto& it : items) {
    const auto element = static_cast<std::int64_t>(it.param.element_size());
    const auto key = std::make_tuple(it.group.bits(), it.averaged, static_cast<int>(it.param.scalar_type()));
    auto found = open.find(key);
    if (found != open.end() && sizes[found->second] > 0 &&
        (sizes[found->second] + it.numel) * element > o.bucket_bytes)
      open.erase(found), found = open.end();
    if (found == open.end()) {
      found = open.emplace(key, buckets.size()).first;
      Bucket b;
      b.comm = mesh.comm(it.group);  // collective: the same groups in the same order on every rank
      b.scale = 1.0 / it.averaged;
      b.dtype = it.param.scalar_type();
      buckets.push_back(std::move(b));
      sizes.push_back(0);
    }
    auto& b = buckets[found->second];
    b.entries.push_back({it.param, it.name, b.numel, it.defined});
    b.numel += it.param.numel();
    sizes[found->second] += it.numel;
  }
  return buckets;
}

/// Packs `t` (or zeros) into the buffer at an entry's place.
inline void pack(const at::Tensor& buffer, const BucketEntry& e, const at::Tensor& t) {
  auto slice = buffer.narrow(0, e.offset, e.param.numel());
  if (t.defined()) slice.view(e.param.sizes()).copy_(t);
  else slice.zero_();
}

inline at::Tensor unpacked(const at::Tensor& buffer, const BucketEntry& e) {
  return buffer.narrow(0, e.offset, e.param.numel()).view(e.param.sizes());
}

inline void require_cpu(const at::Tensor& t, std::string_view op, const std::string& name) {
  if (!t.device().is_cpu())
    throw Error(std::string(op) + ": expected CPU tensors, but '" + name + "' is on " + t.device().str());
}

/// Packs each bucket (`value(entry)`, zeros where undefined), starts `start(bucket, buffer,
/// request)` on every one, and waits for all: the buffers, in bucket order.
template <class Value, class Start>
std::vector<at::Tensor> run_buckets(const std::vector<Bucket>& buckets, std::string_view op, Value&& value,
                                    Start&& start) {
  std::vector<at::Tensor> buffers;
  comm::Requests requests(buckets.size());
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto& b = buckets[i];
    auto buffer = at::empty({b.numel}, at::TensorOptions().dtype(b.dtype));
    for (const auto& e : b.entries) {
      require_cpu(e.param, op, e.name);
      pack(buffer, e, value(e));
    }
    start(b, buffer, requests[i]);
    buffers.push_back(std::move(buffer));
  }
  requests.wait();
  return buffers;
}

/// Starts the sum of a bucket's buffer over its group.
inline void start_all_reduce(const Bucket& b, const at::Tensor& buffer, MPI_Request& request) {
  comm::iall_reduce_sum(buffer, b.comm, request);
}

}  // namespace detail

/// Broadcasts each registered parameter from rank 0 of each of its init-sync groups, so replicas
/// start equal (one broadcast per bucket). Unregistered parameters are left alone.
template <detail::HasParameters M>
void init_params(M& module, const Mesh& mesh, const GradReductionOptions& o = {}) {
  constexpr std::string_view op = "init_params";
  auto buckets = detail::make_buckets(
      module, mesh, o, [](const ParameterState& s) { return s.shared(); }, false, false, op);
  at::NoGradGuard no_grad;
  const auto buffers = detail::run_buckets(
      buckets, op, [](const detail::BucketEntry& e) { return e.param; },
      [](const detail::Bucket& b, const at::Tensor& buffer, MPI_Request& request) {
        comm::ibroadcast(buffer, 0, b.comm, request);
      });
  for (std::size_t i = 0; i < buckets.size(); ++i)
    for (const auto& e : buckets[i].entries) e.param.copy_(detail::unpacked(buffers[i], e));
}

/// Sums each registered parameter's `.grad` over its gradient groups (native and ddp backends;
/// external ones are their owner's), one all-reduce per bucket, all buckets in flight at once.
/// Call it once after backward, however many backward passes accumulated into `.grad`: a sum of
/// sums is the sum. A gradient no rank has stays undefined; one some ranks lack counts as zeros
/// there and is defined afterwards.
template <detail::HasParameters M>
void reduce_grads(M& module, const Mesh& mesh, const GradReductionOptions& o = {}) {
  constexpr std::string_view op = "reduce_grads";
  auto buckets = detail::make_buckets(
      module, mesh, o, [](const ParameterState& s) { return s.reduce(); }, true, false, op);
  at::NoGradGuard no_grad;
  const auto buffers = detail::run_buckets(
      buckets, op, [](const detail::BucketEntry& e) { return e.param.grad(); }, detail::start_all_reduce);
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].scale != 1) buffers[i].mul_(buckets[i].scale);
    for (const auto& e : buckets[i].entries) {
      if (!e.defined) continue;
      auto g = e.param.mutable_grad();
      if (g.defined()) g.copy_(detail::unpacked(buffers[i], e));
      else e.param.mutable_grad() = detail::unpacked(buffers[i], e).clone();
    }
  }
}

namespace detail {

/// The hooks' shared state: buckets in backward order with buffers reused from step to step; a
/// round is the reductions of one optimizer step.
struct HookState {
  std::vector<Bucket> buckets;
  std::vector<at::Tensor> buffers;
  std::vector<std::vector<bool>> ready;  // per bucket, per entry: its gradient arrived this round
  std::vector<std::size_t> ready_count;
  comm::Requests requests;               // per bucket
  std::size_t launched = 0;              // buckets start strictly in order, the same on every rank
  bool active = false;
  std::vector<std::pair<at::Tensor, unsigned>> hooks;  // (parameter, hook id)

  void launch_ready() {
    while (launched < buckets.size() && ready_count[launched] == buckets[launched].entries.size())
      launch(launched++);
  }
  void launch(std::size_t i) {
    const auto& b = buckets[i];
    for (std::size_t j = 0; j < b.entries.size(); ++j)
      if (!ready[i][j]) pack(buffers[i], b.entries[j], at::Tensor());
    start_all_reduce(b, buffers[i], requests[i]);
  }
  /// Lets MPI move the started reductions along while backward computes (MPI progresses
  /// nonblocking collectives inside MPI calls).
  void progress() {
    if (launched == 0) return;
    (void)requests.progress(launched);
  }

  void on_grad(std::size_t i, std::size_t j, const at::Tensor& grad) {
    if (ready[i][j]) finish();  // a second backward before wait(): close the first round
    active = true;
    const auto& e = buckets[i].entries[j];
    at::NoGradGuard no_grad;
    pack(buffers[i], e, grad);
    ready[i][j] = true;
    ++ready_count[i];
    launch_ready();
    progress();
  }

  void finish() {
    if (!active) return;
    while (launched < buckets.size()) launch(launched++);
    requests.wait();
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      const auto& b = buckets[i];
      for (const auto& e : b.entries) {
        const auto r = unpacked(buffers[i], e);
        auto g = e.param.mutable_grad();
        if (g.defined()) g.add_(r, b.scale);
        else e.param.mutable_grad() = b.scale == 1 ? r.clone() : r.mul(b.scale);
      }
      std::fill(ready[i].begin(), ready[i].end(), false);
      ready_count[i] = 0;
    }
    launched = 0;
    active = false;
  }
};

}  // namespace detail

/// The handle of `register_grad_reduction_hooks`: `wait()` before the optimizer step, `remove()`
/// (or destruction) detaches the hooks.
class GradReductionHooks {
 public:
  GradReductionHooks() = default;
  explicit GradReductionHooks(std::shared_ptr<detail::HookState> s) : state_(std::move(s)) {}
  GradReductionHooks(GradReductionHooks&&) noexcept = default;
  GradReductionHooks& operator=(GradReductionHooks&& o) noexcept {
    if (this != &o) {
      remove_noexcept();
      state_ = std::move(o.state_);
    }
    return *this;
  }
  GradReductionHooks(const GradReductionHooks&) = delete;
  GradReductionHooks& operator=(const GradReductionHooks&) = delete;
  ~GradReductionHooks() { remove_noexcept(); }

  /// Completes this step's reductions and adds them into `.grad` (collective; a no-op when no
  /// backward ran since the last wait).
  void wait() {
    if (state_) state_->finish();
  }
  /// Completes what is in flight, then detaches every hook.
  void remove() {
    if (!state_) return;
    state_->finish();
    for (auto& [p, id] : state_->hooks) p.remove_hook(id);
    state_->hooks.clear();
    state_.reset();
  }
  [[nodiscard]] std::size_t bucket_count() const { return state_ ? state_->buckets.size() : 0; }

 private:
  void remove_noexcept() noexcept {
    try {
      remove();
    } catch (...) {  // a destructor must not throw; the hooks are detached below regardless
      if (state_)
        for (auto& [p, id] : state_->hooks) p.remove_hook(id);
      state_.reset();
    }
  }
  std::shared_ptr<detail::HookState> state_;
};

/// Hooks that start each bucket's all-reduce as soon as backward has produced all its gradients
/// (buckets in reverse parameter order, as DDP), so communication overlaps the rest of backward.
/// A hook takes the gradient's contribution into its bucket and lets zeros accumulate into `.grad`;
/// `wait()` adds the reduced sums. Several backward passes before one `wait()` are fine (each is
/// reduced, and the sums add). Every rank must run the same backward passes between waits.
template <detail::HasParameters M>
GradReductionHooks register_grad_reduction_hooks(M& module, const Mesh& mesh, const GradReductionOptions& o = {}) {
  constexpr std::string_view op = "register_grad_reduction_hooks";
  auto s = std::make_shared<detail::HookState>();
  s->buckets = detail::make_buckets(
      module, mesh, o, [](const ParameterState& st) { return st.reduce(); }, true, true, op);
  for (const auto& b : s->buckets) {
    for (const auto& e : b.entries) {
      detail::require_cpu(e.param, op, e.name);
      if (!e.param.requires_grad())
        throw Error(std::string(op) + ": parameter '" + e.name + "' does not require grad; expected "
                    "every parameter with gradient groups to require grad");
    }
    s->buffers.push_back(at::empty({b.numel}, at::TensorOptions().dtype(b.dtype)));
    s->ready.emplace_back(b.entries.size(), false);
    s->ready_count.push_back(0);
  }
  s->requests = comm::Requests(s->buckets.size());
  // The handle owns the state; it detaches the hooks before the state goes.
  for (std::size_t i = 0; i < s->buckets.size(); ++i)
    for (std::size_t j = 0; j < s->buckets[i].entries.size(); ++j) {
      auto& p = s->buckets[i].entries[j].param;
      const auto id = p.register_hook([st = s.get(), i, j](const at::Tensor& grad) {
        st->on_grad(i, j, grad);
        return at::zeros_like(grad);
      });
      s->hooks.emplace_back(p, id);
    }
  return GradReductionHooks(std::move(s));
}

}  // namespace einshard
