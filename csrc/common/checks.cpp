#include "common/checks.h"

#include <ATen/core/Tensor.h>
#ifdef WITH_CUDA
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

namespace wrs {

bool stream_capturing(const at::Tensor& t) {
#ifdef WITH_CUDA
  return t.is_cuda() && c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
#else
  (void)t;
  return false;
#endif
}

void check_host_read_allowed(const at::Tensor& t, const char* op, const char* what) {
#ifdef WITH_CUDA
  TORCH_CHECK(!t.is_cuda() || c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
              op, ": validate=True reads ", what, " back to the host, which CUDA-graph capture forbids; "
              "pass validate=False when capturing");
#else
  (void)t, (void)op, (void)what;
#endif
}

}  // namespace wrs
