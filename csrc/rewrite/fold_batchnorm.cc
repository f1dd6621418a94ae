#include "rewrite/fold_batchnorm.h"

#include <map>

#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;

namespace {

constexpr const char* kBatchNorm = "_native_batch_norm_legit_no_training";

bool f32(const Graph& g, int v) { return v < 0 || g.value(v).dtype == DType::Float32; }

// The producer of the BN input that can absorb it, or nullptr.
const Node* foldable_producer(const Graph& g, const std::vector<char>& is_const, const Node& bn) {
  if (!constant_batchnorm(g, is_const, bn)) return nullptr;
  const auto& x = g.value(bn.inputs[0]);
  if (x.producer < 0 || x.producer_slot != 0 || x.users.size() != 1 || x.is_output) return nullptr;
  const Node& p = g.node(x.producer);
  for (int v : p.inputs)
    if (!f32(g, v)) return nullptr;
  if (p.op == "convolution") {
    if (p.attr_int("transposed", 0) != 0 || !is_const[p.inputs[1]]) return nullptr;
    if (p.input_or_absent(2) >= 0 && !is_const[p.inputs[2]]) return nullptr;
    return &p;
  }
  if ((p.op == "mm" || p.op == "addmm") && x.shape.size() == 2) {
    const size_t w = p.op == "addmm" ? 2 : 1;
    if (!is_const[p.inputs[w]] || g.value(p.inputs[w]).shape.size() != 2) return nullptr;
    if (p.op == "addmm" && (!is_const[p.inputs[0]] || p.attr_float("alpha", 1.0) != 1.0 || p.attr_float("beta", 1.0) != 1.0))
      return nullptr;
    return &p;
  }
  return nullptr;
}

}  // namespace

bool constant_batchnorm(const Graph& g, const std::vector<char>& is_const, const Node& bn) {
  if (bn.op != kBatchNorm) return false;
  if (bn.inputs.size() < 5 || bn.outputs.empty() || bn.inputs[0] < 0 || bn.inputs[3] < 0 || bn.inputs[4] < 0) return false;
  for (size_t s = 1; s < bn.outputs.size(); ++s)
    if (!g.value(bn.outputs[s]).users.empty() || g.value(bn.outputs[s]).is_output) return false;
  const auto& x = g.value(bn.inputs[0]);
  if (x.shape.size() < 2 || !f32(g, bn.inputs[0]) || !f32(g, bn.outputs[0])) return false;
  const int64_t K = x.shape[1];
  for (size_t i = 1; i < 5; ++i) {
    const int v = bn.inputs[i];
    if (v < 0) continue;
    if (!is_const[v] || !f32(g, v) || g.value(v).shape != std::vector<int64_t>{K}) return false;
  }
  return true;
}

std::pair<int, int> emit_batchnorm_scale_shift(GraphRebuilder& rb, const Node& n) {
  int stddev = rb.unary("sqrt", rb.binary("add", rb.map(n.inputs[4]), rb.scalar(static_cast<float>(n.attr_float("eps")))));
  int s = n.inputs[1] >= 0 ? rb.binary("div", rb.map(n.inputs[1]), stddev) : rb.unary("reciprocal", stddev);
  int shift = rb.unary("neg", rb.binary("mul", rb.map(n.inputs[3]), s));
  if (n.inputs[2] >= 0) shift = rb.binary("add", shift, rb.map(n.inputs[2]));
  return {s, shift};
}

Graph fold_batchnorm(const Graph& g, int* folded) {
  const auto is_const = compile_time_values(g);
  std::map<int, int> bn_of;  // producer node -> batch norm node
  for (const Node& n : g.nodes())
    if (const Node* p = foldable_producer(g, is_const, n)) bn_of[p->id] = n.id;
  GraphRebuilder rb(g);
  std::map<int, int> producer_of;  // batch norm node -> producer node
  for (const auto& [p, bn] : bn_of) producer_of[bn] = p;
  for (const Node& n : g.nodes()) {
    if (bn_of.count(n.id)) continue;  // emitted at its batch norm, which is its only user
    auto it = producer_of.find(n.id);
    if (it == producer_of.end()) {
      rb.copy_node(n.id);
      continue;
    }
    const Node& p = g.node(it->second);
    const int64_t K = g.value(n.inputs[0]).shape[1];
    rb.origin = p.origin;
    // The producer's bias b becomes b·s + shift.
    const auto [s, shift] = emit_batchnorm_scale_shift(rb, n);
    int out;
    if (p.op == "convolution") {
      std::vector<int64_t> wshape(g.value(p.inputs[1]).shape.size(), 1);
      wshape[0] = K;
      int w = rb.binary("mul", rb.map(p.inputs[1]), rb.view(s, wshape));
      int b = p.input_or_absent(2) >= 0 ? rb.binary("add", rb.binary("mul", rb.map(p.inputs[2]), s), shift) : shift;
      out = rb.emit_like(p, {rb.map(p.inputs[0]), w, b})[0];
    } else {
      const size_t x = p.op == "addmm" ? 1 : 0;
      int sc = rb.view(s, {1, K});  // scales the columns of W [in, K]
      int w = rb.binary("mul", rb.map(p.inputs[x + 1]), sc);
      int b = p.op == "addmm" ? rb.binary("add", rb.binary("mul", rb.map(p.inputs[0]), sc), shift) : shift;
      out = rb.add("addmm", {b, rb.map(p.inputs[x]), w}, g.value(p.outputs[0]).shape, DType::Float32,
                   {{"alpha", int64_t{1}}, {"beta", int64_t{1}}});
    }
    rb.replace(n.outputs[0], out);
  }
  if (folded) *folded = static_cast<int>(bn_of.size());
  return rb.finish();
}

}  // namespace dnnfusion::rewrite
