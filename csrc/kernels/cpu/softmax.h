// Softmax / log-softmax over the middle axis of a contiguous float32 [outer][dim][inner] tensor.
//
// Preconditions: x and y hold outer*dim*inner floats; y may equal x (in place) but must not
// partially overlap it; outer, dim, inner >= 0.
// Postconditions: y = exp(x - max) / sum(exp(x - max)) along dim (log: x - max - log(sum)),
// computed with the max subtracted so large inputs do not overflow; a slice containing NaN gives
// NaN; a slice of all -inf gives NaN like torch.
// Fusion hooks (optional; nullptr or empty = none). Indices are row-major linear indices into the
// [outer][dim][inner] tensor.
//  - epilogue: every y element passed exactly once, right after its final value is stored:
//    inner == 1, one call per row (start = o*dim, count = dim); inner > 1, one call per
//    contiguous run of a column tile (start = (o*dim + d)*inner + i0, count <= 256).
//  - prologue: produces the input instead of x, which is then never read (may be nullptr): per
//    row when inner == 1 (start = o*dim, count = dim); per (o, tile) when inner > 1, one call for
//    the whole [dim][inner] slab if one tile spans inner, else one per (d, tile). Each input
//    element is requested exactly once; the values go to a per-thread buffer, not to y.
#pragma once
#include <cstdint>

#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

void softmax(const float* x, float* y, int64_t outer, int64_t dim, int64_t inner, bool log, const Parallel& par,
             const ElementHook* epilogue = nullptr, const ElementHook* prologue = nullptr);

}  // namespace dnnfusion::kernels
