#include "rewrite/split_to_slices.h"

#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;

Graph split_to_slices(const Graph& g, int* replaced) {
  GraphRebuilder rb(g);
  int count = 0;
  for (const Node& n : g.nodes()) {
    const bool unbind = n.op == "unbind";
    if ((n.op != "split" && n.op != "split_with_sizes" && !unbind) || n.inputs.empty() || n.inputs[0] < 0) {
      rb.copy_node(n.id);
      continue;
    }
    const auto& in = g.value(n.inputs[0]).shape;
    const int64_t rank = static_cast<int64_t>(in.size());
    int64_t d = n.attr_int("dim", 0);
    if (d < 0) d += rank;
    if (d < 0 || d >= rank) {  // malformed: leave it to the verifier / kernel check to report
      rb.copy_node(n.id);
      continue;
    }
    ++count;
    rb.origin = n.origin;
    const int x = rb.map(n.inputs[0]);
    int64_t start = 0;
    for (size_t slot = 0; slot < n.outputs.size(); ++slot) {
      const auto& out = g.value(n.outputs[slot]);
      const int64_t len = unbind ? 1 : out.shape[static_cast<size_t>(d)];
      if (!out.users.empty() || out.is_output) {
        const int piece = unbind ? rb.add("select", {x}, out.shape, out.dtype, {{"dim", d}, {"index", start}})
                                 : rb.add("slice", {x}, out.shape, out.dtype,
                                          {{"dim", d}, {"start", start}, {"end", start + len}, {"step", int64_t{1}}});
        rb.replace(out.id, piece);
      }
      start += len;
    }
  }
  if (replaced) *replaced = count;
  return rb.finish();
}

}  // namespace dnnfusion::rewrite
