// multinomial and sample_logits on CUDA: the method the table picks (dispatch_cuda.cpp),
// one call's launches, and its one 4-byte read back of the value checks (skipped under
// CUDA-graph capture, as torch does; the kernels keep every output in range whatever the
// input).
#include "alias/alias_cuda.h"
#include "common/cuda_utils.cuh"
#include "common/philox_cuda.cuh"
#include "common/status_word.h"
#include "multinomial/kernels_cuda.cuh"
#include "multinomial/multinomial.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>

namespace wrs::multinomial {
namespace {

// ORs a device int of flags into the status word.
__global__ void or_flags_kernel(const int* flags, uint32_t* status) {
  if (*flags) atomicOr(status, static_cast<uint32_t>(*flags));
}

// The flags of a row's top k float64 race keys (decreasing): a zero weight's key (or
// below) first is a zero-sum row, last too few nonzero weights.
void flag_top_keys(const Request& r, const DrawCall& call, const at::Tensor& top) {
  const double zero_key = r.logits ? -1.7976931348623157e308 : 0.0;
  const at::Tensor few = (top.select(-1, 0) <= zero_key).any().to(at::kInt) * static_cast<int>(kRowZeroSum) +
                         (top.select(-1, r.k - 1) <= zero_key).any().to(at::kInt) * static_cast<int>(kTooFewNonzero);
  or_flags_kernel<<<1, 1, 0, call.stream>>>(few.const_data_ptr<int>(), call.status);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Beyond kMaxTopK draws without replacement: torch.topk over every item's race key. With
// float_first, over float keys (half the bytes; race_keys): the first kTieSlack more than
// k, or the whole row sorted, whose near-ties rank_candidates orders by float64 key into
// `out`; else over the float64 keys. (Under capture the float64 keys, since a run past
// the candidates would need the host to rank again.)
at::Tensor rank_keys(const Request& r, const DrawCall& call, at::Tensor out, bool float_first) {
  if (float_first) {
    at::Tensor g = at::empty({r.rows, r.n}, r.x.options().dtype(at::kFloat));
    const int64_t cands = std::min(r.k + kTieSlack, r.n);
    // approx_key needs the input, and 1 / T, in float's range.
    const bool approx = cands <= kMaxApproxCandidates && r.x.scalar_type() != at::kDouble &&
                        (!r.logits || r.inv_temperature <= 1e30);
    race_keys(call, g.mutable_data_ptr<float>(), approx);
    auto [cand_g, cand_index] = cands == r.n                  ? g.sort(-1, /*descending=*/true)
                                : threshold_serves(r.n, cands) ? threshold_candidates(call, g, cands)
                                                               : g.topk(cands, -1, /*largest=*/true, /*sorted=*/true);
    at::Tensor cand_key = at::empty_like(cand_g, cand_g.options().dtype(at::kDouble));
    rank_candidates(call, cands, approx, cand_g.const_data_ptr<float>(), cand_index.mutable_data_ptr<int64_t>(),
                    cand_key.mutable_data_ptr<double>());
    return out;
  }
  at::Tensor keys = at::empty({r.rows, r.n}, r.x.options().dtype(at::kDouble));
  race_keys(call, keys.mutable_data_ptr<double>());
  auto [top, index] = keys.topk(r.k, -1, /*largest=*/true, /*sorted=*/true);
  flag_top_keys(r, call, top);
  return index.view(r.out_shape);
}

// The same draws from the k chunks with the largest maxima (chunk_max_serves).
void rank_chunk_keys(const Request& r, const DrawCall& call) {
  const int64_t chunk = chunk_max_items(r.n, r.k);
  const auto opts = r.x.options().dtype(at::kDouble);
  at::Tensor chunk_max = at::empty({r.rows, (r.n + chunk - 1) / chunk}, opts);
  chunk_max_keys(call, chunk, chunk_max.mutable_data_ptr<double>());
  const at::Tensor pick = std::get<1>(chunk_max.topk(r.k, -1, /*largest=*/true, /*sorted=*/false));
  at::Tensor keys = at::empty({r.rows, r.k * chunk}, opts);
  picked_chunk_keys(call, chunk, pick.const_data_ptr<int64_t>(), keys.mutable_data_ptr<double>());
  auto [top, pos] = keys.topk(r.k, -1, /*largest=*/true, /*sorted=*/true);
  picked_items(call, chunk, pick.const_data_ptr<int64_t>(), pos.const_data_ptr<int64_t>());
  flag_top_keys(r, call, top);
}

// With replacement, many draws: alias tables. For probabilities the build's value flags
// are the call's, so they go straight into the call's status word; logits are flagged
// first, then become float64 softmax weights.
at::Tensor draw_alias_tables(const Request& r, const DrawCall& call, std::optional<at::Generator> generator) {
  if (r.logits) {
    flag_rows(call);
    return sample_alias_tables(r, std::move(generator));
  }
  const at::Tensor table = at::empty({r.rows, r.n}, r.x.options().dtype(at::kLong));
  alias::build_tables_cuda(r.x.view({r.rows, r.n}), table, call.status);
  return sample_tables(table, r.k, std::move(generator)).view(r.out_shape);
}

at::Tensor sample_cuda(const Request& r, std::optional<at::Generator> generator) {
  at::Tensor out = at::empty(r.out_shape, r.x.options().dtype(at::kLong));
  if (r.rows == 0) return out;
  const c10::cuda::CUDAGuard guard(r.x.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  StatusWord status(r.x.options(), stream);
  const bool capturing = status.capturing();
  const CudaMethod method = choose_cuda(shape_of(r), capturing, device_sms());
  // Race keys take two Philox blocks (8 draws) per subsequence, the others one.
  const bool race = method != CudaMethod::kWarpRows && method != CudaMethod::kInverseCdf &&
                    method != CudaMethod::kCdfSearch && method != CudaMethod::kAliasTables;
  DrawCall call{r.x,
                r.rows,
                r.n,
                r.k,
                r.logits,
                r.inv_temperature,
                cuda_philox_state(generator, r.x.device().index(), race ? 8 : 4),
                out.mutable_data_ptr<int64_t>(),
                status.bits(),
                stream};
  switch (method) {
    case CudaMethod::kWarpRows:
      draw_warp_rows(call);
      break;
    case CudaMethod::kRace:
      draw_race(call);
      break;
    case CudaMethod::kInverseCdf:
      draw_inverse_cdf(call, inverse_cdf_chunks(r.rows, r.n, device_sms()));
      break;
    case CudaMethod::kCdfSearch:
      draw_cdf_search(call);
      break;
    case CudaMethod::kAliasTables:
      out = draw_alias_tables(r, call, generator);
      break;
    case CudaMethod::kThreadTopK:
      draw_thread_topk(call);
      break;
    case CudaMethod::kTwoPassTopK:
      draw_two_pass_topk(call);
      break;
    case CudaMethod::kFloorTopK:
      draw_floor_topk(call);
      break;
    case CudaMethod::kTopK:
      draw_topk(call);
      break;
    case CudaMethod::kChunkMaxTopK:
      rank_chunk_keys(r, call);
      break;
    case CudaMethod::kKeysTopK:
      out = rank_keys(r, call, out, /*float_first=*/!capturing);
      break;
  }
  if (capturing) return out;
  uint32_t flags = status.read();
  if (flags & kFloatKeyTies) {  // float keys tied past the candidates (rare): float64 keys decide
    status.clear();
    out = rank_keys(r, call, out, /*float_first=*/false);
    flags = status.read();
  }
  raise_value_flags(r, flags);
  return out;
}

at::Tensor multinomial_cuda(const at::Tensor& input, int64_t num_samples, bool replacement,
                            std::optional<at::Generator> generator) {
  return sample_cuda(multinomial_request(input, num_samples, replacement), generator);
}

at::Tensor sample_logits_cuda(const at::Tensor& logits, int64_t num_samples, double temperature, bool replacement,
                              std::optional<at::Generator> generator) {
  return sample_cuda(logits_request(logits, num_samples, temperature, replacement), generator);
}

}  // namespace

TORCH_LIBRARY_IMPL(wrs, CUDA, m) {
  m.impl("multinomial", &multinomial_cuda);
  m.impl("sample_logits", &sample_logits_cuda);
}

}  // namespace wrs::multinomial
