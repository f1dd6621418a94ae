#include "rewrite/remove_noops.h"

#include <cmath>
#include <set>

#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;
using ecg::Value;

namespace {

// Whether every element of a weight/constant equals `want` exactly.
bool all_equal(const Value& v, double want) {
  if (!v.is_compile_time() || (v.data == nullptr && v.numel() > 0)) return false;
  for (int64_t i = 0; i < v.numel(); ++i) {
    double x;
    switch (v.dtype) {
      case DType::Float32: x = static_cast<const float*>(v.data)[i]; break;
      case DType::Float64: x = static_cast<const double*>(v.data)[i]; break;
      case DType::Int64: x = static_cast<double>(static_cast<const int64_t*>(v.data)[i]); break;
      case DType::Int32: x = static_cast<const int32_t*>(v.data)[i]; break;
      default: return false;
    }
    if (x != want) return false;
  }
  return true;
}

// An attention mask that masks nothing: float32 all zeros (added to the scores: exact, as
// s + 0 == s up to the sign of zero, which softmax cannot see) or bool all true (every key
// allowed). torch.export folds BERT's padding mask for an unpadded input into such a constant;
// the kernel would add it to every score.
bool noop_attention_mask(const Value& v) {
  if (!v.is_compile_time() || (v.data == nullptr && v.numel() > 0)) return false;
  if (v.dtype == DType::Float32) return all_equal(v, 0.0);
  if (v.dtype != DType::Bool) return false;
  const auto* b = static_cast<const uint8_t*>(v.data);
  for (int64_t i = 0; i < v.numel(); ++i)
    if (b[i] == 0) return false;
  return true;
}

bool identity_dims(std::vector<int64_t> dims, size_t rank) {
  if (dims.size() != rank) return false;
  for (size_t i = 0; i < rank; ++i)
    if ((dims[i] < 0 ? dims[i] + static_cast<int64_t>(rank) : dims[i]) != static_cast<int64_t>(i)) return false;
  return true;
}

// The operand position a node passes through unchanged, or -1.
int passthrough(const Graph& g, const Node& n) {
  if (n.inputs.empty() || n.outputs.size() != 1) return -1;
  const Value& out = g.value(n.outputs[0]);
  auto same = [&](int v) { return v >= 0 && g.value(v).shape == out.shape && g.value(v).dtype == out.dtype; };
  static const std::set<std::string> copies = {"clone",   "contiguous",   "alias",   "lift_fresh_copy", "_to_copy",
                                               "view",    "_unsafe_view", "reshape", "flatten",         "squeeze",
                                               "unsqueeze", "expand",     "repeat"};
  const std::string& op = n.op;
  const int x = n.inputs[0];
  const size_t rank = x >= 0 ? g.value(x).shape.size() : 0;
  if (copies.count(op)) return same(x) ? 0 : -1;
  if (op == "slice") return same(x) && n.attr_int("step", 1) == 1 ? 0 : -1;
  if (op == "permute") return same(x) && identity_dims(n.attr_ints("dims"), rank) ? 0 : -1;
  if (op == "transpose") {
    if (!same(x)) return -1;
    auto norm = [&](int64_t d) { return d < 0 ? d + static_cast<int64_t>(rank) : d; };
    return rank == 0 || norm(n.attr_int("dim0")) == norm(n.attr_int("dim1")) ? 0 : -1;
  }
  if (op == "t") return same(x) && rank < 2 ? 0 : -1;
  if (op == "constant_pad_nd") {
    for (auto p : n.attr_ints("pad"))
      if (p != 0) return -1;
    return same(x) ? 0 : -1;
  }
  if (op == "cat") {  // one non-empty piece (e.g. a key/value cache that starts empty)
    int only = -1;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= 0 && g.value(n.inputs[i]).numel() > 0) {
        if (only >= 0) return -1;
        only = static_cast<int>(i);
      }
    return only >= 0 && same(n.inputs[only]) ? only : -1;
  }
  if (n.inputs.size() != 2 || n.has_attr("rounding_mode")) return -1;
  // x op c with c a constant of all ones (mul/div) or zeros (add/sub); add/mul also c op x.
  const double unit = (op == "mul" || op == "div") ? 1.0 : 0.0;
  if (op != "mul" && op != "div" && op != "add" && op != "sub") return -1;
  // add/sub scale the second operand by alpha: x + alpha*0 = x (alpha finite), 0 + alpha*x needs alpha 1.
  const double alpha = n.attr_float("alpha", 1.0);
  for (int k = 0; k < 2; ++k) {
    if (k == 0 && !std::isfinite(alpha)) continue;
    if (k == 1 && (op == "sub" || op == "div" || alpha != 1.0)) break;
    const int other = n.inputs[1 - k];
    if (same(n.inputs[k]) && other >= 0 && all_equal(g.value(other), unit)) return k;
  }
  return -1;
}

}  // namespace

Graph remove_noops(const Graph& g, int* removed) {
  GraphRebuilder rb(g);
  std::set<int> claimed;  // new ids that are graph outputs
  int count = 0;
  for (const Node& n : g.nodes()) {
    const int k = passthrough(g, n);
    if (k >= 0) {
      const int r = rb.map(n.inputs[k]);
      const bool is_output = g.value(n.outputs[0]).is_output;
      if (!is_output || (rb.out().value(r).producer >= 0 && claimed.insert(r).second)) {
        rb.replace(n.outputs[0], r);
        ++count;
        continue;
      }
    }
    if (n.op == "_scaled_dot_product_flash_attention_for_cpu" && n.input_or_absent(3) >= 0 && noop_attention_mask(g.value(n.inputs[3]))) {
      std::vector<int> ins;
      for (int v : n.inputs) ins.push_back(rb.map(v));
      ins[3] = -1;
      rb.origin = n.origin;
      const auto outs = rb.emit_like(n, ins);
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        rb.replace(n.outputs[i], outs[i]);
        if (g.value(n.outputs[i]).is_output) claimed.insert(outs[i]);
      }
      ++count;
      continue;
    }
    const int nid = rb.copy_node(n.id);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (g.value(n.outputs[i]).is_output) claimed.insert(rb.out().node(nid).outputs[i]);
  }
  if (removed) *removed = count;
  return rb.finish();
}

}  // namespace dnnfusion::rewrite
