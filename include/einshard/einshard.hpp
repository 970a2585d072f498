#pragma once
/// @file
/// Umbrella header of the tensor notation: `#include <einshard/einshard.hpp>`.

#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/model.hpp"
#include "einshard/notation.hpp"
#include "einshard/notation/families.hpp"
#include "einshard/ops/candidates.hpp"
#include "einshard/ops/einshard.hpp"
#include "einshard/ops/einshard_like.hpp"
#include "einshard/ops/conv.hpp"
#include "einshard/ops/halo.hpp"
#include "einshard/ops/roll.hpp"
#include "einshard/ops/window.hpp"
#include "einshard/ops/fft.hpp"
#include "einshard/options.hpp"
#include "einshard/plan/policy_scope.hpp"
#include "einshard/shapes.hpp"
#include "einshard/version.hpp"
