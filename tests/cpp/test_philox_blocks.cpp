// philox_blocks (the CPU's batched Philox4x32-10) gives, block for block, the words of
// philox_block (torch's at::philox_engine), for every batch size and for subsequences and
// offsets past 32 bits, so batching changes no draw.
#include "common/philox.h"

#include <cstdio>

int main() {
  int failures = 0;
  for (const wrs::PhiloxSeed seed : {wrs::PhiloxSeed{0, 0}, wrs::PhiloxSeed{0x123456789abcdefULL, 4 * 77},
                                     wrs::PhiloxSeed{~0ULL, 4 * (5ULL << 32)}}) {
    for (const uint64_t first : {uint64_t{0}, uint64_t{12345}, (uint64_t{1} << 32) - 3, uint64_t{7} << 40}) {
      for (int count = 1; count <= wrs::kPhiloxBatch; ++count) {
        at::detail::UINT4 blocks[wrs::kPhiloxBatch];
        wrs::philox_blocks(seed, first, count, blocks);
        for (int j = 0; j < count; ++j) {
          if (blocks[j] != wrs::philox_block(seed, first + j) && failures++ < 10) {
            std::printf("FAIL: seed %llx offset %llu subsequence %llu\n", static_cast<unsigned long long>(seed.seed),
                        static_cast<unsigned long long>(seed.offset), static_cast<unsigned long long>(first + j));
          }
        }
      }
    }
  }
  std::printf(failures ? "%d failures\n" : "ok\n", failures);
  return failures ? 1 : 0;
}
