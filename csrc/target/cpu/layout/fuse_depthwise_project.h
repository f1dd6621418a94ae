// Fuses the 1x1 projection of an inverted residual block into the conv2d_nchwc_expand_dw node
// before it: the pair becomes one conv2d_nchwc_expand_dw_project node that never writes the
// depthwise output (kernels::conv2d_nchwc_expand_dw_project: every channel block's depthwise rows
// of a chunk stay in per-thread scratch while the projection reads them).
// Taken when the expand_dw node has one output (no squeeze-excitation mean), that output is not a
// graph output and its only user is a conv2d_nchwc that is 1x1, stride 1, unpadded, groups 1,
// direct (not Winograd), without an input scale, reading it with the depthwise block
// (ic_bn == oc_bn), and when the depthwise output is at least kMinBytes: measured on Zen 5 at
// batch 8, the fusion gains 1.08-1.10x where that tensor is 9.6-14.4 MB (56x56 planes; it made a
// round trip through memory) and 0.96-1.00x below 4 MB, where L3 holds it and the separate
// projection's better work split wins. The fused node keeps the expand_dw node's attributes and
// adds the projection's as project_weight_shape, project_in_channels, project_oc_bn,
// project_reg_n, project_unroll_ker; inputs (the expand_dw node's five, projection packed weight,
// projection bias or absent). Element-wise users of the projection (the residual add) are left
// to the fusion planner, which runs them as the node's epilogue.
// Also the whole block whose skip connection starts at its first conv's output (MobileNet-V3's
// first block): a conv -> activation -> depthwise -> activation chain (as fuse_expand_depthwise
// takes it, except that the first conv's activated output has one more user), its projection as
// above, and add(projection, that output) of one shape and block become one node with
// project_add_expand = 1, replacing the add: the kernel adds the first conv's rows from its row
// window, so that tensor is never written (at least skip_min_bytes of it, whole batch).
// Precondition: the graph verifies; fuse_expand_depthwise ran. Postcondition: the graph verifies
// and computes the same values (bit for bit: the kernel runs the same tiles in the same order).
#pragma once
#include <cstdint>

#include "ecg/graph.h"

namespace dnnfusion::layout {

// The smallest depthwise output (bytes, whole batch) whose projection is fused.
constexpr int64_t kMinDepthwiseProjectBytes = 8 << 20;

// The smallest first-conv output (bytes, whole batch) of a block fused with its skip connection:
// any. MobileNet-V3-Large's first block on Zen 5 (2 threads): the stem, depthwise and projection
// steps 0.137 -> 0.130 ms at batch 1 (0.8 MB) and 1.39-1.70 -> 1.22 ms at batch 8.
constexpr int64_t kMinSkipBlockBytes = 0;

// `fused` (optional) receives the number of projections and blocks fused. min_bytes,
// skip_min_bytes: the size rules above (tests lower them to fuse small graphs).
ecg::Graph fuse_depthwise_project(const ecg::Graph& g, int* fused = nullptr,
                                  int64_t min_bytes = kMinDepthwiseProjectBytes,
                                  int64_t skip_min_bytes = kMinSkipBlockBytes);

}  // namespace dnnfusion::layout
