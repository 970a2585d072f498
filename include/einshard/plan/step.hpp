#pragma once
/// @file
/// The vocabulary of distributed plans: each step is a forward communication paired with its
/// backward (the pairs of the original, reference §4), so gradients follow by construction.

#include <cstdint>
#include <string>
#include <vector>

#include "einshard/plan/layout.hpp"

namespace einshard::plan {

enum class StepKind {
  all_reduce,         ///< partial -> whole: all-reduce;          backward identity
  reduce_scatter,     ///< partial -> shard: reduce-scatter;      backward all-gather
  add_partial,        ///< whole -> partial: identity;            backward all-reduce
  gather_to_partial,  ///< shard -> partial: all-gather;          backward reduce-scatter
  split,              ///< whole -> shard: local slice;           backward all-gather
  gather,             ///< shard -> whole: all-gather;            backward local slice
  redistribute,       ///< any layout change: one all-to-all(v);  backward the reverse one
  permute,            ///< axis order: local;                     backward inverse permutation
};

/// The names the original uses for these pairs (plans and traces read the same in both).
constexpr const char* step_name(StepKind k) noexcept {
  switch (k) {
    case StepKind::all_reduce: return "allreduce_forward_identity_backward";
    case StepKind::reduce_scatter: return "reducescatter_forward_allgather_backward";
    case StepKind::add_partial: return "identity_forward_allreduce_backward";
    case StepKind::gather_to_partial: return "allgather_forward_reducescatter_backward";
    case StepKind::split: return "split_forward_allgather_backward";
    case StepKind::gather: return "allgather_forward_split_backward";
    case StepKind::redistribute: return "alltoall_repartition";
    case StepKind::permute: return "permute";
  }
  return "?";
}

struct Step {
  StepKind kind;
  Group group;        ///< the mesh group it communicates over (empty for local steps and redistribute)
  std::string axis;   ///< the axis it splits, gathers or scatters into ("" otherwise)
  Layout before, after;
  std::vector<std::int64_t> permutation;  ///< permute: output dim i is input dim permutation[i]
};

}  // namespace einshard::plan
