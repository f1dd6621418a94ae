// Pre-packs the constant B operand of 2-D GEMMs (linear layers, merged Q/K/V projections) into
// the micro-kernel's panel layout once, at compile time: mm / addmm whose B is a folded
// compile-time [K, N] matrix become mm_packed reading gemm_pack_b(B), which constant folding then
// evaluates. Without this every call copies the whole weight into panels again (~18% of a
// 128x768x2304 GEMM on this machine's Xeon).
// Covered: mm, and addmm with beta == 1 and an N-element bias (or beta == 0, bias dropped); any
// alpha; A rank 2 and computed at run time. Batched GEMMs and runtime B stay as they are.
// Precondition: the graph verifies; rewriting is done (the math rules and GEMM merging match
// mm/addmm, not mm_packed). Postcondition: the graph verifies and computes the same values; the
// packed operands are laid out for kernels::sgemm_panel_width() of this process's ISA.
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::layout {

// `packed` (optional) receives the number of GEMMs rewritten.
ecg::Graph pack_gemm_weights(const ecg::Graph& g, int* packed = nullptr);

}  // namespace dnnfusion::layout
