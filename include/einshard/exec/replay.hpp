#pragma once
/// @file
/// Prepare once, run lean: a repeated distributed call replays the call it ran last at the same
/// call site (notation, mesh, policy, shapes) without the metadata agreement's rendezvous. Every
/// distributed notation runs through `run_with_replay`, at the end of this file.
///
/// The first call at a site agrees (exec/call.hpp), prepares, and leaves a *replay*: the prepared
/// call, this rank's operands as agreed, and a fingerprint of every rank's. A later call there
/// compares its own operands with the replay's, which needs no other rank, and then:
/// - **fold** (the call's first collective is an all-reduce over the whole mesh, float or double):
///   that all-reduce carries a header (exec/fold.hpp) with this rank's verdict and fingerprint. A
///   rank whose operands differ joins it with zeros of the prepared size, so the counts agree. If
///   any rank faulted or the fingerprints differ, every rank sees it in the same sums, drops what it
///   computed and runs the full agreement: the same error as a first call on every rank, or a new
///   replay when the operands changed consistently.
/// - **quiet** (the forward moves no data: only permutes and whole -> partial steps over the whole
///   mesh, e.g. column-parallel `b n c, h/tp c -> b n h/tp`): nothing is exchanged at all. A rank
///   whose operands match computes exactly what the prepared call computes. A rank whose operands
///   differ computes the same steps on them (they depend on no size but its own: permutes, the
///   local einsum, an identity), or, when its operands cannot be contracted, NaN of the prepared
///   shape through the same steps; and keeps a pending record. The next collective of the notation
///   on this mesh carries that record -- the folded all-reduce of the next call, the next
///   agreement, or this call's own backward all-reduce (`GuardedAddPartialOp`), whichever comes
///   first -- and there every rank resolves it together: the same error on every rank as a first
///   call with those operands, or, when the operands were consistent after all, a new replay.
///   Until then, the one rank's result is its own operands' local product (what it would be if the
///   call were accepted) or NaN; a result that went on to be summed with other ranks' never
///   returns, because that sum is the collective that raises.
/// - **check**: any other plan (its first collective moves data between ranks: an all-to-all, a
///   gather, a halo) checks in one all-reduce of three integers before it moves anything: whether
///   some rank's operands differ from its replay's or it holds a pending record, and the replay's
///   fingerprint (so ranks replaying different calls differ there too). All clear: replay. Else
///   every rank agrees in full, as a first call does: the same error on every rank, or a new replay.
///   The cost is that of a barrier, O(log P) latency and no P-sized message, where the agreement
///   all-gathers every rank's metadata. A first call (and a fold that found a fault) joins the same
///   all-reduce voting no before it agrees, so ranks that reach one program point with different
///   notations, one of them replayed in this mode, still meet and raise the agreement's error.
///
/// Why every rank takes the same path: the replays are a pure function of the sequence of call
/// sites and agreed outcomes, which every rank of an SPMD program shares (a replay is written only
/// after an agreement or a resolution, both collective, and its slot is chosen by the site's text,
/// never by a rank's shapes); so every rank finds a replay, or none, and the same mode. What this
/// cannot catch without a rendezvous is ranks calling different notations at one point of the
/// program when both have replays; a first call at a site still agrees and names it.
///
/// A cached call here parses nothing, looks nothing up by name and takes no lock; it allocates
/// tensors only (the local product, the summed buffer, the result) and the autograd nodes of a
/// differentiable call, plus the text of `shapes` metadata when the call passes some.

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "einshard/comm/agreement.hpp"
#include "einshard/comm/mpi.hpp"
#include "einshard/config.hpp"
#include "einshard/error.hpp"
#include "einshard/exec/agreement.hpp"
#include "einshard/exec/call.hpp"
#include "einshard/exec/contraction.hpp"
#include "einshard/exec/fold.hpp"
#include "einshard/exec/program.hpp"
#include "einshard/exec/unary.hpp"
#include "einshard/mesh.hpp"
#include "einshard/notation/expression.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/policy_scope.hpp"

namespace einshard::exec {

enum class ReplayMode { check, quiet, fold };

/// The last agreed call at one call site on this thread.
struct Replay {
  std::string site;  ///< notation, mesh sizes, policy, shapes: the same text on every rank
  std::uint64_t mesh_id = 0;
  ReplayMode mode = ReplayMode::check;
  PreparedCall call;                 ///< none until the slot's first agreed call
  std::int64_t fingerprint = 0;      ///< of the site and every rank's operands
  std::vector<comm::RankInfo> mine;  ///< this rank's operands as agreed
  std::vector<bool> scalar;
  // The first all-reduce of a fold: its communicator, element count and dtype.
  MPI_Comm fold_comm = MPI_COMM_NULL;
  std::int64_t fold_numel = 0;
  at::ScalarType fold_dtype = at::kFloat;
  // What preparing the call again needs (a resolution).
  notation::ExpressionView view{};
  std::shared_ptr<const void> keep;  ///< owns `view` for a run-time notation
  Options options;
  std::int64_t element = 0;
};

namespace detail {

inline constexpr std::size_t replay_slots = 64, evicted_slots = 16;
inline std::array<Replay, replay_slots>& replays() {
  thread_local std::array<Replay, replay_slots> r;
  return r;
}
/// Replays pushed out of their slot by another site, newest last: a pending record may still name
/// one (every rank evicts alike, so every rank still finds it, or none does).
struct Evicted {
  std::array<Replay, evicted_slots> ring;
  std::size_t next = 0;
};
inline Evicted& evicted() {
  thread_local Evicted e;
  return e;
}

/// The call site's text, in this thread's reused string.
inline const std::string& site_key(std::string_view source, const Options& o) {
  thread_local std::string key;
  auto word = [](std::int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  key.assign(source);
  key += '\x1f';
  for (auto n : o.mesh.sizes()) word(n);
  word(resolve_policy(o.policy).key());
  if (!o.shapes.empty()) key += o.shapes.key();
  return key;
}

/// How a prepared call can be replayed (see the file comment) and, for a fold, the all-reduce that
/// carries the header: its communicator and element count.
struct ModeAndFold {
  ReplayMode mode = ReplayMode::check;
  MPI_Comm fold_comm = MPI_COMM_NULL;
  std::int64_t fold_numel = 0;
};
/// From the call's programs in run order.
inline ModeAndFold mode_and_fold(std::span<const Program* const> order, const SizeTable& t, const Mesh& mesh) {
  bool local = true;  // only permutes and whole-mesh add-partials so far
  for (const auto* p : order)
    for (std::size_t i = 0; i < p->steps.size(); ++i) {
      const auto& s = p->steps[i];
      switch (s.kind) {
        case plan::StepKind::permute: break;
        case plan::StepKind::add_partial:
          local = local && mesh.size(s.group) == mesh.size();
          break;
        case plan::StepKind::split: local = false; break;
        case plan::StepKind::all_reduce:
          if (mesh.size(s.group) == mesh.size())
            return {ReplayMode::fold, p->pieces[i].comm, detail::bytes_of(s.before, t, mesh, 1)};
          return {};
        default: return {};
      }
    }
  return local ? ModeAndFold{ReplayMode::quiet, MPI_COMM_NULL, 0} : ModeAndFold{};
}

inline ModeAndFold mode_and_fold(const UnaryCall& c, const Mesh& mesh) {
  const Program* order[] = {&c.program};
  return mode_and_fold(order, c.sizes, mesh);
}
inline ModeAndFold mode_and_fold(const ContractionCall& c, const Mesh& mesh) {
  std::vector<const Program*> order;
  for (const auto& s : c.stages) order.insert(order.end(), {&s.x, &s.y, &s.z});
  return mode_and_fold(order, c.sizes, mesh);
}

}  // namespace detail

/// Agrees on the operands of `e`, as every call that does not replay does; collective over the
/// mesh, in O(log P) when the shards are cut the usual way (exec/agreement.hpp). The exchange also
/// carries whether each rank holds a pending record of a call that moved no data (exec/fold.hpp):
/// those are resolved first, by every rank together (`resolve_pending`).
inline Agreement agree_operands(const notation::ExpressionView& e, at::TensorList xs, const Options& o) {
  std::vector<comm::RankInfo> mine;
  std::vector<bool> scalar;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    mine.push_back(describe_operand(e, i, xs[i]));
    scalar.push_back(stands_for_one_axis(e, i, xs[i]));
  }
  // The call site (notation, mesh, policy, shapes metadata), which every rank must pass alike.
  const auto site = static_cast<std::int64_t>(std::hash<std::string>{}(detail::site_key(e.source, o)));
  auto layouts = operand_layouts(e, mine, o.mesh.shape());
  Agreement a{agree_summarized(o.mesh, std::move(mine), std::move(layouts), site, o.shapes, has_pending(o.mesh.comm())),
              std::move(scalar)};
  if (a.flagged) resolve_pending(o.mesh.comm());
  check_operands(e, a);
  return a;
}

/// The replay slot of this call site (empty, or another site's, when none is there).
inline Replay& replay_slot(std::string_view source, const Options& o, bool& hit) {
  const auto& key = detail::site_key(source, o);
  auto& slot = detail::replays()[(std::hash<std::string>{}(key) ^ o.mesh.id()) % detail::replay_slots];
  hit = is_prepared(slot.call) && slot.mesh_id == o.mesh.id() && slot.site == key;
  return slot;
}

/// Whether this rank's operands are those the replay was agreed with (no other rank consulted).
inline bool matches(const Replay& r, const notation::ExpressionView& e, at::TensorList xs) {
  if (xs.size() != r.mine.size()) return false;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const auto& x = xs[i];
    const auto& m = r.mine[i];
    const bool scalar = stands_for_one_axis(e, i, x);
    if (scalar != r.scalar[i] || static_cast<std::int64_t>(x.device().type()) != m.device ||
        static_cast<std::int64_t>(x.scalar_type()) != m.dtype)
      return false;
    if (scalar) {
      if (m.ndim != 1 || m.sizes[0] != 1) return false;
      continue;
    }
    if (x.dim() != m.ndim) return false;
    for (std::int64_t d = 0; d < m.ndim; ++d)
      if (x.size(d) != m.sizes[static_cast<std::size_t>(d)]) return false;
  }
  return true;
}

/// The prepared call for agreed operands, from the process-wide cache (made on a miss).
inline PreparedCall prepared(const notation::ExpressionView& e, const Agreement& a, const Options& o,
                             std::int64_t element, bool unary) {
  const auto& key = cache_key(e.source, o, a);
  if (unary)
    return CallCache<UnaryCall>::instance().get(key, [&] { return prepare_unary(e, a, o); });
  return CallCache<ContractionCall>::instance().get(key, [&] { return prepare_contraction(e, a, element, o); });
}

/// Runs a prepared call on `xs` (0-d stand-ins marked in `scalar`).
inline at::Tensor run_prepared(const PreparedCall& call, at::TensorList xs, const std::vector<bool>& scalar) {
  if (const auto* unary = std::get_if<std::shared_ptr<const UnaryCall>>(&call))
    return run_unary(**unary, xs[0], scalar[0]);
  return run_contraction(*std::get<std::shared_ptr<const ContractionCall>>(call), xs, scalar);
}

/// The plan of a prepared call with this rank's costs (no data moves).
inline Plan describe_prepared(std::string_view source, const PreparedCall& call, const Mesh& mesh,
                              std::int64_t element) {
  if (const auto* unary = std::get_if<std::shared_ptr<const UnaryCall>>(&call))
    return describe_unary(source, **unary, mesh, element);
  return describe_contraction(source, *std::get<std::shared_ptr<const ContractionCall>>(call), mesh, element);
}

/// Writes the replay of an agreed call (every rank does, at the same point).
inline void remember_replay(Replay& slot, const notation::ExpressionView& e, std::shared_ptr<const void> keep,
                            const Options& o, const Agreement& a, PreparedCall call, std::int64_t element) {
  const auto& key = detail::site_key(e.source, o);
  if (is_prepared(slot.call) && (slot.mesh_id != o.mesh.id() || slot.site != key)) {
    auto& ev = detail::evicted();
    ev.ring[ev.next++ % detail::evicted_slots] = std::move(slot);
  }
  const auto how = std::visit([&](const auto& c) { return detail::mode_and_fold(*c, o.mesh); }, call);
  slot.site = key;
  slot.mesh_id = o.mesh.id();
  slot.mode = how.mode;
  slot.call = std::move(call);
  slot.fingerprint = a.fingerprint(key);
  slot.mine = a.mine;
  slot.scalar = a.scalar;
  slot.fold_comm = how.fold_comm;
  slot.fold_numel = how.fold_numel;
  // The header rides on the all-reduce's dtype: the contraction's result type of agreed operands.
  auto dtype = static_cast<at::ScalarType>(slot.mine[0].dtype);
  for (const auto& m : slot.mine) dtype = at::promote_types(dtype, static_cast<at::ScalarType>(m.dtype));
  slot.fold_dtype = dtype;
  if (how.mode == ReplayMode::fold && detail::digits(dtype, o.mesh.size()) == 0) slot.mode = ReplayMode::check;
  // The folded header and the guarded backward pack host memory; device operands (comm/backend.hpp)
  // check in a separate all-reduce instead.
  for (const auto& m : slot.mine)
    if (m.device != static_cast<std::int64_t>(c10::DeviceType::CPU)) slot.mode = ReplayMode::check;
  slot.view = e;
  slot.keep = std::move(keep);
  slot.options = o;
  slot.element = element;
}

// Declared in exec/fold.hpp (its ops call it); compiled, defined once in einshard_compiled.
#if !EINSHARD_DECLARE_ONLY
/// Resolves every rank's pending records on `mesh` (see exec/fold.hpp); collective over `mesh`.
EINSHARD_INLINE void resolve_pending(MPI_Comm mesh) {
  constexpr std::size_t max_operands = 4;
  constexpr std::size_t words = 3 + max_operands * comm::RankInfo::words;
  auto pack = [](std::vector<std::int64_t>& v, const std::vector<comm::RankInfo>& infos) {
    for (std::size_t i = 0; i < max_operands; ++i) {
      comm::pack(v, i < infos.size() ? infos[i] : comm::RankInfo{});
    }
  };
  auto unpack = [](const std::int64_t* p, std::size_t n) {
    std::vector<comm::RankInfo> infos(n);
    for (std::size_t i = 0; i < n; ++i, p += comm::RankInfo::words) infos[i] = comm::unpack(p);
    return infos;
  };
  auto& mine = pending();
  for (;;) {
    // Round 1: each rank's oldest record on this mesh, if any.
    std::vector<std::int64_t> v;
    const Pending* first = nullptr;
    for (const auto& p : mine)
      if (p.mesh == mesh) {
        first = &p;
        break;
      }
    v.push_back(first ? 1 : 0);
    v.push_back(first ? first->fingerprint : 0);
    v.push_back(first ? static_cast<std::int64_t>(first->infos.size()) : 0);
    pack(v, first ? first->infos : std::vector<comm::RankInfo>{});
    const auto all = comm::all_gather_values(v, mesh);
    const auto P = all.size() / words;
    std::size_t owner = P;
    for (std::size_t r = 0; r < P && owner == P; ++r)
      if (all[r * words] != 0) owner = r;
    if (owner == P) return;
    const auto fingerprint = all[owner * words + 1];
    // Round 2: every rank's operands of that call: a rank holding a record for it sends what it
    // had, the others what they agreed (their replay of it, which they matched).
    const Replay* replay = nullptr;
    for (const auto& r : detail::replays())
      if (is_prepared(r.call) && r.fingerprint == fingerprint) replay = &r;
    for (const auto& r : detail::evicted().ring)
      if (!replay && is_prepared(r.call) && r.fingerprint == fingerprint) replay = &r;
    std::vector<comm::RankInfo> infos;
    bool held = false;
    for (const auto& p : mine)
      if (p.mesh == mesh && p.fingerprint == fingerprint) {
        infos = p.infos;
        held = true;
        break;
      }
    if (!held && replay) infos = replay->mine;
    const bool found = replay != nullptr && infos.size() <= max_operands;
    std::vector<std::int64_t> w{found ? 1 : 0, 0, static_cast<std::int64_t>(infos.size())};
    pack(w, found ? infos : std::vector<comm::RankInfo>{});
    const auto every = comm::all_gather_values(w, mesh);
    std::erase_if(mine, [&](const Pending& p) { return p.mesh == mesh && p.fingerprint == fingerprint; });
    std::size_t lost = P;
    for (std::size_t r = 0; r < P && lost == P; ++r)
      if (every[r * words] == 0) lost = r;
    if (lost != P)
      throw Error("einshard (a call that moved no data): expected rank " + std::to_string(owner) +
                  "'s operands to be those the call was prepared for, found others, and rank " +
                  std::to_string(lost) + " no longer holds that call to check them against");
    const auto n = static_cast<std::size_t>(every[2]);
    Agreement a;
    for (std::size_t r = 0; r < P; ++r) a.ranks.push_back(unpack(every.data() + r * words + 3, n));
    a.mine = a.ranks[static_cast<std::size_t>(comm::rank_of(mesh))];
    a.scalar = replay->scalar;
    // The same checks, the same plan and so the same error as a first call with these operands.
    check_operands(replay->view, a);
    auto& slot = const_cast<Replay&>(*replay);
    const bool unary = std::holds_alternative<std::shared_ptr<const UnaryCall>>(slot.call);
    auto call = prepared(slot.view, a, slot.options, slot.element, unary);
    const auto keep = slot.keep;
    const auto options = slot.options;
    const auto view = slot.view;
    const auto element = slot.element;
    remember_replay(slot, view, keep, options, a, std::move(call), element);
  }
}
#endif  // !EINSHARD_DECLARE_ONLY

/// Runs the replayed call on matching operands.
inline at::Tensor run_replay(const Replay& r, at::TensorList xs) { return run_prepared(r.call, xs, r.scalar); }

/// A check's one all-reduce (see the file comment): whether every rank may replay its slot's call.
/// Every call that reaches it takes part, a first call and a failed fold too (they vote no), so a
/// rank that would replay and one that must agree meet in the same collective, then agree together.
inline bool still_agreed(const Replay& r, bool hit, const notation::ExpressionView& e, at::TensorList xs,
                         const Mesh& mesh) {
  const bool mine = hit && r.mode == ReplayMode::check && matches(r, e, xs) && !has_pending(mesh.comm());
  return comm::still_agreed(mine, r.fingerprint, mesh.comm());  // a no vote decides alone
}

/// A quiet call whose operands differ on this rank: keep a pending record and compute what the
/// prepared steps give on these operands (or NaN of the prepared shape when they cannot).
inline at::Tensor run_deferred(const Replay& r, const notation::ExpressionView& e, at::TensorList xs,
                               const Mesh& mesh) {
  Pending p{mesh.comm(), r.fingerprint, {}};
  for (std::size_t i = 0; i < xs.size(); ++i) p.infos.push_back(describe_operand(e, i, xs[i]));
  pending().push_back(std::move(p));
  if (xs.size() == r.mine.size()) {
    try {
      return run_replay(r, xs);
    } catch (const std::exception&) {  // the operands cannot be contracted: NaN of the prepared shape
    }
  }
  std::vector<at::Tensor> stand_ins;
  for (std::size_t i = 0; i < r.mine.size(); ++i) {
    const auto& m = r.mine[i];
    const auto shape = r.scalar[i] ? std::vector<std::int64_t>{} : std::vector<std::int64_t>(m.sizes.begin(), m.sizes.begin() + m.ndim);
    const auto dtype = static_cast<at::ScalarType>(m.dtype);
    auto t = at::full(shape, at::isFloatingType(dtype) || at::isComplexType(dtype)
                                 ? std::numeric_limits<double>::quiet_NaN() : 0.0,
                      at::TensorOptions(dtype));
    if (i < xs.size() && xs[i].requires_grad()) t.requires_grad_();
    stand_ins.push_back(std::move(t));
  }
  return run_replay(r, stand_ins);
}

namespace detail {

/// Keeps what `last_plan()` needs to describe `call` (described only when asked), and sets
/// `deferred` to a contraction's gradient groups left to the model. The closure captures only the
/// storage's address (small enough for std::function's inline storage), so a cached call allocates
/// nothing here once the stored source has grown to its notation.
inline void remember_plan(const PreparedCall& call, std::string_view source, const Mesh& mesh,
                          std::int64_t element, std::vector<Group>* deferred) {
  if (const auto* contraction = std::get_if<std::shared_ptr<const ContractionCall>>(&call); contraction && deferred)
    *deferred = (*contraction)->deferred;
  auto& last = einshard::detail::last_plan_storage();
  last.call = call;
  last.mesh = mesh;
  last.element = element;
  last.source.assign(source);
  last.make = [l = &last] { return describe_prepared(l->source, l->call, l->mesh, l->element); };
}

/// A fold replay: runs the call with this rank's verdict armed on its first all-reduce (a rank whose
/// operands differ joins that all-reduce with zeros of the prepared size). The result when every
/// rank matched; none when some rank faulted, on every rank alike.
inline std::optional<at::Tensor> run_folded(const Replay& replay, const notation::ExpressionView& e,
                                            at::TensorList xs, const Mesh& mesh) {
  auto& fold = fold_state();
  const bool ok = matches(replay, e, xs) && !has_pending(mesh.comm());
  fold = {true, ok ? 0 : 1, replay.fingerprint % digits(replay.fold_dtype, mesh.size()), false};
  struct Disarm {
    ~Disarm() { fold_state().armed = false; }
  } disarm;
  try {
    if (ok) return run_replay(replay, xs);
    at::Tensor unused;
    (void)all_reduce_with_header(at::Tensor(), replay.fold_numel, replay.fold_dtype, 1, fold.check,
                                 replay.fold_comm, unused);
  } catch (const FoldFailed&) {
  }
  return std::nullopt;
}

}  // namespace detail

/// A distributed call, start to end: replays the call prepared at this call site when there is one
/// (quiet or fold, see the file comment), else agrees, fetches (or prepares) the call, runs it and
/// leaves a replay; either way keeps the call for `last_plan()`. `deferred`: set to each input's
/// gradient groups left to the model ([param] operands). `keep` owns `e` for a run-time notation.
inline at::Tensor run_with_replay(const notation::ExpressionView& e, at::TensorList xs, const Options& o,
                                  std::vector<Group>* deferred, std::shared_ptr<const void> keep) {
  const Mesh& mesh = o.mesh;
  const auto element = xs[0].element_size();
  einshard::detail::last_plan_storage().plan.reset();
  const auto remember = [&](const PreparedCall& call) {
    detail::remember_plan(call, e.source, mesh, element, deferred);
  };
  bool hit = false;
  auto& replay = replay_slot(e.source, o, hit);
  if (hit && replay.mode == ReplayMode::quiet) {
    remember(replay.call);
    if (matches(replay, e, xs)) return run_replay(replay, xs);
    return run_deferred(replay, e, xs, mesh);
  }
  if (hit && replay.mode == ReplayMode::fold) {
    if (auto z = detail::run_folded(replay, e, xs, mesh)) {
      remember(replay.call);
      return *std::move(z);
    }
    // Every rank is here: some rank faulted. Agree in full, as a first call does.
  }
  if (still_agreed(replay, hit, e, xs, mesh)) {
    remember(replay.call);
    return run_replay(replay, xs);
  }
  const auto agreement = agree_operands(e, xs, o);
  auto call = prepared(e, agreement, o, element, xs.size() == 1);
  remember_replay(replay, e, std::move(keep), o, agreement, call, element);
  remember(call);
  return run_prepared(call, xs, agreement.scalar);
}

}  // namespace einshard::exec
