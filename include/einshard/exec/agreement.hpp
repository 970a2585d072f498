#pragma once
/// @file
/// The executor's names for the metadata agreement of `comm/agreement.hpp` (shared with the sparse
/// part): the executor's code speaks of them unqualified.

#include "einshard/comm/agreement.hpp"

namespace einshard::exec {
using comm::Agreed;
using comm::agree;
using comm::check_agreed;
using comm::gather_infos;
using comm::describe;
using comm::LocalFault;
using comm::RankInfo;
}  // namespace einshard::exec
