#include "rewrite/graph_edit.h"

#include "common/error.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;
using ecg::OutputSpec;
using ecg::Value;
using ecg::ValueKind;

GraphRebuilder::GraphRebuilder(const Graph& src, bool placeholders)
    : src_(src), placeholders_(placeholders), map_(placeholders ? 0 : src.values().size(), -1) {
  if (placeholders_) return;
  for (int id : src.inputs()) map_[id] = out_.add_input(src.value(id).shape, src.value(id).dtype, src.value(id).name);
}

void GraphRebuilder::replace(int v, int nv) {
  if (placeholders_) sparse_[v] = nv;
  else map_.at(static_cast<size_t>(v)) = nv;
}

int GraphRebuilder::map(int v) {
  if (v < 0) return -1;
  const Value& sv = src_.value(v);
  if (placeholders_) {
    auto [it, fresh] = sparse_.emplace(v, -1);
    if (fresh) {
      it->second = out_.add_input(sv.shape, sv.dtype, sv.name);
      placeholder_src_.resize(out_.values().size(), -1);
      placeholder_src_[it->second] = v;
    }
    return it->second;
  }
  int& m = map_.at(static_cast<size_t>(v));
  if (m >= 0) return m;
  DNNF_CHECK(sv.is_compile_time(), "value %", sv.name, " is read before it is defined");
  if (sv.kind == ValueKind::Weight) {
    m = out_.add_weight(sv.shape, sv.dtype, sv.data, sv.name);
  } else {
    // Share the owned bytes instead of copying them (folded weights can be large): an empty
    // constant is created, then given the source's shape and storage.
    m = out_.add_constant({0}, sv.dtype, nullptr, sv.name);
    Value& nv = out_.value(m);
    nv.shape = sv.shape;
    nv.owned = sv.owned;
    nv.data = sv.data;
  }
  return m;
}

int GraphRebuilder::source_of(int nv) const {
  return nv >= 0 && nv < static_cast<int>(placeholder_src_.size()) ? placeholder_src_[nv] : -1;
}

int GraphRebuilder::copy_node(int n) {
  const Node& node = src_.node(n);
  std::vector<int> ins;
  for (int v : node.inputs) ins.push_back(map(v));
  std::vector<OutputSpec> specs;
  for (int o : node.outputs) specs.push_back({src_.value(o).shape, src_.value(o).dtype});
  int nid = out_.add_node(node.op, ins, specs, node.attrs, node.origin);
  for (size_t i = 0; i < node.outputs.size(); ++i) replace(node.outputs[i], out_.node(nid).outputs[i]);
  return nid;
}

Graph GraphRebuilder::finish() {
  std::vector<int> outs;
  for (int o : src_.outputs()) outs.push_back(map(o));
  out_.set_outputs(outs);
  return std::move(out_);
}

int GraphRebuilder::add(const std::string& op, const std::vector<int>& inputs, const std::vector<int64_t>& shape,
                        DType dtype, ecg::AttrMap attrs) {
  int nid = out_.add_node(op, inputs, {{shape, dtype}}, std::move(attrs), origin);
  return out_.node(nid).outputs[0];
}

std::vector<int> GraphRebuilder::add_outputs(const std::string& op, const std::vector<int>& inputs,
                                             const std::vector<ecg::OutputSpec>& outputs, ecg::AttrMap attrs) {
  int nid = out_.add_node(op, inputs, outputs, std::move(attrs), origin);
  return out_.node(nid).outputs;
}

int GraphRebuilder::binary(const std::string& op, int a, int b) {
  DNNF_CHECK(dtype(a) == DType::Float32 && dtype(b) == DType::Float32, op, ": rewrites emit float32 arithmetic only");
  return add(op, {a, b}, broadcast_shapes(shape(a), shape(b)), DType::Float32, {{"compute_dtype", std::string("float32")}});
}

int GraphRebuilder::unary(const std::string& op, int a, ecg::AttrMap attrs) {
  return add(op, {a}, shape(a), dtype(a), std::move(attrs));
}

int GraphRebuilder::view(int a, const std::vector<int64_t>& s) {
  return add("view", {a}, s, dtype(a), {{"size", s}});
}

int GraphRebuilder::expand(int a, const std::vector<int64_t>& s) {
  return add("expand", {a}, s, dtype(a), {{"size", s}});
}

int GraphRebuilder::scalar(float value) { return out_.add_constant({}, DType::Float32, &value, "scalar"); }

std::vector<int> GraphRebuilder::emit_like(const Node& like, const std::vector<int>& inputs, const ecg::AttrMap& attrs) {
  std::vector<OutputSpec> specs;
  for (int o : like.outputs) specs.push_back({src_.value(o).shape, src_.value(o).dtype});
  int nid = out_.add_node(like.op, inputs, specs, attrs, origin);
  return out_.node(nid).outputs;
}

Graph remove_dead_nodes(const Graph& g, int* removed) {
  std::vector<char> live_value(g.values().size(), 0), live_node(g.nodes().size(), 0);
  for (int o : g.outputs()) live_value[o] = 1;
  for (int n = static_cast<int>(g.nodes().size()) - 1; n >= 0; --n) {
    for (int o : g.node(n).outputs) live_node[n] |= live_value[o];
    if (live_node[n])
      for (int in : g.node(n).inputs)
        if (in >= 0) live_value[in] = 1;
  }
  GraphRebuilder rb(g);
  int dead = 0;
  for (const Node& n : g.nodes()) {
    if (live_node[n.id]) rb.copy_node(n.id);
    else ++dead;
  }
  if (removed) *removed = dead;
  return rb.finish();
}

std::vector<char> compile_time_values(const Graph& g) {
  std::vector<char> c(g.values().size(), 0);
  for (const Value& v : g.values()) c[v.id] = v.is_compile_time();
  for (const Node& n : g.nodes()) {
    bool all = true;
    for (int in : n.inputs) all = all && (in < 0 || c[in]);
    for (int o : n.outputs) c[o] = all;
  }
  return c;
}

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out = align_shape(a, r), bb = align_shape(b, r);
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == bb[i] || bb[i] == 1) continue;
    DNNF_CHECK(out[i] == 1, "shapes ", ecg::shape_str(a), " and ", ecg::shape_str(b), " do not broadcast");
    out[i] = bb[i];
  }
  return out;
}

std::vector<int64_t> align_shape(const std::vector<int64_t>& s, size_t rank) {
  DNNF_CHECK(s.size() <= rank, "shape ", ecg::shape_str(s), " has more than ", rank, " dims");
  std::vector<int64_t> r(rank - s.size(), 1);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

bool broadcasts_to(const std::vector<int64_t>& s, const std::vector<int64_t>& target) {
  if (s.size() > target.size()) return false;
  const size_t lead = target.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1 && s[i] != target[lead + i]) return false;
  return true;
}

}  // namespace dnnfusion::rewrite
