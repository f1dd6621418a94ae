// Fused front half of an inverted residual block (MobileNet-V2/V3, EfficientNet): a 1x1 "expand"
// convolution, its activation and the depthwise convolution that follows, on NCHW[b]c tensors,
// without writing the expanded tensor. That tensor is the widest of the block (96 x 112 x 112
// floats in MobileNet-V2: 4.8 MB, more than L2), and the two convolutions run memory-bound on it
// when it makes the round trip. The first convolution may also be any groups-1 convolution (a
// network's stem, 3x3 stride 2 over the image, whose 32 x 112 x 112 output the first depthwise
// conv reads): the same holds for its output. Here each work item owns one channel block of the
// first conv's output and a band of output rows: it computes the rows the band's depthwise taps
// read into a small per-thread window (kept in L1/L2), applies the activation, and runs the
// depthwise rows from that window; rows shared with the next window are moved, not recomputed.
// Bands split only where the threads would otherwise idle (the rows at a band's top edge are
// computed twice). Both convolutions use conv2d_nchwc's tiles and knobs (conv_nchwc.h), so their
// results equal running conv2d_nchwc, the activation, then conv2d_nchwc (bit for bit for
// None/Relu/Relu6).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/cpu/conv_nchwc.h"

namespace dnnfusion::kernels {

// The activation between the two convolutions (and the one after the depthwise conv). Relu/Relu6
// run in the tiles' registers; Hardswish and Silu as a vector pass over each window chunk (output
// row).
enum class ExpandAct : int8_t { None, Relu, Relu6, Hardswish, Silu };
const char* expand_act_name(ExpandAct a);
// Throws dnnfusion::Error naming the allowed names unless `name` is one of none, relu, relu6,
// hardswish, silu.
ExpandAct expand_act_from_name(const std::string& name);

// Throws dnnfusion::Error naming the problem unless: `expand` is a groups == 1 convolution C -> M
// (any kernel size, stride, padding and dilation; the 1x1 stride-1 unpadded one runs its rows as
// one flat run); `dw` is depthwise over M channels of expand's N x OH x OW output (any kernel
// size, stride, padding and dilation); both pass conv_nchwc_check on isa; and the expand's output
// block is the depthwise block (k_expand.oc_bn == k_dw.oc_bn).
void conv_nchwc_expand_dw_check(const Conv2dShape& expand, const ConvNchwcKnobs& k_expand, const Conv2dShape& dw,
                                const ConvNchwcKnobs& k_dw, Isa isa);

// y = out_act(dw(act(expand(x, w_expand) + b_expand), w_dw) + b_dw), then the epilogue, with x NCHW[ic_bn]c
// (k_expand.ic_bn), y NCHW[b]c (b = k_dw.oc_bn). Weights packed by conv_nchwc_pack_weight for
// their own shape and knobs; biases [M] or null. The epilogue contract is conv2d_nchwc's for the
// depthwise output (once per output row of one block, start = blocked linear index). Padded lanes
// of y are 0 before the epilogue; x's padded lanes are never read. y must not overlap x or the
// weights.
// y_mean (optional, [N, ceil(M/b), b]): the mean of y over its OH x OW positions per image and
// channel (the squeeze of a squeeze-excitation block), taken from each output row while it is in
// L1, before the epilogue; padded lanes 0. Summed per work item (band of rows), then over the
// bands in order: repeatable for a given thread count (which sets the bands), whatever the
// schedule.
void conv2d_nchwc_expand_dw(const Conv2dShape& expand, const ConvNchwcKnobs& k_expand, const Conv2dShape& dw,
                            const ConvNchwcKnobs& k_dw, const float* x, const float* w_expand, const float* b_expand,
                            ExpandAct act, const float* w_dw, const float* b_dw, ExpandAct out_act, float* y,
                            float* y_mean, const Parallel& par, ElementHook epilogue = {}, Isa isa = active_isa());

// The whole inverted residual block but its residual add: the above, then a 1x1 "project" conv
// over the depthwise output, without writing the depthwise output either (in MobileNet-V2 it is
// the block's widest tensor after the expanded one, and the projection read it back from memory).
// A work item owns a band of output rows of one image and every channel block: per chunk of
// rows it runs each block's expand + depthwise rows into per-thread scratch (kept in L2), then
// the projection's tiles over them, every output block.
// Throws dnnfusion::Error naming the problem unless conv_nchwc_expand_dw_check passes, p is a 1x1
// stride-1 unpadded groups-1 conv over the depthwise output (C = M, N x OH x OW), it passes
// conv_nchwc_check, and kp.ic_bn == kd.oc_bn. add_expand: also the projection's output shape and
// block equal the first conv's (the skip connection of MobileNet-V3's first block).
void conv_nchwc_expand_dw_project_check(const Conv2dShape& expand, const ConvNchwcKnobs& k_expand,
                                        const Conv2dShape& dw, const ConvNchwcKnobs& k_dw, const Conv2dShape& project,
                                        const ConvNchwcKnobs& k_project, Isa isa, bool add_expand = false);

// y = project(dw_act(dw(e)) + b_dw)) + b_project with e = act(expand(x) + b_expand), then the
// epilogue, y NCHW[k_project.oc_bn]c. add_expand: y = ... + b_project + e, the skip connection
// taken from the expanded rows the kernel holds anyway, so e is never written. Results equal
// conv2d_nchwc_expand_dw followed by conv2d_nchwc with the same knobs (and e as its residual;
// bit for bit for None/Relu/Relu6). The epilogue contract is conv2d_nchwc's for the project
// output (runs of one output block's positions, several rows at a time). y must not overlap x or
// the weights.
void conv2d_nchwc_expand_dw_project(const Conv2dShape& expand, const ConvNchwcKnobs& k_expand, const Conv2dShape& dw,
                                    const ConvNchwcKnobs& k_dw, const Conv2dShape& project,
                                    const ConvNchwcKnobs& k_project, const float* x, const float* w_expand,
                                    const float* b_expand, ExpandAct act, const float* w_dw, const float* b_dw,
                                    ExpandAct dw_act, const float* w_project, const float* b_project, bool add_expand,
                                    float* y, const Parallel& par, ElementHook epilogue = {},
                                    Isa isa = active_isa());

}  // namespace dnnfusion::kernels
