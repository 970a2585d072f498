#pragma once
/// @file
/// The local FFTs of einfft: torch's `at::fft_*` (MKL or pocketfft on the CPU, cuFFT on CUDA
/// tensors), and, when einshard is built with FFTW 3 (`EINSHARD_HAS_FFTW`), planned FFTW transforms
/// for the CPU passes that autograd does not record: complex, real to half-complex (r2c) and back
/// (c2r).
///
/// Why FFTW: torch plans nothing ahead on the CPU, and its strided passes (the axis a transpose
/// left outermost) run slower than an `FFTW_MEASURE` plan of the same batched transform
/// (docs/performance.md). FFTW's guru interface takes the strides as they are, so no pass copies the
/// data first, and it writes where it is told: into the caller's output tensor, or in place. Plans are
/// made once per (kind, shapes, strides, axes, direction, precision) and kept for the
/// process; planning measures on scratch arrays, never on the caller's data. Where a gradient is
/// recorded torch's FFT runs, so its autograd (the adjoint transform with torch's norm conventions)
/// stays the one definition of the backward.
///
/// Seam for a direct cuFFT path: a CUDA tensor could run a cached cufftPlanMany here the same way;
/// at::fft_* already dispatches CUDA tensors to cuFFT with torch's own plan cache.

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "einshard/comm/autograd.hpp"
#include "einshard/comm/pool.hpp"
#include "einshard/error.hpp"
#include "einshard/plan/fft.hpp"

#if defined(EINSHARD_HAS_FFTW)
#include <fftw3.h>
#endif

namespace einshard::exec {

/// Which library computes the local complex FFTs that autograd does not record. Process-wide, like
/// comm::algorithms(); read on every call.
enum class LocalFft {
  automatic,  ///< FFTW when einshard is built with it and the tensor suits it, torch otherwise
  torch,      ///< always torch's at::fft_*
};

inline LocalFft& local_fft_backend() {
  static LocalFft backend = LocalFft::automatic;
  return backend;
}

/// How hard FFTW's planner works on each local pass it plans (its planner flags). Process-wide, read
/// when a pass of a new shape is planned; plans already made stay. `EINSHARD_FFTW_PLANNER`
/// (`estimate`, `measure`, `patient`) sets it at start-up.
enum class FftwPlanner {
  estimate,  ///< FFTW_ESTIMATE: no measuring, plans at once, slower passes
  measure,   ///< FFTW_MEASURE (the default): a second or two per large new shape
  patient,   ///< FFTW_PATIENT: minutes per large shape, passes up to 1.6x faster; keep its wisdom
};

inline FftwPlanner& fftw_planner() {
  static FftwPlanner planner = [] {
    const char* v = std::getenv("EINSHARD_FFTW_PLANNER");
    const std::string text = v == nullptr ? "measure" : v;
    if (text == "estimate") return FftwPlanner::estimate;
    if (text == "measure" || text.empty()) return FftwPlanner::measure;
    if (text == "patient") return FftwPlanner::patient;
    throw Error("EINSHARD_FFTW_PLANNER='" + text + "': expected estimate, measure or patient");
  }();
  return planner;
}

/// Whether this build has the FFTW backend.
constexpr bool has_fftw() noexcept {
#if defined(EINSHARD_HAS_FFTW)
  return true;
#else
  return false;
#endif
}

#if defined(EINSHARD_HAS_FFTW)
namespace detail {

/// How an out-of-place complex pass runs: FFTW's own out-of-place plan (`direct`), or a copy of the
/// input into the output's memory and an in-place plan there. The copy is either in the output's
/// order (a strided copy, then a plain in-place plan) or, when both layouts are dense, in the
/// input's order (a plain copy, then an in-place plan that reorders as it transforms).
enum class FftwCopy { direct, output_order, input_order };

/// The route every new plan takes (tests), or none: planning times the routes and keeps the fastest.
inline std::optional<FftwCopy>& fftw_forced_route() {
  static std::optional<FftwCopy> forced;
  return forced;
}

/// The three transform kinds FFTW plans for einfft: complex to complex, real to half-complex
/// (r2c, the last transformed axis halved to n/2+1) and back (c2r).
enum class FftwKind { c2c, r2c, c2r };

template <class Real>
struct Fftw;

template <>
struct Fftw<double> {
  using Complex = fftw_complex;
  using Plan = fftw_plan;
  static Plan plan(FftwKind kind, int rank, const fftw_iodim64* dims, int howmany, const fftw_iodim64* batch,
                   void* in, void* out, int sign, unsigned flags) {
    switch (kind) {
      case FftwKind::c2c:
        return fftw_plan_guru64_dft(rank, dims, howmany, batch, static_cast<Complex*>(in), static_cast<Complex*>(out),
                                    sign, flags);
      case FftwKind::r2c:
        return fftw_plan_guru64_dft_r2c(rank, dims, howmany, batch, static_cast<double*>(in),
                                        static_cast<Complex*>(out), flags);
      case FftwKind::c2r:
        return fftw_plan_guru64_dft_c2r(rank, dims, howmany, batch, static_cast<Complex*>(in),
                                        static_cast<double*>(out), flags);
    }
    return nullptr;
  }
  static void execute(FftwKind kind, Plan p, void* in, void* out) {
    switch (kind) {
      case FftwKind::c2c: fftw_execute_dft(p, static_cast<Complex*>(in), static_cast<Complex*>(out)); break;
      case FftwKind::r2c: fftw_execute_dft_r2c(p, static_cast<double*>(in), static_cast<Complex*>(out)); break;
      case FftwKind::c2r: fftw_execute_dft_c2r(p, static_cast<Complex*>(in), static_cast<double*>(out)); break;
    }
  }
  static void* alloc(std::size_t bytes) { return fftw_malloc(bytes); }
  static void free(void* p) { fftw_free(p); }
  static int alignment(void* p) { return fftw_alignment_of(static_cast<double*>(p)); }
  static char* export_wisdom() { return fftw_export_wisdom_to_string(); }
  static void destroy(Plan p) { fftw_destroy_plan(p); }
  static bool import_wisdom(const char* text) { return fftw_import_wisdom_from_string(text) != 0; }
};

template <>
struct Fftw<float> {
  using Complex = fftwf_complex;
  using Plan = fftwf_plan;
  static Plan plan(FftwKind kind, int rank, const fftw_iodim64* dims, int howmany, const fftw_iodim64* batch,
                   void* in, void* out, int sign, unsigned flags) {
    switch (kind) {
      case FftwKind::c2c:
        return fftwf_plan_guru64_dft(rank, dims, howmany, batch, static_cast<Complex*>(in),
                                     static_cast<Complex*>(out), sign, flags);
      case FftwKind::r2c:
        return fftwf_plan_guru64_dft_r2c(rank, dims, howmany, batch, static_cast<float*>(in),
                                         static_cast<Complex*>(out), flags);
      case FftwKind::c2r:
        return fftwf_plan_guru64_dft_c2r(rank, dims, howmany, batch, static_cast<Complex*>(in),
                                         static_cast<float*>(out), flags);
    }
    return nullptr;
  }
  static void execute(FftwKind kind, Plan p, void* in, void* out) {
    switch (kind) {
      case FftwKind::c2c: fftwf_execute_dft(p, static_cast<Complex*>(in), static_cast<Complex*>(out)); break;
      case FftwKind::r2c: fftwf_execute_dft_r2c(p, static_cast<float*>(in), static_cast<Complex*>(out)); break;
      case FftwKind::c2r: fftwf_execute_dft_c2r(p, static_cast<Complex*>(in), static_cast<float*>(out)); break;
    }
  }
  static void* alloc(std::size_t bytes) { return fftwf_malloc(bytes); }
  static void free(void* p) { fftwf_free(p); }
  static int alignment(void* p) { return fftwf_alignment_of(static_cast<float*>(p)); }
  static char* export_wisdom() { return fftwf_export_wisdom_to_string(); }
  static void destroy(Plan p) { fftwf_destroy_plan(p); }
  static bool import_wisdom(const char* text) { return fftwf_import_wisdom_from_string(text) != 0; }
};

/// The elements a tensor of `sizes` and `strides` reaches (its span in memory).
inline std::int64_t span_of(at::IntArrayRef sizes, at::IntArrayRef strides) {
  std::int64_t span = 1;
  for (std::size_t d = 0; d < sizes.size(); ++d) span += (sizes[d] - 1) * strides[d];
  return span;
}

/// The process's FFTW plans of one precision. FFTW's planner is not thread-safe, so planning holds
/// the mutex; executing a plan on new arrays is (fftw_execute_dft and its r2c/c2r forms).
template <class Real>
class FftwPlans {
  using Api = Fftw<Real>;

 public:
  /// kind, sign, in place, planner, forced route (-1: timed), input sizes and strides, output sizes and strides,
  /// transformed dims (in order). An out-of-place plan must never run in place (FFTW may use its
  /// output as scratch).
  using Key = std::tuple<int, int, bool, int, int, std::vector<std::int64_t>, std::vector<std::int64_t>,
                         std::vector<std::int64_t>, std::vector<std::int64_t>, std::vector<std::int64_t>>;

  static FftwPlans& instance() {
    static FftwPlans plans;
    return plans;
  }
  FftwPlans(const FftwPlans&) = delete;
  FftwPlans& operator=(const FftwPlans&) = delete;

  /// Runs `f` holding the planner's lock: FFTW's planner, which wisdom also reaches, is not
  /// thread-safe.
  template <class F>
  auto locked(F&& f) {
    std::lock_guard lock(mutex_);
    return f();
  }

  /// How an out-of-place transform runs (FftwCopy). FFTW's out-of-place plans that keep their
  /// input (c2c's default) are up to 2.6x slower than a copy plus an in-place plan when the
  /// transform runs along a strided axis, and faster along the contiguous one; an in-place plan that
  /// reorders is faster than a strided copy for square blocks and 3x slower for others (docs/fft.md).
  /// So planning times each route on its scratch arrays and keeps the fastest.
  struct Route {
    typename Api::Plan plan = nullptr;
    FftwCopy copy = FftwCopy::direct;
  };

  /// Where a copy route copies the input: the output itself, or its memory in the input's order.
  static at::Tensor copy_target(FftwCopy copy, const at::Tensor& x, const at::Tensor& y) {
    return copy == FftwCopy::input_order ? y.as_strided(x.sizes(), x.strides()) : y;
  }

  /// The route of a transform over `dims` (the half axis last for r2c and c2r) from `x` into `y`
  /// (their sizes and strides; in place when they share data), for data with the alignment
  /// fftw_malloc gives (callers check theirs); a null plan if FFTW cannot plan it.
  Route get(FftwKind kind, const at::Tensor& x, const at::Tensor& y, at::IntArrayRef dims, int sign) {
    const bool in_place = x.data_ptr() == y.data_ptr();
    const auto planner = fftw_planner();
    const auto routing = fftw_forced_route();
    Key key{static_cast<int>(kind), sign, in_place, static_cast<int>(planner),
            routing ? static_cast<int>(*routing) : -1,
            x.sizes().vec(), x.strides().vec(), y.sizes().vec(), y.strides().vec(), dims.vec()};
    std::lock_guard lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    const unsigned flags = planner == FftwPlanner::estimate  ? FFTW_ESTIMATE
                           : planner == FftwPlanner::patient ? FFTW_PATIENT
                                                             : FFTW_MEASURE;
    const auto in_bytes = static_cast<std::size_t>(span_of(x.sizes(), x.strides()) * x.element_size());
    const auto out_bytes = static_cast<std::size_t>(span_of(y.sizes(), y.strides()) * y.element_size());
    // Planning measures on scratch arrays: never on the caller's data.
    auto* in = Api::alloc(in_place ? std::max(in_bytes, out_bytes) : in_bytes);
    auto* out = in_place ? in : Api::alloc(out_bytes);
    Route route{plan(kind, x, y, dims, in, out, sign, flags)};
    if (!in_place && kind == FftwKind::c2c && route.plan != nullptr && routing != FftwCopy::direct &&
        // Without measuring (estimate) the direct plan stands.
        (routing || planner != FftwPlanner::estimate)) {
      const auto scratch_in = at::from_blob(in, x.sizes(), x.strides(), x.options());
      const auto scratch_out = at::from_blob(out, y.sizes(), y.strides(), y.options());
      std::memset(in, 0, in_bytes);
      double best = routing ? 0 : fastest([&] { Api::execute(kind, route.plan, in, out); });
      const bool reorder = x.strides() != y.strides() && x.is_non_overlapping_and_dense() &&
                           y.is_non_overlapping_and_dense();
      for (const auto copy : {FftwCopy::output_order, FftwCopy::input_order}) {
        const bool forced = routing == copy;
        if ((routing && !forced) || (copy == FftwCopy::input_order && !reorder)) continue;
        const auto target = copy_target(copy, scratch_in, scratch_out);
        const auto copying = plan(kind, target, y, dims, out, out, sign, flags);
        if (copying == nullptr) continue;
        const double t = forced ? 0 : fastest([&] {
          target.copy_(scratch_in);
          Api::execute(kind, copying, out, out);
        });
        if (forced || t < best) {
          Api::destroy(route.plan);  // a plan not kept would leak (FFTW holds no reference to it)
          route = {copying, copy};
          best = t;
        } else {
          Api::destroy(copying);
        }
      }
    }
    Api::free(in);
    if (!in_place) Api::free(out);
    plans_.emplace(std::move(key), route);
    return route;
  }

 private:
  FftwPlans() = default;

  static typename Api::Plan plan(FftwKind kind, const at::Tensor& x, const at::Tensor& y, at::IntArrayRef dims,
                                 void* in, void* out, int sign, unsigned flags) {
    // FFTW's logical length of an axis is the real one: the input's for r2c, the output's for c2r.
    const auto& real = kind == FftwKind::c2r ? y : x;
    std::vector<fftw_iodim64> along, batch;
    for (auto d : dims) along.push_back({real.size(d), x.stride(d), y.stride(d)});
    for (std::int64_t d = 0; d < x.dim(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end() && x.size(d) > 1)
        batch.push_back({x.size(d), x.stride(d), y.stride(d)});
    return Api::plan(kind, static_cast<int>(along.size()), along.data(), static_cast<int>(batch.size()), batch.data(),
                     in, out, sign, flags);
  }

  /// The shorter of two timed runs of `f`, in seconds.
  template <class F>
  static double fastest(F&& f) {
    double best = 0;
    for (int i = 0; i < 2; ++i) {
      const auto start = std::chrono::steady_clock::now();
      f();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = i == 0 ? t : std::min(best, t);
    }
    return best;
  }

  std::mutex mutex_;
  std::map<Key, Route> plans_;
};

/// FFTW's unnormalized transform (sign −1 forward) of `x` over `dims` into `y` (in place when they
/// are the same tensor); false, with nothing written, when FFTW does not take these tensors (CPU,
/// non-conjugate, non-empty, aligned as fftw_malloc aligns).
template <class Real>
bool fftw_transform(FftwKind kind, const at::Tensor& x, const at::Tensor& y, at::IntArrayRef dims, bool inverse) {
  using Api = Fftw<Real>;
  if (x.numel() == 0 || x.is_conj() || y.is_conj() || Api::alignment(x.data_ptr()) != 0 ||
      Api::alignment(y.data_ptr()) != 0)
    return false;
  const auto route = FftwPlans<Real>::instance().get(kind, x, y, dims, inverse ? FFTW_BACKWARD : FFTW_FORWARD);
  if (route.plan == nullptr) return false;
  if (route.copy != FftwCopy::direct) {
    FftwPlans<Real>::copy_target(route.copy, x, y).copy_(x);
    Api::execute(kind, route.plan, y.data_ptr(), y.data_ptr());
  } else {
    Api::execute(kind, route.plan, x.data_ptr(), y.data_ptr());
  }
  return true;
}

/// The local transform on FFTW, or nothing when FFTW does not take it (see local_fft). `into`, when
/// given, is the destination (the output's shape and dtype, checked by the caller).
inline std::optional<at::Tensor> fftw_fft(const at::Tensor& x, plan::FftOp op, at::IntArrayRef dims,
                                          at::IntArrayRef lengths, bool owned, const at::Tensor& into, double scale) {
  const bool complex_in = x.scalar_type() == at::kComplexDouble || x.scalar_type() == at::kComplexFloat;
  const bool real_in = x.scalar_type() == at::kDouble || x.scalar_type() == at::kFloat;
  FftwKind kind = FftwKind::c2c;
  std::vector<std::int64_t> out_sizes = x.sizes().vec();
  switch (op) {
    case plan::FftOp::forward:
    case plan::FftOp::inverse:
      if (!complex_in) return std::nullopt;
      break;
    case plan::FftOp::real_forward:
      if (!real_in) return std::nullopt;
      kind = FftwKind::r2c;
      out_sizes[static_cast<std::size_t>(dims.back())] = x.size(dims.back()) / 2 + 1;
      break;
    case plan::FftOp::real_inverse: {
      if (!complex_in) return std::nullopt;
      kind = FftwKind::c2r;
      for (std::size_t i = 0; i < dims.size(); ++i) {
        const auto d = static_cast<std::size_t>(dims[i]);
        // FFTW's c2r reads exactly n/2+1 bins of the half axis and the other axes whole; torch's
        // cropping and zero padding to other lengths stay torch's.
        const bool half = i + 1 == dims.size();
        if (half ? x.size(dims[i]) != lengths[i] / 2 + 1 : x.size(dims[i]) != lengths[i]) return std::nullopt;
        out_sizes[d] = lengths[i];
      }
      break;
    }
  }
  const auto complex = complex_in ? x.scalar_type() : c10::toComplexType(x.scalar_type());
  const auto out_dtype = kind == FftwKind::c2r ? c10::toRealValueType(complex) : complex;
  // c2r overwrites its input (FFTW_DESTROY_INPUT, the only choice for more than one axis), so it
  // works on a copy unless the input is the caller's temporary. The copy carries the norm's scale
  // (the transform is linear): one pass over the data instead of a copy and a scaling.
  auto source = x;
  bool scaled = scale == 1;
  if (kind == FftwKind::c2r && !owned) {
    source = comm::pooled_empty(x.sizes(), x.options());
    if (scaled) source.copy_(x);
    else at::mul_out(source, x, at::scalar_tensor(scale, at::TensorOptions().dtype(c10::toRealValueType(x.scalar_type()))));
    scaled = true;
  }
  source = source.resolve_conj();
  // The destination: `into` when FFTW can write there (not overlapping the input unless it is the
  // input itself, for a pass in place), the owned input for a complex pass, else a pooled block.
  // In place also when `into` is the source's own memory in another order (a transposed output
  // written over its input, as FFTW_MPI_TRANSPOSED_OUT does in place): FFTW's in-place plans take
  // different input and output strides, and such a plan ran 0.8x a plain in-place one at 256³.
  const bool same_memory = into.defined() && into.data_ptr() == source.data_ptr();
  const bool permuted_in_place = same_memory && kind == FftwKind::c2c && into.strides() != source.strides() &&
                                 into.is_non_overlapping_and_dense() &&
                                 source.is_non_overlapping_and_dense();
  const bool into_fits = into.defined() && into.sizes() == at::IntArrayRef(out_sizes) &&
                         into.scalar_type() == out_dtype && !into.is_conj() &&
                         (same_memory ? kind == FftwKind::c2c && (into.strides() == source.strides() || permuted_in_place)
                                      : !into.is_alias_of(source));
  // Complex passes go in tensor order (FFTW's plans for them are measured that way); the real
  // ones keep the half axis last.
  std::vector<std::int64_t> order = dims.vec();
  if (kind == FftwKind::c2c) std::sort(order.begin(), order.end());
  const auto transform = [&](const at::Tensor& to) {
    const bool inverse = op == plan::FftOp::inverse || kind == FftwKind::c2r;
    return complex == at::kComplexDouble ? fftw_transform<double>(kind, source, to, order, inverse)
                                         : fftw_transform<float>(kind, source, to, order, inverse);
  };
  at::Tensor out;
  if (into_fits) out = into;
  else if (kind == FftwKind::c2c && owned && source.is_same(x)) out = x;
  else out = comm::pooled_empty(out_sizes, x.options().dtype(out_dtype));
  if (!transform(out)) {
    // FFTW plans no in-place transform between these two orders: out of place, then a copy.
    if (!(into_fits && permuted_in_place)) return std::nullopt;
    out = comm::pooled_empty(out_sizes, x.options().dtype(out_dtype));
    if (!transform(out)) return std::nullopt;
  }
  if (!scaled) out.mul_(scale);
  return out;
}

/// This precision's wisdom, as FFTW writes it.
template <class Real>
std::string wisdom_text() {
  return FftwPlans<Real>::instance().locked([] {
    char* text = Fftw<Real>::export_wisdom();
    std::string kept = text == nullptr ? "" : text;
    Fftw<Real>::free(text);
    return kept;
  });
}

template <class Real>
bool load_wisdom_text(const std::string& text) {
  return FftwPlans<Real>::instance().locked([&] { return Fftw<Real>::import_wisdom(text.c_str()); });
}

}  // namespace detail
#endif

/// Writes the process's FFTW wisdom (what its planner learned of every pass planned so far, float64
/// and float32) to `path`, so that a later run's `load_fftw_wisdom` plans those passes at once:
/// how `FftwPlanner::patient` pays off. One rank writes it; every rank may load it.
inline void save_fftw_wisdom(const std::string& path) {
#if defined(EINSHARD_HAS_FFTW)
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << detail::wisdom_text<double>() << detail::wisdom_text<float>();
  if (!file.flush())
    throw Error("save_fftw_wisdom: cannot write '" + path + "'");
#else
  throw Error("save_fftw_wisdom('" + path + "'): einshard was built without FFTW (EINSHARD_HAS_FFTW); "
              "install FFTW 3 (Debian: libfftw3-dev) and rebuild");
#endif
}

/// Reads wisdom `save_fftw_wisdom` wrote (or FFTW's own `fftw-wisdom` tool, double and float
/// wisdom in one file) into the process's planner; passes planned afterwards use it. A file that
/// cannot be read or holds no FFTW wisdom raises `Error`.
inline void load_fftw_wisdom(const std::string& path) {
#if defined(EINSHARD_HAS_FFTW)
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error("load_fftw_wisdom: cannot read '" + path + "'");
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  // FFTW reads one precision's wisdom per call: the float32 part begins at its "(fftw-... fftwf_wisdom".
  auto split = text.find("fftwf_wisdom");
  split = split == std::string::npos ? text.size() : text.rfind('(', split);
  if (split == std::string::npos) split = 0;
  const auto first = text.substr(0, split);
  const auto second = text.substr(split);
  const bool has_double = first.find("fftw_wisdom") != std::string::npos;
  const bool ok = (has_double || !second.empty()) && (!has_double || detail::load_wisdom_text<double>(first)) &&
                  (second.empty() || detail::load_wisdom_text<float>(second));
  if (!ok) throw Error("load_fftw_wisdom: '" + path + "' holds no FFTW wisdom this FFTW can read");
#else
  throw Error("load_fftw_wisdom('" + path + "'): einshard was built without FFTW (EINSHARD_HAS_FFTW); "
              "install FFTW 3 (Debian: libfftw3-dev) and rebuild");
#endif
}

/// The local FFT over `dims` of `x` (c2r: `lengths` are the output lengths of `dims`), with torch's
/// norm conventions. `owned`: `x` is a temporary of the caller's that nothing else refers to, so
/// FFTW may transform it in place (a fresh output costs its page faults, a large share of a big
/// transform, docs/performance.md). `into`: where to write the result (the output's shape and dtype;
/// it may be `x` itself for a complex pass, which then runs in place); the result is returned.
/// Where autograd records, torch's FFT runs, so its autograd (the adjoint transform with torch's
/// norm conventions) stays the one definition of the backward.
inline at::Tensor local_fft(const at::Tensor& x, plan::FftOp op, at::IntArrayRef dims, at::IntArrayRef lengths,
                            const std::optional<std::string>& norm, bool owned = false, const at::Tensor& into = {}) {
#if defined(EINSHARD_HAS_FFTW)
  if (local_fft_backend() == LocalFft::automatic && !comm::records(x) && x.device().is_cpu() &&
      (!into.defined() || !comm::records(into))) {
    const bool inverse = op == plan::FftOp::inverse || op == plan::FftOp::real_inverse;
    double n = 1;
    for (std::size_t i = 0; i < dims.size(); ++i)
      n *= static_cast<double>(op == plan::FftOp::real_inverse ? lengths[i] : x.size(dims[i]));
    const auto mode = norm.value_or("backward");
    const double scale = mode == "ortho" ? 1 / std::sqrt(n) : (mode == "forward") != inverse ? 1 / n : 1;
    if (auto y = detail::fftw_fft(x, op, dims, lengths, owned, into, scale)) {
      if (into.defined() && !y->is_same(into)) return into.copy_(*y);
      return *y;
    }
  }
#endif
  std::optional<c10::string_view> n;
  if (norm) n = c10::string_view(norm->data(), norm->size());
  at::Tensor y;
  switch (op) {
    case plan::FftOp::forward: y = at::fft_fftn(x, std::nullopt, dims, n); break;
    case plan::FftOp::inverse: y = at::fft_ifftn(x, std::nullopt, dims, n); break;
    case plan::FftOp::real_forward: y = at::fft_rfftn(x, std::nullopt, dims, n); break;
    case plan::FftOp::real_inverse: y = at::fft_irfftn(x, lengths, dims, n); break;
  }
  return into.defined() ? into.copy_(y) : y;
}

}  // namespace einshard::exec
