// exponential() (multinomial/laws.h), the E ~ Exp(1) of every race key, keeps the relative
// error its comment states, below 2^-50, against the same point's E in long double
// (-logl(u) or -log1pl(-(1 - u)), u on the 2^-64 grid): over random words and at the
// edges (u near 0, near 1/2 from both sides, and near 1, where E is smallest).
#include "multinomial/laws.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <random>

namespace {

long double reference(uint32_t lo, uint32_t hi) {
  const uint64_t r = (static_cast<uint64_t>(hi) << 32) | lo;
  const long double k2to64 = 0x1.0p-64L;
  if (r >> 63) return -log1pl(-((static_cast<long double>(~r) + 0.5L) * k2to64));
  return -logl((static_cast<long double>(r) + 0.5L) * k2to64);
}

}  // namespace

int main() {
  static_assert(sizeof(long double) > sizeof(double) || LDBL_MANT_DIG > 53, "needs a wider long double");
  int failures = 0;
  double worst = 0.0;
  auto check = [&](uint32_t lo, uint32_t hi) {
    const long double want = reference(lo, hi);
    const double got = wrs::multinomial::exponential(lo, hi);
    const double rel = static_cast<double>(fabsl((static_cast<long double>(got) - want) / want));
    worst = std::max(worst, rel);
    if (!(rel < 0x1.0p-50) && failures++ < 10) std::printf("FAIL: lo %08x hi %08x relative error %g\n", lo, hi, rel);
  };
  std::mt19937_64 gen(2026);
  for (int i = 0; i < 4'000'000; ++i) {
    const uint64_t r = gen();
    check(static_cast<uint32_t>(r), static_cast<uint32_t>(r >> 32));
  }
  for (uint32_t d = 0; d < 100'000; ++d) {
    const uint32_t lo = static_cast<uint32_t>(gen());
    check(d, 0);                               // u near 0: E largest
    check(lo, d);
    check(~d, 0xffffffffu);                    // u near 1: E smallest
    check(lo, 0xffffffffu - d);
    check(lo, 0x80000000u + d);                // u just above 1/2
    check(lo, 0x7fffffffu - d);                // u just below 1/2
  }
  std::printf("worst relative error 2^%.2f; %s\n", std::log2(worst), failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
