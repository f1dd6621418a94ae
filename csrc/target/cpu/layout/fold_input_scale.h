// Folds a per-channel scale of a convolution's input into the convolution: mul(x, s) whose only
// user is a conv2d_nchwc (groups == 1) becomes that conv reading x with s as its input-scale
// operand, which scales the packed weights' input-channel rows per call instead of writing x * s
// (kernels::conv2d_nchwc_scaled_input). The case it is for: a squeeze-and-excitation gate
// (EfficientNet, MobileNetV3) multiplying the depthwise output right before the projection conv:
// the product is a full activation pass (read x, write x * s, read it again in the conv) where
// the weights are far smaller. Taken only when scaling the weights moves fewer floats than the
// product does: K * R * S <= H * W (per image, K x C x R x S weights against H x W x C).
// Precondition: the graph verifies; layout propagation ran (x and s are NCHW[b]c-blocked:
// x [N, Cb, H, W, b], s [N or 1, Cb, 1, 1, b], the conv's ic_bn == b) and the packed weights are
// folded. Postcondition: the graph verifies and computes the same values; the mul is gone where
// folded.
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::layout {

// `folded` (optional) receives the number of scales folded.
ecg::Graph fold_input_scale(const ecg::Graph& g, int* folded = nullptr);

}  // namespace dnnfusion::layout
