// Pre-packs the constant B operand of 2-D GEMMs (linear layers, merged Q/K/V projections) into
// the micro-kernel's panel layout once, at compile time: mm / addmm whose B is a folded
// compile-time [K, N] matrix become mm_packed reading gemm_pack_b(B), which constant folding then
// evaluates. Without this every call copies the whole weight into panels again (~18% of a
// 128x768x2304 GEMM on this machine's Xeon).
// Covered: mm, and addmm with beta == 1 and an N-element bias (or beta == 0, bias dropped); any
// alpha; A rank 2 and computed at run time. Batched GEMMs and runtime B stay as they are.
// Precondition: the graph verifies; rewriting is done (the math rules and GEMM merging match
// mm/addmm, not mm_packed). Postcondition: the graph verifies and computes the same values; the
// packed operands are laid out for kernels::sgemm_panel_width() of this process's ISA, or, on a
// CPU with AMX, for GEMMs of at least kBf16x6MinRows rows that `amx` takes (measure_amx.h: by
// default the ones timed faster there), for the bf16x6 GEMM (kernels/cpu/gemm_bf16x6.h: fp32
// accuracy from six bf16 products; both nodes then carry packing = "bf16x6" and nr = 0).
#pragma once
#include <cstdint>

#include "ecg/graph.h"
#include "target/cpu/layout/measure_amx.h"

namespace dnnfusion::layout {

inline constexpr const char* kBf16x6Packing = "bf16x6";
// Below this many rows of A the AMX tiles (16 rows each) run mostly empty and the 1.5x larger
// packed weight costs more than the products gain (measured: 8 x 1000 x 1280 0.55x of fp32,
// 64 rows 1.05x, 128 rows 1.1-1.45x, 1024 rows 1.6-1.8x).
inline constexpr int64_t kBf16x6MinRows = 64;

// `packed` (optional) receives the number of GEMMs rewritten, `amx_stats` how many of them took
// the bf16x6 packing and how many the AMX choice declined.
ecg::Graph pack_gemm_weights(const ecg::Graph& g, const AmxChoice& amx = {}, int* packed = nullptr,
                             AmxChoiceStats* amx_stats = nullptr);

}  // namespace dnnfusion::layout
