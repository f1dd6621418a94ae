// Internal to the conv-fusing layout passes (fuse_expand_depthwise, fuse_depthwise_project):
// matching a groups-1 conv2d_nchwc -> optional activation -> depthwise conv2d_nchwc -> optional
// activation chain, and the attributes of the conv2d_nchwc_expand_dw node that replaces it.
// Precondition: the graph verifies; layout propagation ran and the packed weights are folded.
#pragma once
#include <string>

#include "ecg/graph.h"

namespace dnnfusion::layout {

struct ConvChain {
  int expand = -1, act = -1, dw = -1, dw_act = -1;  // node ids (act, dw_act -1: none)
  std::string act_name = "none", dw_act_name = "none";
  int skip_user = -1;  // with_skip: the other user of the (activated) first conv's output
};

// The single user of node n's only output, or -1 (several users, a graph output, no users).
int sole_user(const ecg::Graph& g, const ecg::Node& n);

// The activation name the fused kernels know for node n, or "" (not one they run).
std::string activation_of(const ecg::Node& n);

// The chain starting at conv e (dw == -1: none). Every intermediate value has the next node as its
// only user and is not a graph output; with_skip: the first conv's (activated) output has exactly
// one more user, recorded as skip_user (and the chain is only returned then).
ConvChain match_conv_chain(const ecg::Graph& g, const ecg::Node& e, bool with_skip = false);

// The fused node's attributes: the depthwise conv's, the first conv's prefixed with expand_, and
// expand_act / dw_act.
ecg::AttrMap expand_dw_attrs(const ecg::Graph& g, const ConvChain& c);

// The value the chain ends in: the depthwise conv's output, or its activation's.
int chain_output(const ecg::Graph& g, const ConvChain& c);

}  // namespace dnnfusion::layout
