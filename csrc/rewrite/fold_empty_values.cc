#include "rewrite/fold_empty_values.h"

#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;

namespace {

bool only_empty_non_outputs(const Graph& g, const Node& n) {
  if (n.outputs.empty()) return false;
  for (int v : n.outputs)
    if (g.value(v).numel() != 0 || g.value(v).is_output) return false;
  return true;
}

}  // namespace

Graph fold_empty_values(const Graph& g, int* folded) {
  int count = 0;
  for (const Node& n : g.nodes()) count += only_empty_non_outputs(g, n);
  if (folded) *folded = count;
  if (count == 0) return g;
  GraphRebuilder rb(g);
  for (const Node& n : g.nodes()) {
    if (!only_empty_non_outputs(g, n)) {
      rb.copy_node(n.id);
      continue;
    }
    for (int v : n.outputs) {
      const auto& sv = g.value(v);
      rb.replace(v, rb.out().add_constant(sv.shape, sv.dtype, nullptr, sv.name));
    }
  }
  return rb.finish();
}

}  // namespace dnnfusion::rewrite
