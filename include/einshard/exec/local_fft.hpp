#pragma once
/// @file
/// The local FFTs of einfft: torch's `at::fft_*` (MKL or pocketfft on the CPU, cuFFT on CUDA
/// tensors), and, when einshard is built with FFTW 3 (`EINSHARD_HAS_FFTW`), planned FFTW transforms
/// for the complex CPU passes that autograd does not record.
///
/// Why FFTW: torch plans nothing ahead on the CPU, and its strided passes (the axis a transpose
/// left outermost) run slower than an `FFTW_MEASURE` plan of the same batched transform
/// (docs/performance.md). FFTW's guru interface takes the strides as they are, so no pass copies the
/// data first. Plans are made once per (shape, strides, axes, direction, precision) and kept for the
/// process; planning measures on scratch arrays, never on the caller's data. Where a gradient is
/// recorded torch's FFT runs, so its autograd (the adjoint transform with torch's norm conventions)
/// stays the one definition of the backward.
///
/// Seam for a direct cuFFT path: a CUDA tensor could run a cached cufftPlanMany here the same way;
/// at::fft_* already dispatches CUDA tensors to cuFFT with torch's own plan cache.

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "einshard/comm/autograd.hpp"
#include "einshard/comm/pool.hpp"
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

template <class Real>
struct Fftw;

template <>
struct Fftw<double> {
  using Complex = fftw_complex;
  using Plan = fftw_plan;
  static Plan plan(int rank, const fftw_iodim64* dims, int howmany, const fftw_iodim64* batch, Complex* in,
                   Complex* out, int sign, unsigned flags) {
    return fftw_plan_guru64_dft(rank, dims, howmany, batch, in, out, sign, flags);
  }
  static void execute(Plan p, Complex* in, Complex* out) { fftw_execute_dft(p, in, out); }
  static Complex* alloc(std::size_t n) { return fftw_alloc_complex(n); }
  static void free(void* p) { fftw_free(p); }
  static int alignment(void* p) { return fftw_alignment_of(static_cast<double*>(p)); }
};

template <>
struct Fftw<float> {
  using Complex = fftwf_complex;
  using Plan = fftwf_plan;
  static Plan plan(int rank, const fftw_iodim64* dims, int howmany, const fftw_iodim64* batch, Complex* in,
                   Complex* out, int sign, unsigned flags) {
    return fftwf_plan_guru64_dft(rank, dims, howmany, batch, in, out, sign, flags);
  }
  static void execute(Plan p, Complex* in, Complex* out) { fftwf_execute_dft(p, in, out); }
  static Complex* alloc(std::size_t n) { return fftwf_alloc_complex(n); }
  static void free(void* p) { fftwf_free(p); }
  static int alignment(void* p) { return fftwf_alignment_of(static_cast<float*>(p)); }
};

/// The process's FFTW plans of one precision. FFTW's planner is not thread-safe, so planning holds
/// the mutex; executing a plan on new arrays is (fftw_execute_dft).
template <class Real>
class FftwPlans {
  using Api = Fftw<Real>;

 public:
  using Key = std::tuple<std::vector<std::int64_t>, std::vector<std::int64_t>, std::vector<std::int64_t>, int, bool>;

  static FftwPlans& instance() {
    static FftwPlans plans;
    return plans;
  }
  FftwPlans(const FftwPlans&) = delete;
  FftwPlans& operator=(const FftwPlans&) = delete;

  /// The plan of a transform over `dims` of `x` (its sizes and strides) into a contiguous output,
  /// or `in_place`, for data with the 64-byte alignment fftw_malloc gives (callers check theirs);
  /// null if FFTW cannot plan it.
  typename Api::Plan get(const at::Tensor& x, at::IntArrayRef dims, int sign, bool in_place) {
    Key key{x.sizes().vec(), x.strides().vec(), dims.vec(), sign, in_place};
    std::lock_guard lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    std::vector<bool> transformed(static_cast<std::size_t>(x.dim()), false);
    for (auto d : dims) transformed[static_cast<std::size_t>(d)] = true;
    const auto contiguous = c10::contiguous_strides(x.sizes());
    const std::vector<std::int64_t> out_strides =
        in_place ? x.strides().vec() : std::vector<std::int64_t>(contiguous.begin(), contiguous.end());
    std::vector<fftw_iodim64> along, batch;
    std::int64_t span = 1;  // elements the input's strides reach
    for (std::int64_t d = 0; d < x.dim(); ++d) {
      span += (x.size(d) - 1) * x.stride(d);
      const fftw_iodim64 io{x.size(d), x.stride(d), out_strides[static_cast<std::size_t>(d)]};
      if (transformed[static_cast<std::size_t>(d)]) along.push_back(io);
      else if (x.size(d) > 1) batch.push_back(io);
    }
    auto* in = Api::alloc(static_cast<std::size_t>(span));
    auto* out = in_place ? in : Api::alloc(static_cast<std::size_t>(x.numel()));
    const auto plan = Api::plan(static_cast<int>(along.size()), along.data(), static_cast<int>(batch.size()),
                                batch.data(), in, out, sign, FFTW_MEASURE);
    Api::free(in);
    if (!in_place) Api::free(out);
    plans_.emplace(std::move(key), plan);
    return plan;
  }

 private:
  FftwPlans() = default;
  std::mutex mutex_;
  std::map<Key, typename Api::Plan> plans_;
};

/// FFTW's transform of `x` over `dims` (unnormalized, sign −1 forward), in place when `in_place`,
/// or nothing when FFTW does not take this tensor (a CPU complex tensor whose data is 64-byte
/// aligned).
template <class Real>
std::optional<at::Tensor> fftw_c2c(at::Tensor x, at::IntArrayRef dims, bool inverse, bool in_place) {
  using Api = Fftw<Real>;
  in_place = in_place && !x.is_conj();
  x = x.resolve_conj();
  auto out = in_place ? x : comm::pooled_empty(x.sizes(), x.options());
  if (x.numel() == 0 || Api::alignment(x.data_ptr()) != 0 || Api::alignment(out.data_ptr()) != 0)
    return std::nullopt;
  const auto plan = FftwPlans<Real>::instance().get(x, dims, inverse ? FFTW_BACKWARD : FFTW_FORWARD, in_place);
  if (plan == nullptr) return std::nullopt;
  Api::execute(plan, static_cast<typename Api::Complex*>(x.data_ptr()),
               static_cast<typename Api::Complex*>(out.data_ptr()));
  return out;
}

}  // namespace detail
#endif

/// The local FFT over `dims` of `x` (c2r: `lengths` are the output lengths of `dims`), with torch's
/// norm conventions. `owned`: `x` is a temporary of the caller's that nothing else refers to, so
/// FFTW may transform it in place (a fresh output costs its page faults, a large share of a big
/// transform, docs/performance.md).
inline at::Tensor local_fft(const at::Tensor& x, plan::FftOp op, at::IntArrayRef dims, at::IntArrayRef lengths,
                            const std::optional<std::string>& norm, bool owned = false) {
#if defined(EINSHARD_HAS_FFTW)
  const bool complex_pass = op == plan::FftOp::forward || op == plan::FftOp::inverse;
  if (complex_pass && local_fft_backend() == LocalFft::automatic && !comm::records(x) && x.device().is_cpu()) {
    const bool inverse = op == plan::FftOp::inverse;
    std::optional<at::Tensor> y;
    if (x.scalar_type() == at::kComplexDouble) y = detail::fftw_c2c<double>(x, dims, inverse, owned);
    else if (x.scalar_type() == at::kComplexFloat) y = detail::fftw_c2c<float>(x, dims, inverse, owned);
    if (y) {
      double n = 1;
      for (auto d : dims) n *= static_cast<double>(x.size(d));
      const auto mode = norm.value_or("backward");
      const double scale = mode == "ortho" ? 1 / std::sqrt(n) : (mode == "forward") != inverse ? 1 / n : 1;
      if (scale != 1) y->mul_(scale);
      return *y;
    }
  }
#endif
  std::optional<c10::string_view> n;
  if (norm) n = c10::string_view(norm->data(), norm->size());
  switch (op) {
    case plan::FftOp::forward: return at::fft_fftn(x, std::nullopt, dims, n);
    case plan::FftOp::inverse: return at::fft_ifftn(x, std::nullopt, dims, n);
    case plan::FftOp::real_forward: return at::fft_rfftn(x, std::nullopt, dims, n);
    case plan::FftOp::real_inverse: return at::fft_irfftn(x, lengths, dims, n);
  }
  return x;
}

}  // namespace einshard::exec
