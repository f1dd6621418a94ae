// Runs 1x1 stride-1 convolutions as fp32-accurate bf16x6 GEMMs on AMX (kernels/cpu/conv_bf16x6.h)
// where the CPU has AMX: each eligible conv2d_nchwc gets amx = 1 and reads
// conv2d_nchwc_repack_bf16x6 of its (folded) direct-kernel weight, which constant folding then
// evaluates. Eligible: op conv2d_nchwc (not a fused variant), groups 1, 1x1 kernel, stride 1, no
// padding, no Winograd, no input scale (fold_input_scale), 16-lane-multiple channel blocks, a
// compile-time weight, at least kAmxConvMinRows positions (N x H x W), kAmxConvMinChannels input
// and kAmxConvMinOutChannels output channels. Below those the split of the input into three
// bf16 terms (once per input value) is shared by too few products: ResNet-50's 1x1 layers on an
// Intel Xeon with AMX, 2 threads, against the direct kernel: 256 -> 64 at 56x56 0.82-0.85x,
// 1024 -> 256 at 14x14 batch 1 (196 positions) 0.81x, 2048 -> 512 at 7x7 batch 1 0.89x; the
// layers kept 1.03-1.63x (batch 8: all twelve 1.28x together).
// Precondition: the graph verifies; layout propagation, constant folding and the conv fusions ran
// (they read the direct kernel's packing, so this pass comes after them). Postcondition: the
// graph verifies and computes the same values within fp32 rounding.
#pragma once
#include <cstdint>

#include "ecg/graph.h"
#include "kernels/cpu/conv2d.h"

namespace dnnfusion::layout {

inline constexpr int64_t kAmxConvMinRows = 256;
inline constexpr int64_t kAmxConvMinChannels = 32;
inline constexpr int64_t kAmxConvMinOutChannels = 128;

// The shape-level half of the choice (outputs, positions, input channels), for benchmarks.
bool amx_conv_pays_off(const kernels::Conv2dShape& s);

// `converted` (optional) receives the number of convolutions switched to AMX.
ecg::Graph use_amx_convs(const ecg::Graph& g, int* converted = nullptr);

}  // namespace dnnfusion::layout
