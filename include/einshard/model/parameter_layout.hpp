#pragma once
/// @file
/// Registering the layouts of a model's parameters: one tensor, a module's parameters by dotted
/// name, and the usual layers (Linear, Conv1d/2d/3d and their transposes, LayerNorm, BatchNorm,
/// GroupNorm). The module functions are templates over anything with LibTorch's
/// `named_parameters()`, so this header needs only ATen; every call validates every parameter
/// before it attaches any.

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "einshard/error.hpp"
#include "einshard/mesh.hpp"
#include "einshard/model/parameter_registry.hpp"
#include "einshard/model/parameter_state.hpp"

namespace einshard {

/// `{.mesh = mesh, .grad = "dp", .init_sync = "dp"}`. grad: `none` (the default on a layout),
/// groups (`dp`, `dp-sp`, `dp,sp`) with an optional `:async|:ddp|:external`, or `async`, `ddp`,
/// `external` to infer later. init_sync: `none`, `external` or groups; absent, every mesh
/// dimension the layout does not shard.
struct ParameterOptions {
  Mesh mesh{};
  std::optional<std::string> grad{};
  std::optional<std::string> init_sync{};
};

namespace detail {

template <class M>
concept HasParameters = requires(M& m) { m.named_parameters(true); };

inline const MeshShape& shape_of(const Mesh& mesh) {
  static const MeshShape none;
  return mesh ? mesh.shape() : none;
}

inline std::optional<std::string_view> view_of(const std::optional<std::string>& s) {
  return s ? std::optional<std::string_view>(*s) : std::nullopt;
}

inline ParameterState layout_state(std::string_view layout, const Mesh& mesh,
                                   const std::optional<std::string>& grad,
                                   const std::optional<std::string>& init_sync, std::string_view op) {
  return make_parameter_state(layout, shape_of(mesh), view_of(grad), view_of(init_sync), op);
}

/// The parameter `name` of `module` (a dotted name: `block.fc1.weight`), or an Error that lists
/// what the module has.
template <HasParameters M>
at::Tensor parameter_named(M& module, std::string_view name, std::string_view op) {
  const auto params = module.named_parameters(true);
  if (const auto* p = params.find(std::string(name))) return *p;
  std::string have;
  for (const auto& item : params) have += (have.empty() ? "" : ", ") + item.key();
  throw Error(std::string(op) + ": the module has no parameter '" + std::string(name) +
              "' (it has " + (have.empty() ? std::string("none") : have) + ")");
}

}  // namespace detail

/// Attaches the layout `layout` (`"out/tp in"`) with its gradient and init-sync groups to `w`,
/// merged with any state `w` already has.
inline void register_parameter_layout(const at::Tensor& w, std::string_view layout,
                                      const ParameterOptions& o = {}) {
  constexpr std::string_view op = "register_parameter_layout";
  detail::ParameterRegistry::instance().attach(
      {{w, detail::layout_state(layout, o.mesh, o.grad, o.init_sync, op)}}, op);
}

/// Layouts by dotted parameter name (`{{"fc1.weight", "out/tp in"}, {"fc1.bias", "out/tp"}}`),
/// all with the options' gradient and init-sync values; all-or-nothing.
template <detail::HasParameters M>
void register_module_parameter_layouts(M& module, const std::map<std::string, std::string>& layouts,
                                       const ParameterOptions& o = {}) {
  constexpr std::string_view op = "register_module_parameter_layouts";
  std::vector<std::pair<at::Tensor, ParameterState>> batch;
  for (const auto& [name, layout] : layouts) {
    auto s = detail::layout_state(layout, o.mesh, o.grad, o.init_sync, op);
    s.source = std::string(op) + " '" + name + "'";
    batch.emplace_back(detail::parameter_named(module, name, op), std::move(s));
  }
  detail::ParameterRegistry::instance().attach(batch, op);
}

/// `{.weight = "out/tp in", .bias = "out/tp", .grad = "dp"}`. Without `.bias`, the bias takes the
/// weight's first axis (with its sharding).
struct LinearLayouts {
  std::string weight = "out in";
  std::optional<std::string> bias{};
  std::optional<std::string> grad{};
  std::optional<std::string> init_sync{};
};

/// Convolutions: without `.weight`, `out in k`, `out in kh kw` or `out in kd kh kw` (transposed:
/// `in out ...`, the order of their weights); the bias takes the output-channel axis.
struct ConvLayouts {
  std::optional<std::string> weight{};
  std::optional<std::string> bias{};
  std::optional<std::string> grad{};
  std::optional<std::string> init_sync{};
};

/// Norms (LayerNorm, BatchNorm, GroupNorm, ...): one layout for weight and bias.
struct NormLayouts {
  std::string layout = "c";
  std::optional<std::string> grad{};
  std::optional<std::string> init_sync{};
};

namespace detail {

/// The first axis of a layout with its sharding ("out/tp in" -> "out/tp").
inline std::string first_axis(std::string_view layout, const Mesh& mesh, std::string_view op) {
  const auto s = parse_layout(layout, shape_of(mesh), op);
  if (s.axes.empty() || (s.ellipsis && s.ellipsis_at == 0))
    throw Error(std::string(op) + ": cannot derive a bias layout from '" + std::string(layout) +
                "'; give .bias");
  const auto& a = s.axes.front();
  return a.axis + (a.group.empty() ? "" : "/" + a.group.name());
}

/// The axis of a layout at position `i` ("in out/tp k" at 1 -> "out/tp").
inline std::string axis_at(std::string_view layout, std::size_t i, const Mesh& mesh, std::string_view op) {
  const auto s = parse_layout(layout, shape_of(mesh), op);
  if (s.ellipsis || i >= s.axes.size())
    throw Error(std::string(op) + ": cannot derive a bias layout from '" + std::string(layout) +
                "'; give .bias");
  const auto& a = s.axes[i];
  return a.axis + (a.group.empty() ? "" : "/" + a.group.name());
}

inline void attach_pair(const at::Tensor& weight, const std::string& wl, const at::Tensor& bias,
                        const std::optional<std::string>& bl, const std::optional<std::string>& grad,
                        const std::optional<std::string>& init_sync, const Mesh& mesh,
                        std::string_view op) {
  std::vector<std::pair<at::Tensor, ParameterState>> batch;
  if (weight.defined()) batch.emplace_back(weight, layout_state(wl, mesh, grad, init_sync, op));
  if (bias.defined()) {
    if (!bl) throw Error(std::string(op) + ": the module has a bias; expected a layout for it");
    batch.emplace_back(bias, layout_state(*bl, mesh, grad, init_sync, op));
  }
  ParameterRegistry::instance().attach(batch, op);
}

}  // namespace detail

/// A `torch::nn::LinearImpl` (or any module with `weight` and `bias`).
template <class M>
void register_linear_parameters(M& linear, const LinearLayouts& l, const Mesh& mesh) {
  constexpr std::string_view op = "register_linear_parameters";
  const auto bias = l.bias ? l.bias : std::optional(detail::first_axis(l.weight, mesh, op));
  detail::attach_pair(linear.weight, l.weight, linear.bias, bias, l.grad, l.init_sync, mesh, op);
}

/// A `torch::nn::Conv{1,2,3}dImpl` or `ConvTranspose{1,2,3}dImpl`, grouped or not. A layout only
/// labels the local weight's dimensions, so grouped convolutions need nothing more: a rank holding
/// output channels `o/tp` of a grouped convolution holds whole groups when its local module was
/// built with its share of the groups (the weight's second dimension is `in / groups` either way).
template <class M>
void register_conv_parameters(M& conv, const ConvLayouts& l, const Mesh& mesh) {
  constexpr std::string_view op = "register_conv_parameters";
  bool transposed = false;
  if constexpr (requires { conv.options.transposed(); }) transposed = conv.options.transposed();
  std::string weight;
  if (l.weight) {
    weight = *l.weight;
  } else {
    const auto nd = conv.weight.dim() - 2;
    if (nd < 1 || nd > 3)
      throw Error(std::string(op) + ": expected a convolution weight of 3 to 5 dimensions, got " +
                  std::to_string(conv.weight.dim()));
    static const char* spatial[] = {"k", "kh kw", "kd kh kw"};
    weight = std::string(transposed ? "in out " : "out in ") + spatial[nd - 1];
  }
  const auto bias = l.bias ? l.bias : std::optional(detail::axis_at(weight, transposed ? 1 : 0, mesh, op));
  detail::attach_pair(conv.weight, weight, conv.bias, bias, l.grad, l.init_sync, mesh, op);
}

/// A `torch::nn::LayerNormImpl`, `BatchNorm{1,2,3}dImpl`, `GroupNormImpl`, ...: weight and bias
/// (when affine). A sequence-parallel norm's weight is replicated over the sequence shards, and
/// its gradient partial over them: `{.layout = "c", .grad = "sp"}`.
template <class M>
void register_norm_parameters(M& norm, const NormLayouts& l, const Mesh& mesh) {
  constexpr std::string_view op = "register_norm_parameters";
  detail::attach_pair(norm.weight, l.layout, norm.bias, std::optional(l.layout), l.grad, l.init_sync,
                      mesh, op);
}

struct NamedParameterState {
  std::string name;  ///< dotted, as `named_parameters()` spells it
  at::Tensor tensor;
  std::shared_ptr<const ParameterState> state;
};

/// Every registered parameter of `module` with its state, in `named_parameters()` order.
template <detail::HasParameters M>
std::vector<NamedParameterState> parameter_states(M& module) {
  std::vector<NamedParameterState> out;
  for (const auto& item : module.named_parameters(true))
    if (auto s = find_parameter_state(item.value())) out.push_back({item.key(), item.value(), std::move(s)});
  return out;
}

namespace detail {

/// What is wrong with `states` for a reduction on a mesh of shape `shape`: a different mesh, or
/// (with `refuse_pending`) gradient groups still to be inferred; "" when nothing.
inline std::string state_problems(const std::vector<NamedParameterState>& states, const MeshShape& shape,
                                  bool refuse_pending) {
  std::string bad;
  for (const auto& [name, t, s] : states) {
    if (s->mesh.names != shape.names || s->mesh.sizes != shape.sizes)
      bad += "; '" + name + "' is registered on a different mesh (" + s->mesh.joined_names() + ")";
    else if (refuse_pending && s->pending())
      bad += "; '" + name + "' ('" + s->spec() +
             "') has gradient groups pending inference (use it in a [param] notation first, or "
             "register it with .grad = <groups>)";
  }
  return bad.empty() ? bad : bad.substr(2);
}

}  // namespace detail

/// Checks every registered parameter of `module` against `mesh`; with `allow_pending = false`,
/// also that no gradient groups are still to be inferred. Names every offender.
template <detail::HasParameters M>
void validate_parameter_states(M& module, const Mesh& mesh, bool allow_pending = false) {
  const auto bad = detail::state_problems(parameter_states(module), mesh.shape(), !allow_pending);
  if (!bad.empty()) throw Error("validate_parameter_states: " + bad);
}

}  // namespace einshard
