#pragma once
/// @file
/// Umbrella header of sharded models: parameter states and their registration, shard metadata,
/// init/gradient reductions and the DDP-style hooks (docs/models.md).

#include "einshard/model/grad_reduction.hpp"
#include "einshard/model/parameter_layout.hpp"
#include "einshard/model/parameter_registry.hpp"
#include "einshard/model/parameter_state.hpp"
#include "einshard/model/shard_metadata.hpp"
