// NCHW float pooling with PyTorch CPU semantics. Parallel over the N*C planes.
// Preconditions: sizes positive, OH/OW as PyTorch computes them (ceil_mode already applied by the
// caller), pads >= 0; y is [N][C][OH][OW] and does not overlap x. Postcondition: every element of
// y (and of indices, if given) written. Throws dnnfusion::Error on invalid shapes.
// Fusion epilogue (optional; nullptr or empty = none): every y element is passed exactly once,
// after its final value is stored, in runs of whole consecutive output rows of one plane
// (start = (p*OH + oh)*OW for plane p = n*C + c, i.e. the row-major index in [N][C][OH][OW];
// count a multiple of OW). indices are never passed to it.
#pragma once
#include <cstdint>

#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

struct Pool2dShape {
  int64_t N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
};

// Max over the in-bounds taps of each (dilated) window; padding never wins. NaN propagates (last
// NaN's index, as in PyTorch). indices (nullable) get the flat h*W+w index within the plane. A
// window with no in-bounds tap (only possible with invalid PyTorch params) gives -inf.
void max_pool2d_nchw(const Pool2dShape& s, const float* x, float* y, int64_t* indices,
                     const Parallel& par, const ElementHook* epilogue = nullptr);

// Average; dh/dw must be 1. The window is clipped to [−pad, H+pad) for the count_include_pad
// divisor and to [0, H) for the sum and the count_include_pad=false divisor; an empty clipped
// window gives 0. divisor_override > 0 replaces the divisor.
void avg_pool2d_nchw(const Pool2dShape& s, const float* x, float* y, bool count_include_pad,
                     int64_t divisor_override, const Parallel& par,
                     const ElementHook* epilogue = nullptr);

// Output cell (i,j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)) x cols likewise.
void adaptive_avg_pool2d_nchw(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                              const float* x, float* y, const Parallel& par,
                              const ElementHook* epilogue = nullptr);

}  // namespace dnnfusion::kernels
