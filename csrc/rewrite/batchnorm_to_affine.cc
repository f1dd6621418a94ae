#include "rewrite/batchnorm_to_affine.h"

#include "rewrite/fold_batchnorm.h"
#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;

namespace {

bool convertible(const Graph& g, const std::vector<char>& is_const, const Node& bn) {
  if (bn.op != "_native_batch_norm_legit_no_training") return false;
  if (bn.inputs.size() < 5 || bn.outputs.empty() || bn.inputs[0] < 0 || bn.inputs[3] < 0 || bn.inputs[4] < 0)
    return false;
  for (size_t s = 1; s < bn.outputs.size(); ++s)
    if (!g.value(bn.outputs[s]).users.empty() || g.value(bn.outputs[s]).is_output) return false;
  const auto& x = g.value(bn.inputs[0]);
  if (x.dtype != DType::Float32 || x.shape.size() < 2 || g.value(bn.outputs[0]).dtype != DType::Float32) return false;
  const int64_t K = x.shape[1];
  for (size_t i = 1; i < 5; ++i) {
    const int v = bn.inputs[i];
    if (v < 0) continue;
    const auto& p = g.value(v);
    if (!is_const[v] || p.dtype != DType::Float32 || p.shape != std::vector<int64_t>{K}) return false;
  }
  return true;
}

}  // namespace

Graph batchnorm_to_affine(const Graph& g, int* rewritten) {
  const auto is_const = compile_time_values(g);
  GraphRebuilder rb(g);
  int count = 0;
  for (const Node& n : g.nodes()) {
    if (!convertible(g, is_const, n)) {
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
