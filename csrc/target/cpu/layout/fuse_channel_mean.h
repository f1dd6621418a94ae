// Folds the squeeze of a squeeze-and-excitation block into the conv kernel before it: a `mean`
// over H and W (keepdim) of a conv2d_nchwc_expand_dw node's output becomes that node's second
// output, which the kernel sums from each output row while the row is in L1
// (kernels::conv2d_nchwc_expand_dw's y_mean). The separate mean re-read the whole depthwise
// output from memory (EfficientNet-B0 at batch 8: 74 MB over its 16 blocks, about 5% of the
// call); the gate's small convs then read the means as before.
// Taken when the mean reduces exactly dims 2 and 3 of the blocked [N, Cb, H, W, b] output, keeps
// them, and yields float32 [N, Cb, 1, 1, b]; the node's output keeps its other users.
// Precondition: the graph verifies; fuse_expand_depthwise ran. Postcondition: the graph verifies
// and computes the same values up to float summation order; the folded means are gone.
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::layout {

// `fused` (optional) receives the number of means folded.
ecg::Graph fuse_channel_mean(const ecg::Graph& g, int* fused = nullptr);

}  // namespace dnnfusion::layout
