#include "target/cpu/layout/fuse_expand_depthwise.h"

#include <unordered_map>
#include <unordered_set>

#include "rewrite/graph_edit.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

namespace {

struct Chain {
  int expand = -1, act = -1, dw = -1, dw_act = -1;  // node ids (act, dw_act -1: none)
  std::string act_name = "none", dw_act_name = "none";
};

// The single user of node n's only output, or -1 (several users, a graph output, no users).
int sole_user(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1) return -1;
  const auto& v = g.value(n.outputs[0]);
  if (v.is_output || v.users.size() != 1) return -1;
  return v.users[0];
}

// The activation name the fused kernel knows for node n, or "" (not one it runs).
std::string activation_of(const Node& n) {
  if (n.op == "relu" || n.op == "hardswish" || n.op == "silu") return n.op;
  if (n.op == "hardtanh" && n.attr_float("min_val", -1.0) == 0.0 && n.attr_float("max_val", 1.0) == 6.0)
    return "relu6";
  if (n.op == "clamp" && n.has_attr("min") && n.has_attr("max") && n.attr_float("min", -1.0) == 0.0 &&
      n.attr_float("max", 0.0) == 6.0)
    return "relu6";
  return "";
}

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

Chain match(const Graph& g, const Node& e) {
  Chain none;
  if (!is_expand(e)) return none;
  int next = sole_user(g, e);
  if (next < 0) return none;
  Chain c;
  c.expand = e.id;
  const Node& a = g.node(next);
  if (const std::string act = activation_of(a); !act.empty() && a.inputs.size() == 1) {
    c.act = a.id;
    c.act_name = act;
    next = sole_user(g, a);
    if (next < 0) return none;
  }
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

}  // namespace

Graph fuse_expand_depthwise(const Graph& g, int* fused) {
  std::unordered_map<int, Chain> by_dw;  // depthwise node -> its chain
  std::unordered_set<int> skip;          // expand and activation nodes folded into a chain
  for (const Node& n : g.nodes()) {
    const Chain c = match(g, n);
    if (c.dw < 0) continue;
    by_dw[c.dw] = c;
    skip.insert(c.expand);
    if (c.act >= 0) skip.insert(c.act);
    if (c.dw_act >= 0) skip.insert(c.dw_act);
  }
  if (fused) *fused = static_cast<int>(by_dw.size());
  if (by_dw.empty()) return g;
  rewrite::GraphRebuilder rb(g);
  for (const Node& n : g.nodes()) {
    if (skip.count(n.id)) continue;
    auto it = by_dw.find(n.id);
    if (it == by_dw.end()) {
      rb.copy_node(n.id);
      continue;
    }
    const Node& e = g.node(it->second.expand);
    ecg::AttrMap attrs = n.attrs;
    for (const char* k : {"ic_bn", "reg_n", "unroll_ker", "in_channels", "weight_shape"})
      attrs[std::string("expand_") + k] = e.attrs.at(k);
    for (const char* k : {"stride", "padding", "dilation"})
      if (e.has_attr(k)) attrs[std::string("expand_") + k] = e.attrs.at(k);
    attrs["expand_act"] = it->second.act_name;
    attrs["dw_act"] = it->second.dw_act_name;
    rb.origin = e.origin + "+" + n.origin;
    auto in = [&](const Node& c, int slot) { return c.input_or_absent(slot) >= 0 ? rb.map(c.inputs[slot]) : -1; };
    const int last = it->second.dw_act >= 0 ? it->second.dw_act : n.id;
    const auto& out = g.value(g.node(last).outputs[0]);
    const int y = rb.add("conv2d_nchwc_expand_dw", {rb.map(e.inputs[0]), rb.map(e.inputs[1]), in(e, 2),
                                                    rb.map(n.inputs[1]), in(n, 2)},
                         out.shape, out.dtype, attrs);
    rb.replace(out.id, y);
  }
  return rb.finish();
}

}  // namespace dnnfusion::layout
