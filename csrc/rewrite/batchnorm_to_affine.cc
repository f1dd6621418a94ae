#include "rewrite/batchnorm_to_affine.h"

#include "rewrite/fold_batchnorm.h"
#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;

Graph batchnorm_to_affine(const Graph& g, int* rewritten) {
  const auto is_const = compile_time_values(g);
  GraphRebuilder rb(g);
  int count = 0;
  for (const Node& n : g.nodes()) {
    if (!constant_batchnorm(g, is_const, n)) {
      rb.copy_node(n.id);
      continue;
    }
    rb.origin = n.origin;
    const auto& x = g.value(n.inputs[0]);
    std::vector<int64_t> per_channel(x.shape.size() - 1, 1);  // [K, 1, ..., 1]: broadcasts over dim 1
    per_channel[0] = x.shape[1];
    const auto [s, shift] = emit_batchnorm_scale_shift(rb, n);
    const int y = rb.binary("add", rb.binary("mul", rb.map(n.inputs[0]), rb.view(s, per_channel)),
                            rb.view(shift, per_channel));
    rb.replace(n.outputs[0], y);
    ++count;
  }
  if (rewritten) *rewritten = count;
  return rb.finish();
}

}  // namespace dnnfusion::rewrite
