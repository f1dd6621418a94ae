// Convolutions over NCHW[x]c as fp32-accurate GEMMs on AMX (the bf16x6 product of gemm_bf16x6.h):
// with groups == 1, Y[position, k] = sum over taps t and channels c of X[window(position, t), c]
// W[k, c, t]. Rows are the output positions of every image, columns the output channels, both read
// and written straight from and into the blocked layouts. A 1x1 stride-1 unpadded conv reads its
// rows as they lie (K = C); any other kernel, stride, padding or dilation gathers each row's taps
// as it splits them (an implicit GEMM, K = R*S*Cp with Cp = C rounded up to 16 lanes, taps outside
// the image read as 0), so no im2col copy is ever made.
// Preconditions: bf16x6_available(); conv_bf16x6_supported(s, ic_bn, oc_bn); packed_w from
// conv_bf16x6_pack_weight for s. Postconditions as conv2d_nchwc (conv_nchwc.h): y = act(conv +
// bias + residual) with padded channels 0 (before the epilogue hook); the hook is called once per
// run of one output block's positions inside one image, after the run is stored.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::kernels {

// groups == 1 and channel blocks that are multiples of 16 lanes (AMX rows are 32 channels; a
// block of 64 output lanes spans two column blocks). Otherwise false with the reason in *why.
bool conv_bf16x6_supported(const Conv2dShape& s, int ic_bn, int oc_bn, std::string* why = nullptr);

int64_t conv_bf16x6_packed_weight_floats(const Conv2dShape& s);
// w_kcrs: PyTorch weight [K][C][R][S]. Portable (any CPU).
void conv_bf16x6_pack_weight(const Conv2dShape& s, const float* w_kcrs, float* out);

// The same packing from a weight already packed for the direct kernel (conv_nchwc_pack_weight with
// blocks ic_bn x oc_bn): for graphs whose fp32 packing was folded before the choice was made.
void conv_bf16x6_repack_weight(const Conv2dShape& s, int ic_bn, int oc_bn, const float* nchwc_packed, float* out);

// Throws dnnfusion::Error when AMX is unavailable or the conv is not supported.
void conv2d_bf16x6_nchwc(const Conv2dShape& s, int ic_bn, int oc_bn, const float* x, const float* packed_w,
                         const float* bias, const float* residual, Activation act, float* y, const Parallel& par,
                         ElementHook epilogue = {});

}  // namespace dnnfusion::kernels
