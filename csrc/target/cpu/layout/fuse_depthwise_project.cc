#include "target/cpu/layout/fuse_depthwise_project.h"

#include <unordered_map>
#include <unordered_set>

#include "rewrite/graph_edit.h"
#include "target/cpu/layout/conv_chain.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

namespace {

bool all_equal(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v)
    if (e != x) return false;
  return true;
}

// Whether p is a projection the kernel can run after the depthwise conv: a direct 1x1 stride-1
// unpadded groups-1 conv2d_nchwc without an input scale reading value `in` in blocks of `block`.
bool is_projection(const Graph& g, const Node& p, int in, int64_t block) {
  if (p.op != "conv2d_nchwc" || p.inputs.empty() || p.inputs[0] != in || p.input_or_absent(3) >= 0) return false;
  const auto ws = p.attr_ints("weight_shape", {});
  if (ws.size() != 4 || ws[2] != 1 || ws[3] != 1 || p.attr_int("groups", 1) != 1 || p.attr_int("winograd", 0) != 0)
    return false;
  if (!all_equal(p.attr_ints("stride", {1}), 1) || !all_equal(p.attr_ints("padding", {0}), 0)) return false;
  return p.attr_int("ic_bn", -1) == block && g.value(p.outputs[0]).dtype == DType::Float32;
}

// The projection conv reading expand_dw node d's output that the kernel can fuse, or -1.
int fusable_projection(const Graph& g, const Node& d, int64_t min_bytes) {
  if (d.op != "conv2d_nchwc_expand_dw" || d.outputs.size() != 1) return -1;
  const auto& y = g.value(d.outputs[0]);
  if (y.is_output || y.users.size() != 1 || y.dtype != DType::Float32 || y.numel() * 4 < min_bytes) return -1;
  const Node& p = g.node(y.users[0]);
  return is_projection(g, p, y.id, d.attr_int("oc_bn", -2)) ? p.id : -1;
}

// A whole block whose skip connection starts at its first conv's activated output x (MobileNet-V3's
// first block): conv -> act -> depthwise -> act -> 1x1 projection -> add(projection, x).
struct SkipBlock {
  ConvChain chain;
  int project = -1, add = -1;
};

SkipBlock match_skip_block(const Graph& g, const Node& e, int64_t min_bytes) {
  SkipBlock none, b;
  b.chain = match_conv_chain(g, e, /*with_skip=*/true);
  const ConvChain& c = b.chain;
  if (c.dw < 0) return none;
  const auto& dv = g.value(chain_output(g, c));
  if (dv.is_output || dv.users.size() != 1 || dv.numel() * 4 < min_bytes) return none;
  const Node& p = g.node(dv.users[0]);
  if (!is_projection(g, p, dv.id, g.node(c.dw).attr_int("oc_bn", -2)) || sole_user(g, p) != c.skip_user) return none;
  const Node& a = g.node(c.skip_user);
  const int x = c.act >= 0 ? g.node(c.act).outputs[0] : e.outputs[0];
  const int y = p.outputs[0];
  if (a.op != "add" || a.inputs.size() != 2 || a.attr_float("alpha", 1.0) != 1.0) return none;
  if (!((a.inputs[0] == y && a.inputs[1] == x) || (a.inputs[0] == x && a.inputs[1] == y))) return none;
  // Same shape, dtype and block: the kernel adds the first conv's rows position by position.
  const auto& out = g.value(a.outputs[0]);
  if (g.value(x).shape != g.value(y).shape || out.shape != g.value(y).shape || out.dtype != DType::Float32 ||
      p.attr_int("oc_bn", -1) != e.attr_int("oc_bn", -2))
    return none;
  b.project = p.id;
  b.add = a.id;
  return b;
}

ecg::AttrMap with_projection(ecg::AttrMap attrs, const Node& p) {
  for (const char* k : {"weight_shape", "in_channels", "oc_bn", "reg_n", "unroll_ker"})
    attrs[std::string("project_") + k] = p.attrs.at(k);
  return attrs;
}

}  // namespace

Graph fuse_depthwise_project(const Graph& g, int* fused, int64_t min_bytes, int64_t skip_min_bytes) {
  std::unordered_map<int, int> proj_of;       // expand_dw node -> its projection
  std::unordered_map<int, SkipBlock> block_of;  // skip block's add node -> the block
  std::unordered_set<int> skip;
  for (const Node& n : g.nodes()) {
    if (const int p = fusable_projection(g, n, min_bytes); p >= 0) {
      proj_of[n.id] = p;
      skip.insert(p);
    } else if (const SkipBlock b = match_skip_block(g, n, skip_min_bytes); b.add >= 0) {
      block_of[b.add] = b;
      for (int id : {b.chain.expand, b.chain.act, b.chain.dw, b.chain.dw_act, b.project})
        if (id >= 0) skip.insert(id);
    }
  }
  if (fused) *fused = static_cast<int>(proj_of.size() + block_of.size());
  if (proj_of.empty() && block_of.empty()) return g;
  rewrite::GraphRebuilder rb(g);
  auto in = [&](const Node& c, int slot) { return c.input_or_absent(slot) >= 0 ? rb.map(c.inputs[slot]) : -1; };
  for (const Node& n : g.nodes()) {
    if (skip.count(n.id)) continue;
    if (auto it = proj_of.find(n.id); it != proj_of.end()) {
      const Node& p = g.node(it->second);
      std::vector<int> ins;
      for (int v : n.inputs) ins.push_back(v >= 0 ? rb.map(v) : -1);
      ins.push_back(rb.map(p.inputs[1]));
      ins.push_back(in(p, 2));
      rb.origin = n.origin + "+" + p.origin;
      const auto& out = g.value(p.outputs[0]);
      rb.replace(out.id, rb.add("conv2d_nchwc_expand_dw_project", ins, out.shape, out.dtype, with_projection(n.attrs, p)));
    } else if (auto bt = block_of.find(n.id); bt != block_of.end()) {
      const SkipBlock& b = bt->second;
      const Node &e = g.node(b.chain.expand), &d = g.node(b.chain.dw), &p = g.node(b.project);
      ecg::AttrMap attrs = with_projection(expand_dw_attrs(g, b.chain), p);
      attrs["project_add_expand"] = int64_t{1};
      rb.origin = e.origin + "+" + d.origin + "+" + p.origin + "+" + n.origin;
      const auto& out = g.value(n.outputs[0]);
      const int y = rb.add("conv2d_nchwc_expand_dw_project",
                           {rb.map(e.inputs[0]), rb.map(e.inputs[1]), in(e, 2), rb.map(d.inputs[1]), in(d, 2),
                            rb.map(p.inputs[1]), in(p, 2)},
                           out.shape, out.dtype, attrs);
      rb.replace(out.id, y);
    } else {
      rb.copy_node(n.id);
    }
  }
  return rb.finish();
}

}  // namespace dnnfusion::layout
