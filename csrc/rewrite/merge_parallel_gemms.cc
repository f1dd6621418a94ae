#include "rewrite/merge_parallel_gemms.h"

#include <map>
#include <tuple>

#include "codegen/view_compose.h"
#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;

namespace {

bool f32(const Graph& g, int v) { return v >= 0 && g.value(v).dtype == DType::Float32; }

// The activation operand's slot if node n can join a merge group, else -1.
int mergeable(const Graph& g, const std::vector<char>& is_const, const Node& n) {
  size_t x = 0;
  if (n.op == "addmm") {
    if (n.attr_float("alpha", 1.0) != 1.0 || n.attr_float("beta", 1.0) != 1.0) return -1;
    const int b = n.inputs[0];
    if (!is_const[b] || g.value(b).producer >= 0 || !f32(g, b) || g.value(b).shape.size() != 1) return -1;
    x = 1;
  } else if (n.op != "mm") {
    return -1;
  }
  if (n.inputs.size() != x + 2 || n.outputs.size() != 1) return -1;
  const int X = n.inputs[x], W = n.inputs[x + 1], Y = n.outputs[0];
  // Weights must already be folded (no producer): the merged node is emitted at the group's first
  // member, before nodes that might compute a later member's weight.
  if (!f32(g, X) || !f32(g, W) || !f32(g, Y) || is_const[X] || !is_const[W] || g.value(W).producer >= 0) return -1;
  const auto& ws = g.value(W).shape;
  if (ws.size() != 2 || g.value(X).shape.size() != 2) return -1;
  if (n.op == "addmm" && g.value(n.inputs[0]).shape[0] != ws[1]) return -1;
  const auto& y = g.value(Y);
  if (y.is_output || y.users.empty()) return -1;
  for (int u : y.users)
    if (!codegen::is_index_op(g.node(u).op)) return -1;
  return static_cast<int>(x);
}

}  // namespace

Graph merge_parallel_gemms(const Graph& g, int* merged) {
  const auto is_const = compile_time_values(g);
  std::map<std::tuple<int, std::string, int64_t>, std::vector<int>> groups;  // (X, op, K) -> nodes
  for (const Node& n : g.nodes()) {
    const int x = mergeable(g, is_const, n);
    if (x < 0) continue;
    groups[{n.inputs[x], n.op, g.value(n.inputs[x + 1]).shape[0]}].push_back(n.id);
  }
  std::map<int, const std::vector<int>*> leader;  // the group's first node -> group; others skipped
  std::map<int, int> member;
  int removed = 0;
  for (const auto& [key, nodes] : groups) {
    if (nodes.size() < 2) continue;
    leader[nodes.front()] = &nodes;
    for (int n : nodes) member[n] = 1;
    removed += static_cast<int>(nodes.size()) - 1;
  }
  if (merged) *merged = removed;
  if (leader.empty()) return g;
  GraphRebuilder rb(g);
  for (const Node& n : g.nodes()) {
    if (!member.count(n.id)) {
      rb.copy_node(n.id);
      continue;
    }
    auto it = leader.find(n.id);
    if (it == leader.end()) continue;  // emitted with its group's first node (same X, folded weights)
    const std::vector<int>& nodes = *it->second;
    const bool bias = n.op == "addmm";
    const size_t x = bias ? 1 : 0;
    rb.origin = n.origin;
    std::vector<int> ws, bs;
    int64_t total = 0;
    for (int id : nodes) {
      const Node& m = g.node(id);
      ws.push_back(rb.map(m.inputs[x + 1]));
      if (bias) bs.push_back(rb.map(m.inputs[0]));
      total += g.value(m.inputs[x + 1]).shape[1];
    }
    const int X = rb.map(n.inputs[x]);
    const int64_t M = rb.shape(X)[0], K = rb.shape(X)[1];
    const int W = rb.add("cat", ws, {K, total}, DType::Float32, {{"dim", int64_t{1}}});
    int Y;
    if (bias) {
      const int B = rb.add("cat", bs, {total}, DType::Float32, {{"dim", int64_t{0}}});
      Y = rb.add("addmm", {B, X, W}, {M, total}, DType::Float32, {{"alpha", int64_t{1}}, {"beta", int64_t{1}}});
    } else {
      Y = rb.add("mm", {X, W}, {M, total}, DType::Float32);
    }
    int64_t start = 0;
    for (int id : nodes) {
      const int64_t N = g.value(g.node(id).inputs[x + 1]).shape[1];
      const int s = rb.add("slice", {Y}, {M, N}, DType::Float32,
                           {{"dim", int64_t{1}}, {"start", start}, {"end", start + N}, {"step", int64_t{1}}});
      rb.replace(g.node(id).outputs[0], s);
      start += N;
    }
  }
  return rb.finish();
}

}  // namespace dnnfusion::rewrite
