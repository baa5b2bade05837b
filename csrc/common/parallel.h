// wrs::parallel_for: at::parallel_for, which steps aside while the machine is busy.
//
// at::parallel_for (OpenMP in torch's CPU build) splits the range among its threads up
// front and ends at a barrier. When other processes hold the cores, a thread that the
// scheduler has not run yet stalls the call for a timeslice: about 8 ms on the CI
// machine, against calls of 0.1-1 ms (docs/benchmarks.md, "The CPU under contention").
// So each call notes how late its threads started; once one started a millisecond late,
// calls run on the calling thread alone for 100 ms. A busy machine then costs at most one
// stall per 100 ms, where every call would risk one, and an idle machine keeps OpenMP's
// team, which torch's own ops keep warm.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace wrs {

namespace detail {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::microseconds kLateStart{1000};
constexpr std::chrono::milliseconds kBusySpell{100};

inline std::atomic<int64_t>& busy_until() {  // Clock ticks
  static std::atomic<int64_t> until{0};
  return until;
}

inline std::atomic<bool>& team_started() {  // the first region starts OpenMP's threads: late by design
  static std::atomic<bool> started{false};
  return started;
}

inline bool machine_busy() {
  return Clock::now().time_since_epoch().count() < busy_until().load(std::memory_order_relaxed);
}

}  // namespace detail

// at::parallel_for(begin, end, grain, f): f(b, e) over disjoint ranges covering
// [begin, end). Inline, as one range, while the machine is busy.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (end - begin <= std::max<int64_t>(grain, 1) || at::get_num_threads() <= 1 || at::in_parallel_region() ||
      detail::machine_busy()) {
    if (end > begin) f(begin, end);
    return;
  }
  const int64_t start = detail::Clock::now().time_since_epoch().count();
  std::atomic<int64_t> latest_start{start};
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    const int64_t now = detail::Clock::now().time_since_epoch().count();
    int64_t seen = latest_start.load(std::memory_order_relaxed);
    while (now > seen && !latest_start.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
    f(b, e);
  });
  const bool warm = detail::team_started().exchange(true, std::memory_order_relaxed);
  const auto late = detail::Clock::duration(latest_start.load(std::memory_order_relaxed) - start);
  if (warm && late > detail::kLateStart) {
    detail::busy_until().store((detail::Clock::now() + detail::kBusySpell).time_since_epoch().count(),
                               std::memory_order_relaxed);
  }
}

}  // namespace wrs
