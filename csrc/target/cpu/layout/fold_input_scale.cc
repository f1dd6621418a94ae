#include "target/cpu/layout/fold_input_scale.h"

#include <unordered_map>
#include <unordered_set>

#include "rewrite/graph_edit.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

namespace {

// For a mul node: the conv it can fold into and which operand is x (0/1) and which is s, or -1.
struct Match {
  int conv = -1;
  int x = -1, s = -1;
};

Match match(const Graph& g, const Node& m) {
  Match none;
  if (m.op != "mul" || m.inputs.size() != 2 || m.outputs.size() != 1) return none;
  const auto& y = g.value(m.outputs[0]);
  if (y.shape.size() != 5 || y.dtype != DType::Float32 || y.is_output || y.users.size() != 1) return none;
  const Node& c = g.node(y.users[0]);
  if (c.op != "conv2d_nchwc" || c.inputs.empty() || c.inputs[0] != y.id || c.input_or_absent(3) >= 0 ||
      c.attr_int("groups", 1) != 1 || c.attr_int("winograd", 0) != 0)
    return none;
  for (int xi = 0; xi < 2; ++xi) {
    const auto& xv = g.value(m.inputs[xi]);
    const auto& sv = g.value(m.inputs[1 - xi]);
    if (xv.shape != y.shape || xv.dtype != DType::Float32 || sv.dtype != DType::Float32 || sv.is_compile_time())
      continue;
    const auto& ss = sv.shape;
    if (ss.size() != 5 || (ss[0] != 1 && ss[0] != y.shape[0]) || ss[1] != y.shape[1] || ss[2] != 1 || ss[3] != 1 ||
        ss[4] != y.shape[4] || c.attr_int("ic_bn", -1) != y.shape[4])
      continue;
    // Scaling K x C x R x S weights per image (read, write) against writing and re-reading H x W x C.
    const auto ws = c.attr_ints("weight_shape", {});
    if (ws.size() != 4 || ws[0] * ws[2] * ws[3] > y.shape[2] * y.shape[3]) return none;
    return Match{c.id, m.inputs[xi], m.inputs[1 - xi]};
  }
  return none;
}

}  // namespace

Graph fold_input_scale(const Graph& g, int* folded) {
  std::unordered_map<int, Match> by_conv;  // conv node -> the mul folded into it
  std::unordered_set<int> skip;            // folded mul nodes
  for (const Node& n : g.nodes()) {
    const Match m = match(g, n);
    if (m.conv < 0) continue;
    by_conv[m.conv] = m;
    skip.insert(n.id);
  }
  if (folded) *folded = static_cast<int>(by_conv.size());
  if (by_conv.empty()) return g;
  rewrite::GraphRebuilder rb(g);
  for (const Node& n : g.nodes()) {
    if (skip.count(n.id)) continue;
    auto it = by_conv.find(n.id);
    if (it == by_conv.end()) {
      rb.copy_node(n.id);
      continue;
    }
    rb.origin = n.origin;
    const int bias = n.input_or_absent(2) >= 0 ? rb.map(n.inputs[2]) : -1;
    const auto& out = g.value(n.outputs[0]);
    const int y = rb.add(n.op, {rb.map(it->second.x), rb.map(n.inputs[1]), bias, rb.map(it->second.s)}, out.shape,
                         out.dtype, n.attrs);
    rb.replace(out.id, y);
  }
  return rb.finish();
}

}  // namespace dnnfusion::layout
