#include "rewrite/eliminate_common_subexpressions.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "ecg/op_registry.h"
#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;
using ecg::Value;
using ecg::ValueKind;

namespace {

constexpr int64_t kMaxKeyedConstantBytes = 1024;

// Identity of a compile-time leaf, or "" when it is not merged with others.
std::string leaf_key(const Value& v) {
  std::string k = std::to_string(static_cast<int>(v.dtype)) + ":" + ecg::shape_str(v.shape) + ":";
  if (v.kind == ValueKind::Weight) return "w" + k + std::to_string(reinterpret_cast<uintptr_t>(v.data));
  if (v.kind != ValueKind::Constant || v.nbytes() > kMaxKeyedConstantBytes) return "";
  std::string bytes(static_cast<size_t>(v.nbytes()), '\0');
  if (v.nbytes() > 0) std::memcpy(bytes.data(), v.data, bytes.size());
  return "c" + k + bytes;
}

bool commutes(const Node& n) {
  return n.info && n.info->props.commutative && n.inputs.size() == 2 && n.attr_float("alpha", 1.0) == 1.0;
}

bool same_results(const Graph& a, const Node& x, const Graph& b, const Node& y) {
  if (x.outputs.size() != y.outputs.size()) return false;
  for (size_t i = 0; i < x.outputs.size(); ++i) {
    const Value& u = a.value(x.outputs[i]);
    const Value& v = b.value(y.outputs[i]);
    if (u.shape != v.shape || u.dtype != v.dtype) return false;
  }
  return true;
}

}  // namespace

Graph eliminate_common_subexpressions(const Graph& g, int* merged) {
  std::vector<int> canon(g.values().size());
  std::map<std::string, int> leaves;
  for (const Value& v : g.values()) {
    canon[v.id] = v.id;
    if (!v.is_compile_time()) continue;
    std::string k = leaf_key(v);
    if (!k.empty()) canon[v.id] = leaves.emplace(std::move(k), v.id).first->second;
  }
  GraphRebuilder rb(g);
  std::map<std::pair<std::string, std::vector<int>>, std::vector<int>> seen;  // (op, operands) -> new nodes
  std::set<int> claimed;  // new ids that are graph outputs
  int count = 0;
  for (const Node& n : g.nodes()) {
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(v < 0 ? -1 : rb.map(canon[v]));
    std::vector<int> key_ins = ins;
    if (commutes(n)) std::sort(key_ins.begin(), key_ins.end());
    auto& candidates = seen[{n.op, key_ins}];
    const Node* rep = nullptr;
    for (int c : candidates) {
      const Node& cn = rb.out().node(c);
      if (cn.attrs == n.attrs && same_results(g, n, rb.out(), cn)) rep = &cn;
      if (rep) break;
    }
    if (rep) {
      bool ok = true;  // I6: two outputs may not become one value
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (g.value(n.outputs[i]).is_output && claimed.count(rep->outputs[i])) ok = false;
      if (ok) {
        for (size_t i = 0; i < n.outputs.size(); ++i) {
          rb.replace(n.outputs[i], rep->outputs[i]);
          if (g.value(n.outputs[i]).is_output) claimed.insert(rep->outputs[i]);
        }
        ++count;
        continue;
      }
    }
    rb.origin = n.origin;
    std::vector<int> outs = rb.emit_like(n, ins);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      rb.replace(n.outputs[i], outs[i]);
      if (g.value(n.outputs[i]).is_output) claimed.insert(outs[i]);
    }
    candidates.push_back(rb.out().value(outs[0]).producer);
  }
  if (merged) *merged = count;
  return rb.finish();
}

}  // namespace dnnfusion::rewrite
