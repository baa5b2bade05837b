#pragma once
// The CPU multinomial's method table: which method serves a call, from its shape alone
// (dispatch_cpu.cpp), and the tuning the methods share. The measurements behind each
// rule: docs/methods.md, "multinomial on the CPU".
#include "multinomial/shape.h"

#include <cstdint>

namespace wrs::multinomial {

enum class CpuMethod {
  kAliasTables,  // with replacement, many draws: alias tables, a lookup per draw
  kChunkBounds,  // few long rows cut into chunks; each draw against its stretches' bounds
  kChunkPoints,  // few long rows cut into chunks; sorted points found by one partial scan
  kRowBounds,    // a task of rows; each draw against its row's stretches' bounds
  kRowPrefix,    // a task of rows; a row's prefix sums once, a search per draw
  kRowPoints,    // a task of rows; k sorted points found by one partial scan
  kRaceKeys,     // without replacement: the top k race keys
};

CpuMethod choose_cpu(const Shape& s);
const char* method_name(CpuMethod m);

constexpr int64_t kChunk = int64_t(1) << 15;       // items per task of a long row
constexpr int64_t kOneRowChunk = int64_t(1) << 13;  // items per task of one row of more than twice it
constexpr int64_t kChunkedRows = 16;                // fewer rows than this, longer than a chunk, take chunk tasks
constexpr int64_t kBoundStretch = 2048;             // items per stretch of the draws against bounds
constexpr int64_t kAliasSamples = 65'536;           // draws per row from which alias tables pay

// Items per chunk task of the inverse CDF's rows.
int64_t inverse_cdf_chunk(int64_t rows, int64_t n);

}  // namespace wrs::multinomial
