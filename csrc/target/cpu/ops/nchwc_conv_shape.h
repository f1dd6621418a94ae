// conv2d_nchwc's attributes as the kernels' problem shape and knobs, for its kernel bindings (ops_nn.cc) and
// the layout passes that reason about a blocked conv (use_amx_convs). The layout pass keeps the
// original conv attributes and adds ic_bn/oc_bn/reg_n/unroll_ker/winograd, in_channels and
// weight_shape ([K, C/groups, R, S]); the activation is [N, ceil(C/ic_bn), H, W, ic_bn].
// Precondition: n carries a 4-D weight_shape (with `prefix`); with_input: input 0 is 5-D.
#pragma once
#include <string>

#include "ecg/graph.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv_nchwc.h"

namespace dnnfusion::target::cpu {

// with_input: N, H, W from the blocked input; else the smallest input the taps cover (N = 1), for
// what depends on channels and taps only (weight packing). prefix "expand_": the first conv of a
// conv2d_nchwc_expand_dw, whose attributes carry that prefix.
kernels::Conv2dShape nchwc_conv_shape(const ecg::Graph& g, const ecg::Node& n, bool with_input,
                                      const std::string& prefix = "");

// The kernel knobs of a conv2d_nchwc-family node (ic_bn, oc_bn, reg_n, unroll_ker, winograd, amx).
kernels::ConvNchwcKnobs nchwc_knobs(const ecg::Node& n);

}  // namespace dnnfusion::target::cpu
