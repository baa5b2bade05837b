// multinomial and sample_logits on the CPU, with the laws and Philox streams of the CUDA
// kernels (laws.h): the method table (dispatch_cpu.cpp) picks one of inverse_cdf_cpu.cpp,
// race_cpu.cpp or alias tables. Work is cut into fixed chunks of rows (tasks), never per
// thread, so results do not depend on the thread count; wrs::parallel_for
// (common/parallel.h) runs small calls inline, and every call inline while the machine
// is busy.
#include "common/parallel.h"
#include "common/philox.h"
#include "multinomial/dispatch_cpu.h"
#include "multinomial/kernels_cpu.h"
#include "multinomial/multinomial.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wrs::multinomial {
namespace {

// float16 converts to float32 exactly, and the passes then read floats: c10::Half
// converts in software in this build (about 0.75 ns an item, in every pass), where F16C,
// on every x86-64 CPU since 2012, converts eight at once. It is chosen at run time, so
// the build still runs on the baseline.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WRS_HAVE_F16C_PATH 1
__attribute__((target("f16c"))) void halves_to_floats_f16c(const at::Half* src, float* dst, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < count; ++i) dst[i] = _cvtsh_ss(src[i].x);
}
#endif

void halves_to_floats(const at::Half* src, float* dst, int64_t count) {
#ifdef WRS_HAVE_F16C_PATH
  static const bool f16c = __builtin_cpu_supports("f16c");
  if (f16c) return halves_to_floats_f16c(src, dst, count);
#endif
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]);
}

// Converted inputs up to this many items go to a buffer the calling thread keeps: a fresh
// allocation of that size comes as zeroed pages from the kernel, one fault per 4 KiB,
// which costs far more than the conversion (docs/methods.md, "float16 input"). The most a
// thread keeps is 64 MiB.
constexpr int64_t kKeptConversion = int64_t(1) << 24;
constexpr int64_t kConversionGrain = int64_t(1) << 13;

// The float32 copy of a contiguous float16 tensor; valid until the thread's next call.
const float* as_floats(const at::Tensor& x, std::vector<float>& local) {
  thread_local std::vector<float> kept;
  const int64_t count = x.numel();
  std::vector<float>& dst = count <= kKeptConversion ? kept : local;
  if (static_cast<int64_t>(dst.size()) < count) dst.resize(count);
  const at::Half* src = x.const_data_ptr<at::Half>();
  float* d = dst.data();
  // Grains of 8,192 items: a row of 32,000 converts on both threads (the copy is the same
  // whatever the split).
  wrs::parallel_for(0, count, kConversionGrain, [&](int64_t i0, int64_t i1) { halves_to_floats(src + i0, d + i0, i1 - i0); });
  return d;
}

at::Tensor sample_cpu(const Request& request, std::optional<at::Generator> generator) {
  at::Tensor out = at::empty(request.out_shape, request.x.options().dtype(at::kLong));
  if (request.rows == 0) return out;
  Request r = request;
  const CpuMethod method = choose_cpu(shape_of(r));
  if (method == CpuMethod::kAliasTables) {
    if (r.x.scalar_type() == at::kHalf) r.x = r.x.to(at::kFloat);  // a small cost beside so many draws
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, r.x.scalar_type(), "multinomial_cpu_checks", [&] {
      const Chunks ch(r.rows, r.n);
      const scalar_t* x = r.x.const_data_ptr<scalar_t>();
      with_weights(r, [&](const auto& wts) { raise_rows(r, row_summaries(x, ch, wts)); });
    });
    return sample_alias_tables(r, generator);
  }
  const PhiloxSeed seed = cpu_philox_seed(generator);
  int64_t* o = out.mutable_data_ptr<int64_t>();
  // float16 is read as float32 (converted first); bfloat16 as it is: its conversion is a shift.
  std::vector<float> local;
  const bool half = r.x.scalar_type() == at::kHalf;
  const at::ScalarType type = half ? at::kFloat : r.x.scalar_type();
  const void* x = half ? static_cast<const void*>(as_floats(r.x, local)) : r.x.const_data_ptr();
  if (method == CpuMethod::kRaceKeys) {
    draw_race(r, type, x, seed, o);
  } else {
    draw_inverse_cdf(r, method, type, x, seed, o);
  }
  return out;
}

at::Tensor multinomial_cpu(const at::Tensor& input, int64_t num_samples, bool replacement,
                           std::optional<at::Generator> generator) {
  return sample_cpu(multinomial_request(input, num_samples, replacement), generator);
}

at::Tensor sample_logits_cpu(const at::Tensor& logits, int64_t num_samples, double temperature, bool replacement,
                             std::optional<at::Generator> generator) {
  return sample_cpu(logits_request(logits, num_samples, temperature, replacement), generator);
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CPU, m) {
  m.impl("multinomial", &multinomial_cpu);
  m.impl("sample_logits", &sample_logits_cpu);
}

}  // namespace wrs::multinomial