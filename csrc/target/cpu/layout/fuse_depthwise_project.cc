#include "target/cpu/layout/fuse_depthwise_project.h"

#include <unordered_map>
#include <unordered_set>

#include "rewrite/graph_edit.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

namespace {

bool all_equal(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v)
    if (e != x) return false;
  return true;
}

// The projection conv reading expand_dw node d's output that the kernel can fuse, or -1.
int fusable_projection(const Graph& g, const Node& d, int64_t min_bytes) {
  if (d.op != "conv2d_nchwc_expand_dw" || d.outputs.size() != 1) return -1;
  const auto& y = g.value(d.outputs[0]);
  if (y.is_output || y.users.size() != 1 || y.dtype != DType::Float32 || y.numel() * 4 < min_bytes) return -1;
  const Node& p = g.node(y.users[0]);
  if (p.op != "conv2d_nchwc" || p.inputs.empty() || p.inputs[0] != y.id || p.input_or_absent(3) >= 0) return -1;
  const auto ws = p.attr_ints("weight_shape", {});
  if (ws.size() != 4 || ws[2] != 1 || ws[3] != 1 || p.attr_int("groups", 1) != 1 || p.attr_int("winograd", 0) != 0)
    return -1;
  if (!all_equal(p.attr_ints("stride", {1}), 1) || !all_equal(p.attr_ints("padding", {0}), 0)) return -1;
  if (p.attr_int("ic_bn", -1) != d.attr_int("oc_bn", -2) || g.value(p.outputs[0]).dtype != DType::Float32) return -1;
  return p.id;
}

}  // namespace

Graph fuse_depthwise_project(const Graph& g, int* fused, int64_t min_bytes) {
  std::unordered_map<int, int> proj_of;  // expand_dw node -> its projection
  std::unordered_set<int> skip;
  for (const Node& n : g.nodes())
    if (const int p = fusable_projection(g, n, min_bytes); p >= 0) {
      proj_of[n.id] = p;
      skip.insert(p);
    }
  if (fused) *fused = static_cast<int>(proj_of.size());
  if (proj_of.empty()) return g;
  rewrite::GraphRebuilder rb(g);
  for (const Node& n : g.nodes()) {
    if (skip.count(n.id)) continue;
    auto it = proj_of.find(n.id);
    if (it == proj_of.end()) {
      rb.copy_node(n.id);
      continue;
    }
    const Node& p = g.node(it->second);
    ecg::AttrMap attrs = n.attrs;
    for (const char* k : {"weight_shape", "in_channels", "oc_bn", "reg_n", "unroll_ker"})
      attrs[std::string("project_") + k] = p.attrs.at(k);
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(v >= 0 ? rb.map(v) : -1);
    ins.push_back(rb.map(p.inputs[1]));
    ins.push_back(p.input_or_absent(2) >= 0 ? rb.map(p.inputs[2]) : -1);
    rb.origin = n.origin + "+" + p.origin;
    const auto& out = g.value(p.outputs[0]);
    const int y = rb.add("conv2d_nchwc_expand_dw_project", ins, out.shape, out.dtype, attrs);
    rb.replace(out.id, y);
  }
  return rb.finish();
}

}  // namespace dnnfusion::layout
