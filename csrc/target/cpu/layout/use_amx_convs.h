// Runs convolutions as fp32-accurate bf16x6 GEMMs on AMX (kernels/cpu/conv_bf16x6.h: 1x1 stride-1
// convs read their input as the rows, the others gather their taps) where the CPU has AMX: each
// eligible conv2d_nchwc gets amx = 1 and reads conv2d_nchwc_repack_bf16x6 of its (folded)
// direct-kernel weight, which constant folding then evaluates. Eligible: op conv2d_nchwc (not a
// fused variant), groups 1, no Winograd, no input scale (fold_input_scale), 16-lane-multiple
// channel blocks, a compile-time weight, and amx_conv_pays_off: at least kAmxConvMinRows output
// positions (N x OH x OW; half as many from kAmxConvWideOutChannels outputs on),
// kAmxConvMinChannels input and kAmxConvMinOutChannels output channels; of those, the ones
// `amx` takes (measure_amx.h: by default the ones timed faster than the direct kernel there).
// Below those the split of the input into three bf16 terms is shared by too few products:
// ResNet-50's layers on an Intel Xeon with AMX, 2 threads, against the direct kernel: 64-output
// 1x1 convs 0.75-0.95x, 256 -> 64 at 56x56 0.81x, 1024 -> 256 at 14x14 batch 1 (196 positions)
// 0.92x; the layers taken 1.02-1.81x (batch 8: 1x1, strided 1x1 and strided 3x3 layers together
// 1.32x, `dnnfusion_conv_bench 2 amx`).
// Precondition: the graph verifies; layout propagation, constant folding and the conv fusions ran
// (they read the direct kernel's packing, so this pass comes after them). Postcondition: the
// graph verifies and computes the same values within fp32 rounding.
#pragma once
#include <cstdint>

#include "ecg/graph.h"
#include "kernels/cpu/conv2d.h"
#include "target/cpu/layout/measure_amx.h"

namespace dnnfusion::layout {

inline constexpr int64_t kAmxConvMinRows = 256;
// Wide layers share the split among more output channels: half the positions suffice from this
// many outputs on (ResNet-50 at batch 1: 256 -> 1024 at 14x14, 196 positions, 1.13-1.17x; 1024 ->
// 512 there 1.06-1.14x, 1024 -> 256 0.85-0.92x).
inline constexpr int64_t kAmxConvWideOutChannels = 1024;
inline constexpr int64_t kAmxConvMinChannels = 32;
inline constexpr int64_t kAmxConvMinOutChannels = 128;

// The shape-level half of the choice (outputs, positions, input channels), for benchmarks.
bool amx_conv_pays_off(const kernels::Conv2dShape& s);

// `stats` (optional) receives the number of convolutions switched to AMX and declined by the choice.
ecg::Graph use_amx_convs(const ecg::Graph& g, const AmxChoice& amx = {}, AmxChoiceStats* stats = nullptr);

}  // namespace dnnfusion::layout
