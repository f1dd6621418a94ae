#include "target/cpu/layout/fuse_expand_depthwise.h"

#include <unordered_map>
#include <unordered_set>

#include "rewrite/graph_edit.h"
#include "target/cpu/layout/conv_chain.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

Graph fuse_expand_depthwise(const Graph& g, int* fused) {
  std::unordered_map<int, ConvChain> by_dw;  // depthwise node -> its chain
  std::unordered_set<int> skip;          // expand and activation nodes folded into a chain
  for (const Node& n : g.nodes()) {
    const ConvChain c = match_conv_chain(g, n);
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
    rb.origin = e.origin + "+" + n.origin;
    auto in = [&](const Node& c, int slot) { return c.input_or_absent(slot) >= 0 ? rb.map(c.inputs[slot]) : -1; };
    const auto& out = g.value(chain_output(g, it->second));
    const int y = rb.add("conv2d_nchwc_expand_dw", {rb.map(e.inputs[0]), rb.map(e.inputs[1]), in(e, 2),
                                                    rb.map(n.inputs[1]), in(n, 2)},
                         out.shape, out.dtype, expand_dw_attrs(g, it->second));
    rb.replace(out.id, y);
  }
  return rb.finish();
}

}  // namespace dnnfusion::layout
