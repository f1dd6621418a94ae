// Internal to the Winograd convolution (conv_winograd.cc): the input and output transforms, one
// set per ISA file (conv_winograd.cc for the baseline, conv_winograd_avx2.cc, conv_winograd_avx512.cc),
// all built from conv_winograd_transforms.h. Plain declarations only, for the same ODR reason as
// conv_nchwc_ukernel.h.
#pragma once
#include <cstdint>

#include "kernels/cpu/gemm_ukernel.h"  // Activation

namespace dnnfusion::kernels::wino_detail {

// A layer's tile grid for F(m x m, 3x3): output tile t (0 <= t < N*TH*TW) is (n, th, tw) =
// (t / (TH*TW), t / TW % TH, t % TW) and covers output rows m*th .. m*th+m-1 and columns
// m*tw .. m*tw+m-1 (those inside OH x OW); its input window is (m+2) x (m+2), and the transformed
// tile has (m+2)^2 values xi = (m+2)*i + j.
struct Geom {
  int64_t N, C, H, W, K, OH, OW, TH, TW, pad_h, pad_w;
  int64_t icb, ocb, Cb, Kb;
  int m;
};

// Tiles [t0, t1), every input channel block: writes the (m+2)^2 transformed values of tile t, block
// cb, lane l to v[xi * v_xi + cb * v_cb + (t - tb) * icb + l]. Taps outside the image read 0.
using InputFn = void (*)(const Geom& g, const float* x, int64_t t0, int64_t t1, float* v, int64_t tb, int64_t v_xi,
                         int64_t v_cb);
// Output block kb, tiles [t0, t1): reads m[xi * m_xi + (t - tb) * ocb + l], writes
// y = act(A^T m A + bias + res) at the tile's positions inside OH x OW of block kb (y and res are
// whole NCHW[ocb]c tensors), lanes >= `lanes` as 0. bias: ocb floats of block kb or null.
using OutputFn = void (*)(const Geom& g, const float* m, int64_t tb, int64_t m_xi, int64_t kb, int64_t t0, int64_t t1,
                          const float* bias, const float* res, Activation act, int64_t lanes, float* y);

// The transforms of F(m x m, 3x3) (m = 2 or 4) for a channel block of icb / ocb floats (vector
// width picked from it).
InputFn input_fn_baseline(int m, int64_t icb);
OutputFn output_fn_baseline(int m, int64_t ocb);
InputFn input_fn_avx2(int m, int64_t icb);
OutputFn output_fn_avx2(int m, int64_t ocb);
InputFn input_fn_avx512(int m, int64_t icb);
OutputFn output_fn_avx512(int m, int64_t ocb);

}  // namespace dnnfusion::kernels::wino_detail
