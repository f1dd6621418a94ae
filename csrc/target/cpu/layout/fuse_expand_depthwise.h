// Fuses the front of an inverted residual block: a groups-1 conv2d_nchwc without an input scale
// (the 1x1 expand; or any other, such as the network's stem conv before the first depthwise conv),
// optionally one activation (relu, relu6 as hardtanh/clamp(0, 6), hardswish, silu), then a
// depthwise conv2d_nchwc, becomes one conv2d_nchwc_expand_dw node that never writes the first
// conv's output (kernels::conv2d_nchwc_expand_dw: row windows per channel block). That tensor is
// the widest of the block; writing and re-reading it made both convs memory-bound (MobileNet-V2's
// 16 -> 96 expand at 112x112 writes 4.8 MB, its stem 32 x 112 x 112 floats: 1.6 MB per image).
// Taken when every intermediate value has the next node as its only user and is not a graph
// output, and the first conv's output block is the depthwise block (the layout pass put no
// re-block in between). The fused node keeps the depthwise conv's attributes and adds the first
// conv's as expand_ic_bn, expand_reg_n, expand_unroll_ker, expand_in_channels,
// expand_weight_shape, expand_stride, expand_padding, expand_dilation (the last three when the
// conv has them), plus expand_act (none, relu, relu6, hardswish, silu) and dw_act: one such
// activation that is the depthwise output's only user runs in the kernel too (on the output row
// while it is in L1); its inputs are (x, first packed weight, first bias or absent, depthwise
// packed weight, depthwise bias or absent).
// Precondition: the graph verifies; layout propagation ran and the packed weights are folded.
// Postcondition: the graph verifies and computes the same values (the activation formulas are the
// generated code's).
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::layout {

// `fused` (optional) receives the number of chains fused.
ecg::Graph fuse_expand_depthwise(const ecg::Graph& g, int* fused = nullptr);

}  // namespace dnnfusion::layout
