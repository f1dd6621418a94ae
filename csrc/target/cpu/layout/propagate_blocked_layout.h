// NCHW[x]c layout propagation (NeoCPU §3.1): convolutions run on channel-blocked activations
// ([N][C/x][H][W][x], x innermost) with weights packed once at compile time, and the blocked layout
// flows through the ops that do not care about it, so layout transforms happen only where an op
// needs plain NCHW (flatten, reshape, unsupported convs, graph outputs) instead of around every conv.
//   - layout-oblivious: element-wise ops (One-to-One, any broadcast operand shaped [n, C|1, h, w] is
//     blocked too — constants fold), cat along channels.
//   - layout-tolerant: convolution (dense and depthwise, whatever the callback accepts), global
//     average pooling (a mean over H, W of the blocked tensor).
//   - everything else is layout-dependent: it reads an NCHW copy made once per value.
// Transforms are plain view ops (reshape + permute) so the fusion planner and code generator treat
// them as index arithmetic: a transform next to an element-wise op fuses into it for free.
// Precondition: the graph verifies; rewriting (BN folding in particular) is done.
// Transforms to and from a padded block add a constant_pad_nd / slice of the channels.
// Postcondition: the graph verifies, computes the same values (graph inputs/outputs keep their
// NCHW shapes), and every accepted convolution is a conv2d_nchwc reading a packed weight produced
// by a conv2d_nchwc_pack_weight node on the original (compile-time) weight, which constant folding
// then evaluates once.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "ecg/graph.h"

namespace dnnfusion::layout {

// Channel blocks need not divide the channels: a blocked tensor of C channels in blocks of b has
// ceil(C/b) blocks, the last one padded. Padded lanes hold unspecified values (element-wise ops
// compute on them, e.g. sigmoid(0) = 0.5); convolutions never read them, cat only joins tensors
// whose channels fill their blocks, and the transform back to NCHW drops them. A block fits C
// channels when it divides C or pads them by at most half: 24 channels run in one 32-lane block
// (two zmm per position) instead of three 8-lane ones (half-width ymm), as ONNX Runtime does.
// The rule is the kernel family's (kernels::nchwc_block_fits), so default knobs and layouts agree.
bool block_fits(int64_t C, int b);

// The per-convolution choice the layout search (or a heuristic) makes.
struct ConvScheme {
  int ic_bn = 0;          // input channel block (fits C, see block_fits; depthwise: = oc_bn)
  int oc_bn = 0;          // output channel block (fits K)
  int reg_n = 0;          // kernel knobs, passed through to conv2d_nchwc
  bool unroll_ker = false;
  int winograd = 0;  // 2 / 4: Winograd F(2x2, 3x3) / F(4x4, 3x3) instead of the direct algorithm (conv_winograd.h)
};

// What the layout pass asks per convolution node: the scheme to run it with, given the channel
// block its input is already available in (0: only NCHW), or nullopt to keep it an NCHW conv.
using ConvSchemeFn = std::function<std::optional<ConvScheme>(const ecg::Graph&, const ecg::Node& conv, int input_block)>;

struct LayoutStats {
  int convs_blocked = 0;      // convolutions now running in NCHW[x]c
  int winograd_f2 = 0;        // ... of them as Winograd F(2x2, 3x3)
  int winograd_f4 = 0;        // ... and as Winograd F(4x4, 3x3)
  int to_blocked = 0;         // NCHW -> NCHW[x]c transforms of activations
  int to_plain = 0;           // NCHW[x]c -> NCHW transforms of activations
  int reblocked = 0;          // NCHW[x]c -> NCHW[y]c
  int ops_propagated = 0;     // element-wise / cat / pooling ops running on blocked tensors
};

// propagate = false is the ablation "layout-transform elimination off": every blocked conv converts
// its input from NCHW and its output back to NCHW, and nothing else runs blocked.
ecg::Graph propagate_blocked_layout(const ecg::Graph& g, const ConvSchemeFn& scheme, LayoutStats* stats = nullptr,
                                    bool propagate = true);

}  // namespace dnnfusion::layout
