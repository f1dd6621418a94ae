#include "target/cpu/layout/fuse_channel_mean.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "rewrite/graph_edit.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

namespace {

// The mean node among the users of conv node c's output that the kernel can compute, or -1.
int foldable_mean(const Graph& g, const Node& c) {
  if (c.op != "conv2d_nchwc_expand_dw" || c.outputs.size() != 1) return -1;
  const auto& y = g.value(c.outputs[0]);
  if (y.shape.size() != 5 || y.dtype != DType::Float32) return -1;
  for (int u : y.users) {
    const Node& m = g.node(u);
    if (m.op != "mean" || m.inputs.size() != 1 || m.outputs.size() != 1 || m.has_attr("dtype")) continue;
    if (m.attr_int("keepdim", 0) != 1) continue;
    std::set<int64_t> dims;
    for (auto d : m.attr_ints("dim", {})) dims.insert(d < 0 ? d + 5 : d);
    if (dims != std::set<int64_t>{2, 3}) continue;
    const auto& out = g.value(m.outputs[0]);
    const std::vector<int64_t> want{y.shape[0], y.shape[1], 1, 1, y.shape[4]};
    if (out.shape == want && out.dtype == DType::Float32) return m.id;
  }
  return -1;
}

}  // namespace

Graph fuse_channel_mean(const Graph& g, int* fused) {
  std::unordered_map<int, int> mean_of;  // conv node -> its folded mean node
  std::unordered_set<int> skip;
  for (const Node& n : g.nodes())
    if (const int m = foldable_mean(g, n); m >= 0) {
      mean_of[n.id] = m;
      skip.insert(m);
    }
  if (fused) *fused = static_cast<int>(mean_of.size());
  if (mean_of.empty()) return g;
  rewrite::GraphRebuilder rb(g);
  for (const Node& n : g.nodes()) {
    if (skip.count(n.id)) continue;
    auto it = mean_of.find(n.id);
    if (it == mean_of.end()) {
      rb.copy_node(n.id);
      continue;
    }
    const Node& m = g.node(it->second);
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(rb.map(v));
    const auto& y = g.value(n.outputs[0]);
    const auto& mv = g.value(m.outputs[0]);
    rb.origin = n.origin + "+" + m.origin;
    const auto outs = rb.add_outputs(n.op, ins, {{y.shape, y.dtype}, {mv.shape, mv.dtype}}, n.attrs);
    rb.replace(y.id, outs[0]);
    rb.replace(mv.id, outs[1]);
  }
  return rb.finish();
}

}  // namespace dnnfusion::layout
