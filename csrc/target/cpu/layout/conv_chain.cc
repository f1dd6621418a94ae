#include "target/cpu/layout/conv_chain.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

int sole_user(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1) return -1;
  const auto& v = g.value(n.outputs[0]);
  if (v.is_output || v.users.size() != 1) return -1;
  return v.users[0];
}

std::string activation_of(const Node& n) {
  if (n.op == "relu" || n.op == "hardswish" || n.op == "silu") return n.op;
  if (n.op == "hardtanh" && n.attr_float("min_val", -1.0) == 0.0 && n.attr_float("max_val", 1.0) == 6.0)
    return "relu6";
  if (n.op == "clamp" && n.has_attr("min") && n.has_attr("max") && n.attr_float("min", -1.0) == 0.0 &&
      n.attr_float("max", 0.0) == 6.0)
    return "relu6";
  return "";
}

namespace {

// The first conv: a groups-1 conv2d_nchwc without an input scale (a 1x1 expand, or a stem).
bool is_expand(const Node& n) {
  return n.op == "conv2d_nchwc" && n.input_or_absent(3) < 0 && n.attr_int("groups", 1) == 1 &&
         n.attr_ints("weight_shape", {}).size() == 4;
}

bool is_depthwise(const Node& n) {
  if (n.op != "conv2d_nchwc" || n.input_or_absent(3) >= 0) return false;
  const int64_t groups = n.attr_int("groups", 1), C = n.attr_int("in_channels", -1);
  const auto ws = n.attr_ints("weight_shape", {});
  return groups > 1 && groups == C && ws.size() == 4 && ws[0] == C;
}

// The users of node n's only output when it is not a graph output: the next node of the chain and,
// with_skip, exactly one other (*skip). -1: no such chain link.
int next_in_chain(const Graph& g, const Node& n, bool with_skip, int* skip) {
  if (!with_skip) return sole_user(g, n);
  if (n.outputs.size() != 1) return -1;
  const auto& v = g.value(n.outputs[0]);
  if (v.is_output || v.users.size() != 2 || v.users[0] == v.users[1]) return -1;
  // The chain goes on through the activation or the depthwise conv; the other user is the skip.
  for (int k = 0; k < 2; ++k) {
    const Node& u = g.node(v.users[k]);
    if ((is_depthwise(u) || !activation_of(u).empty()) && u.inputs[0] == v.id) {
      *skip = v.users[1 - k];
      return u.id;
    }
  }
  return -1;
}

}  // namespace

ConvChain match_conv_chain(const Graph& g, const Node& e, bool with_skip) {
  ConvChain none;
  if (!is_expand(e)) return none;
  ConvChain c;
  c.expand = e.id;
  // The skip starts at the activated output when there is an activation, else at the conv's.
  int next = sole_user(g, e);
  if (next >= 0) {
    const Node& a = g.node(next);
    if (const std::string act = activation_of(a); !act.empty() && a.inputs.size() == 1) {
      c.act = a.id;
      c.act_name = act;
      next = next_in_chain(g, a, with_skip, &c.skip_user);
    } else if (with_skip) {
      return none;  // the conv's output has one user that is not an activation: no skip here
    }
  } else if (with_skip) {
    next = next_in_chain(g, e, true, &c.skip_user);
  }
  if (next < 0 || (with_skip && c.skip_user < 0)) return none;
  const Node& d = g.node(next);
  const int x = c.act >= 0 ? g.node(c.act).outputs[0] : e.outputs[0];
  if (!is_depthwise(d) || d.inputs[0] != x || d.attr_int("ic_bn", -1) != e.attr_int("oc_bn", -2) ||
      g.value(x).dtype != DType::Float32)
    return none;
  c.dw = d.id;
  if (const int u = sole_user(g, d); u >= 0) {  // the depthwise conv's own activation
    const Node& a2 = g.node(u);
    if (const std::string act = activation_of(a2); !act.empty() && a2.inputs.size() == 1) {
      c.dw_act = a2.id;
      c.dw_act_name = act;
    }
  }
  return c;
}

ecg::AttrMap expand_dw_attrs(const Graph& g, const ConvChain& c) {
  const Node& e = g.node(c.expand);
  ecg::AttrMap attrs = g.node(c.dw).attrs;
  for (const char* k : {"ic_bn", "reg_n", "unroll_ker", "in_channels", "weight_shape"})
    attrs[std::string("expand_") + k] = e.attrs.at(k);
  for (const char* k : {"stride", "padding", "dilation"})
    if (e.has_attr(k)) attrs[std::string("expand_") + k] = e.attrs.at(k);
  attrs["expand_act"] = c.act_name;
  attrs["dw_act"] = c.dw_act_name;
  return attrs;
}

int chain_output(const Graph& g, const ConvChain& c) {
  return g.node(c.dw_act >= 0 ? c.dw_act : c.dw).outputs[0];
}

}  // namespace dnnfusion::layout
