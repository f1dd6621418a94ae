// NCHW float 2-D convolution (PyTorch conv2d semantics: groups, depthwise, stride, zero padding,
// dilation, optional bias) with a fused activation.
// Strategy: grouped/general convs run as an implicit-im2col GEMM (the GEMM packs its B panels
// straight from the image, so no im2col matrix is materialised; 1x1/stride-1/pad-0 is the same
// GEMM reading the image as a plain [C][H*W] matrix); depthwise (groups == C, any channel
// multiplier) uses a direct kernel parallel over N*K output planes.
// Preconditions: all sizes positive (pad >= 0), C % groups == 0, K % groups == 0, OH/OW >= 1;
// x is [N][C][H][W], w is [K][C/groups][R][S], bias is [K] or nullptr, y is [N][K][OH][OW], and y
// does not overlap x/w/bias. Postcondition: every element of y written. Throws dnnfusion::Error
// on invalid shapes.
// Fusion epilogue (optional; nullptr or empty = none): every y element is passed to it exactly
// once, after its final value (bias and activation included) is stored, in contiguous runs with
// start = the element's row-major index in [N][K][OH][OW]: one call per GEMM tile row (runs within
// one output plane, see gemm.h) or per output row of the depthwise kernel.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/conv_geometry.h"
#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

struct Conv2dShape {
  int64_t N, C, H, W, K, R, S, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  // conv_out_size (common/conv_geometry.h) of each dim.
  int64_t OH() const { return out_size(H, pad_h, dil_h, R, stride_h); }
  int64_t OW() const { return out_size(W, pad_w, dil_w, S, stride_w); }
  static int64_t out_size(int64_t in, int64_t pad, int64_t dil, int64_t k, int64_t stride) {
    return conv_out_size(in, pad, dil, k, stride);
  }
};

// Throws dnnfusion::Error naming the problem if s is not a valid convolution.
void conv2d_check_shape(const Conv2dShape& s);

// Bytes of 64-byte-aligned scratch conv2d_nchw needs. The current strategies need none (GEMM
// packing buffers are thread-local), so this returns 0 and scratch may be nullptr; callers should
// still ask, so a future strategy can use it.
size_t conv2d_scratch_bytes(const Conv2dShape& s, int num_threads);

void conv2d_nchw(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                 Activation act, void* scratch, const Parallel& par,
                 const ElementHook* epilogue = nullptr);

}  // namespace dnnfusion::kernels
