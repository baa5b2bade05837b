// The CPU multinomial's method table. One line a rule, the reason beside it; the
// measurements: docs/methods.md, "multinomial on the CPU".
#include "multinomial/dispatch_cpu.h"

namespace wrs::multinomial {

int64_t inverse_cdf_chunk(int64_t rows, int64_t n) {
  // One row of 32,000 spreads over the threads in smaller chunks; more rows already do.
  return rows == 1 && n > 2 * kOneRowChunk ? kOneRowChunk : kChunk;
}

CpuMethod choose_cpu(const Shape& s) {
  // Without replacement (k >= 2): one pass of race keys, each chunk keeping its top k.
  if (!s.replacement && s.k > 1) return CpuMethod::kRaceKeys;
  // Many draws, more than 4 per item: a table's O(1) lookups repay its O(n) build.
  if (s.k >= kAliasSamples && s.k > 4 * s.n) return CpuMethod::kAliasTables;
  const int64_t chunk = inverse_cdf_chunk(s.rows, s.n);
  if (s.rows < kChunkedRows && s.n > chunk) {
    // A few long rows, cut into chunks: k stretches within twice the row draw against
    // bounds (no pass quantizes the row); more draws find sorted points in one scan.
    return s.k * kBoundStretch <= 2 * s.n ? CpuMethod::kChunkBounds : CpuMethod::kChunkPoints;
  }
  // Rows of a task each: dense draws search prefix sums (sorting them costs more), few
  // draws from a long row scan a stretch each, the others sorted points in one scan.
  if (16 * s.k >= s.n) return CpuMethod::kRowPrefix;
  if (s.n >= 4 * kBoundStretch && s.k * kBoundStretch <= s.n) return CpuMethod::kRowBounds;
  return CpuMethod::kRowPoints;
}

const char* method_name(CpuMethod m) {
  switch (m) {
    case CpuMethod::kAliasTables: return "alias_tables";
    case CpuMethod::kChunkBounds: return "chunk_bounds";
    case CpuMethod::kChunkPoints: return "chunk_points";
    case CpuMethod::kRowBounds: return "row_bounds";
    case CpuMethod::kRowPrefix: return "row_prefix";
    case CpuMethod::kRowPoints: return "row_points";
    case CpuMethod::kRaceKeys: return "race_keys";
  }
  return "unknown";
}

}  // namespace wrs::multinomial
