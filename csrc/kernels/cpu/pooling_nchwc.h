// Max and average 2-D pooling on channel-blocked activations NCHW[b]c = [N][C/b][H][W][b] (NeoCPU:
// pooling is layout-tolerant, so a CNN's max-pool between convolutions needs no layout transform).
// Same semantics as pooling.h's NCHW kernels (PyTorch CPU): max over in-bounds taps, padding
// never wins, NaN propagates; average with count_include_pad / divisor_override, dilation 1.
// The b lanes of a position are innermost, so every tap is one contiguous vector of b floats.
// Preconditions: s describes the NCHW problem (s.C channels), b >= 1 divides s.C, x is
// [N][C/b][H][W][b], y is [N][C/b][OH][OW][b] and does not overlap x. Postcondition: every y element
// written. Fusion epilogue (optional): called once per output row of one channel block, after it
// is stored: start = ((n*C/b + cb)*OH + oh)*OW*b (the row-major index in y), count = OW*b.
// Throws dnnfusion::Error on invalid shapes.
#pragma once
#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pooling.h"

namespace dnnfusion::kernels {

// isa: the row kernel (AVX-512 for blocks of 16k lanes, else SSE / scalar); Scalar and Avx2 both
// take the baseline rows. Throws if the CPU lacks it.
void max_pool2d_nchwc(const Pool2dShape& s, int64_t b, const float* x, float* y, const Parallel& par,
                      const ElementHook* epilogue = nullptr, Isa isa = active_isa());

void avg_pool2d_nchwc(const Pool2dShape& s, int64_t b, const float* x, float* y, bool count_include_pad,
                      int64_t divisor_override, const Parallel& par, const ElementHook* epilogue = nullptr);

}  // namespace dnnfusion::kernels
