// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution on NCHW[x]c activations (Lavin & Gray, "Fast
// Algorithms for Convolutional Neural Networks"): each m x m output tile (m = 2 or 4) is
// A^T [ (G g G^T) .* (B^T d B) ] A over the tile's (m+2)^2 input window d, so a 3x3 stride-1
// convolution costs (m+2)^2 multiply-adds per m^2 outputs and input/output channel pair instead of
// 9 m^2 (F2: 2.25x fewer, F4: 4x). The (m+2)^2 element-wise products of all tiles become as many
// independent GEMMs, [tiles x C] x [C x K], run by the direct convolution's 1x1 register tiles
// (conv_nchwc_ukernel.h). F2's transforms only add and subtract, so it differs from the direct
// convolution by rounding only; F4's larger constants cost some accuracy (6e-6 to 2e-5 of the
// output's magnitude per layer, benchmarks/results/conv_winograd_*.txt).
//
// It is an algorithm of conv2d_nchwc: ConvNchwcKnobs::winograd selects it, the packed weights then
// hold the transformed filters, and the activation layouts, bias, epilogue hook and padded-lane
// contract are conv2d_nchwc's (conv_nchwc.h). Precondition: conv_winograd_fits(s).
//
// Packed weights: [(m+2)^2][Kb][Cb][ic_bn][oc_bn] (xi = (m+2)*i + j indexes the transformed tap),
// zero at padded channels. Work: when the packed weights fit a core's L2 share, each thread
// transforms, multiplies and inverse-transforms its own chunks of tiles in scratch (no barrier, the
// chunk never leaves L2); larger weights go in three phases over the whole layer (input transform;
// GEMMs split by (xi, output block), so each thread streams only its share of the weights; output
// transform), with the transformed tensors in the calling thread's scratch, in groups of tiles
// when a whole large batch would need more than conv_winograd_phase_budget floats of it.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv_nchwc.h"

namespace dnnfusion::kernels {

// groups == 1, 3x3 taps, stride 1, dilation 1 (any zero padding).
bool conv_winograd_fits(const Conv2dShape& s);
// Throws dnnfusion::Error, prefixed with `who` and naming what does not fit, unless conv_winograd_fits(s).
void conv_winograd_require_fits(const Conv2dShape& s, const char* who);

// The Winograd tile the layout search picks for s (with its N, H, W): 0 (direct) unless it fits
// and the GEMM work it saves outweighs its transforms and its larger weights, else 2 or 4
// (measured on this family's kernels; see the definition).
int conv_winograd_tile(const Conv2dShape& s);

int64_t conv_winograd_packed_weight_floats(const Conv2dShape& s, const ConvNchwcKnobs& k);
// w_kcrs: PyTorch weight [K][C][3][3]. Transforms in double, rounds once to float.
void conv_winograd_pack_weight(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* w_kcrs, float* out);

// conv2d_nchwc's contract (y = act(conv(x, w) + bias + residual), epilogue per contiguous run of
// one oc block's positions, each element once) with packed_w from conv_winograd_pack_weight.
// Register tiles of the GEMMs hold conv_nchwc_max_reg_n(isa, oc_bn) tiles; reg_n and unroll_ker
// do not apply. Throws dnnfusion::Error unless conv_winograd_fits(s) and the blocks are valid.
void conv2d_winograd_nchwc(const Conv2dShape& s, const ConvNchwcKnobs& k, const float* x, const float* packed_w,
                           const float* bias, const float* residual, Activation act, float* y, const Parallel& par,
                           ElementHook epilogue = {}, Isa isa = active_isa());

// Most scratch (floats) the three-phase split holds for the transformed input and products
// before it works in groups of tiles (default 8 Mi = 32 MiB); returns the previous value. For
// tests, to force groups on small shapes.
int64_t conv_winograd_phase_budget(int64_t floats);

}  // namespace dnnfusion::kernels
