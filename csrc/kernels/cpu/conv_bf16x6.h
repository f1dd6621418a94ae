// 1x1 convolutions over NCHW[x]c as fp32-accurate GEMMs on AMX (the bf16x6 product of
// gemm_bf16x6.h): a 1x1, stride-1, unpadded conv with groups == 1 is Y[position, k] =
// sum_c X[position, c] W[k, c], whose rows (positions of every image) and columns (channels) the
// product reads and writes straight from and into the blocked layouts.
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

// Pointwise (1x1, stride 1, no padding, dilation irrelevant), groups == 1, channel blocks that
// are multiples of 16 lanes (AMX rows are 32 channels; a block of 64 output lanes spans two
// column blocks). Otherwise false with the reason in *why.
bool conv_bf16x6_supported(const Conv2dShape& s, int ic_bn, int oc_bn, std::string* why = nullptr);

int64_t conv_bf16x6_packed_weight_floats(const Conv2dShape& s);
// w_kcrs: PyTorch weight [K][C][1][1]. Portable (any CPU).
void conv_bf16x6_pack_weight(const Conv2dShape& s, const float* w_kcrs, float* out);

// The same packing from a weight already packed for the direct kernel (conv_nchwc_pack_weight with
// blocks ic_bn x oc_bn): for graphs whose fp32 packing was folded before the choice was made.
void conv_bf16x6_repack_weight(const Conv2dShape& s, int ic_bn, int oc_bn, const float* nchwc_packed, float* out);

// Throws dnnfusion::Error when AMX is unavailable or the conv is not supported.
void conv2d_bf16x6_nchwc(const Conv2dShape& s, int ic_bn, int oc_bn, const float* x, const float* packed_w,
                         const float* bias, const float* residual, Activation act, float* y, const Parallel& par,
                         ElementHook epilogue = {});

}  // namespace dnnfusion::kernels
