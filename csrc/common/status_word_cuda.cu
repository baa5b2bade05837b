#include "common/status_word.h"

#include "common/cuda_utils.cuh"

#include <mutex>
#include <vector>

namespace wrs {
namespace {

// Slots of mapped, portable pinned memory (usable from every device), taken a page at a
// time and reused; never freed (a few KB for the process).
class SlotPool {
 public:
  uint32_t* take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) {
      constexpr int kSlots = 1024;
      void* page = nullptr;
      C10_CUDA_CHECK(cudaHostAlloc(&page, kSlots * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
      void* on_device = nullptr;
      C10_CUDA_CHECK(cudaHostGetDevicePointer(&on_device, page, 0));
      // Unified addressing (every 64-bit platform CUDA supports): one address for both.
      TORCH_CHECK(on_device == page, "torch_wrs: mapped pinned memory has a different device address");
      for (int i = 0; i < kSlots; ++i) free_.push_back(static_cast<uint32_t*>(page) + i);
    }
    uint32_t* slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void give(uint32_t* slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }

 private:
  std::mutex mutex_;
  std::vector<uint32_t*> free_;
};

SlotPool& slot_pool() {
  static auto* pool = new SlotPool();  // never destroyed: calls may come during exit
  return *pool;
}

}  // namespace

StatusWord::StatusWord(const at::TensorOptions& opts, cudaStream_t stream)
    : stream_(stream), capturing_(stream_is_capturing(stream)) {
  if (capturing_) {
    device_word_ = zeroed_status_word(opts, stream);
    bits_ = status_bits(device_word_);
    return;
  }
  uint32_t* slot = slot_pool().take();
  slot_ = slot;
  *slot_ = 0;  // the slot's last user waited for its kernels
  bits_ = slot;
}

StatusWord::~StatusWord() {
  // A slot goes back only once read: before that, launched kernels may still write it
  // (a call that threw between its launches and its read leaves its slot behind).
  if (slot_ != nullptr && read_) slot_pool().give(const_cast<uint32_t*>(slot_));
}

uint32_t StatusWord::read() {
  TORCH_INTERNAL_ASSERT(!capturing_, "a status word is not read while the stream is capturing");
  c10::cuda::stream_synchronize(stream_);  // as item() does (torch's sync debug mode sees it)
  read_ = true;
  return *slot_;
}

void StatusWord::clear() {
  TORCH_INTERNAL_ASSERT(read_, "a status word is cleared after a read");
  *slot_ = 0;
}

}  // namespace wrs
