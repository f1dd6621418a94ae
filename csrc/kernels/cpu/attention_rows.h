// Internal to the attention family: the ISA-specific row softmax that sdpa (attention.cc) runs on
// each row of scores. Like gemm_ukernel.h it declares only: the ISA files are compiled with
// -mavx512* / -mavx2, and an inline function they emitted could be picked by the linker for
// baseline callers.
#pragma once
#include <cstdint>

namespace dnnfusion::kernels::attention_detail {

// In place over s[0, n), n >= 1: s = exp(s - max) / sum(exp(s - max)); returns the row's
// logsumexp. A NaN anywhere makes the whole row (and the result) NaN, as torch's softmax does;
// a row of only -inf (every key masked out) becomes 0 with logsumexp -inf (_safe_softmax).
// want_lse false: a row's logsumexp is not computed and 0 is returned (the NaN and all-masked
// rows still return NaN and -inf).
// Only call when the CPU has AVX-512 (AVX2 + FMA for the _avx2 one).
float softmax_row_avx512(float* s, int64_t n, bool want_lse);
float softmax_row_avx2(float* s, int64_t n, bool want_lse);

}  // namespace dnnfusion::kernels::attention_detail
