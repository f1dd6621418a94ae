#include "rewrite/fold_constants.h"

#include <map>
#include <sstream>

#include "common/error.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;
using ecg::OutputSpec;
using ecg::Value;
using ecg::ValueKind;

namespace {
int copy_leaf(Graph& out, const Value& v) {
  if (v.kind == ValueKind::Weight) return out.add_weight(v.shape, v.dtype, v.data, v.name);
  return out.add_constant(v.shape, v.dtype, v.data, v.name);
}
}  // namespace

namespace {
// Identity of a foldable node: same op, same (already folded) operands, same attributes. Models
// that share weights across layers (ALBERT) repeat t(W) per layer; folding it once avoids both the
// work and a copy per layer.
std::string fold_key(const Node& n, const std::vector<int>& mapped_inputs, const Graph& g) {
  std::ostringstream os;
  os << n.op << "(";
  for (int v : mapped_inputs) os << v << ",";
  os << ")";
  for (const auto& [k, a] : n.attrs) os << k << "=" << a.index() << ":" << std::visit([](const auto& x) {
    std::ostringstream s;
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::vector<int64_t>> ||
                  std::is_same_v<std::decay_t<decltype(x)>, std::vector<double>>) {
      for (const auto& e : x) s << e << " ";
    } else {
      s << x;
    }
    return s.str();
  }, a) << ";";
  for (int o : n.outputs) os << "|" << static_cast<int>(g.value(o).dtype) << ":" << ecg::shape_str(g.value(o).shape);
  return os.str();
}
}  // namespace

Graph fold_constants(const Graph& g, const GraphEvaluator& eval, int* folded) {
  Graph out;
  std::map<std::string, std::vector<int>> done;  // fold_key -> folded output ids
  std::vector<int> map(g.values().size(), -1);
  for (int id : g.inputs()) map[id] = out.add_input(g.value(id).shape, g.value(id).dtype, g.value(id).name);
  auto mapped = [&](int old) {
    if (old < 0) return -1;
    if (map[old] < 0) {
      const Value& v = g.value(old);
      DNNF_CHECK(v.is_compile_time(), "value %", v.name, " used before definition");
      map[old] = copy_leaf(out, v);
    }
    return map[old];
  };
  int count = 0;
  for (const Node& n : g.nodes()) {
    bool foldable = true;
    // Judged on the rewritten graph, so chains of weight-only nodes fold in one sweep.
    for (int in : n.inputs)
      if (in >= 0 && !(map[in] >= 0 ? out.value(map[in]).is_compile_time() : g.value(in).is_compile_time())) foldable = false;
    std::vector<OutputSpec> specs;
    for (int o : n.outputs) specs.push_back({g.value(o).shape, g.value(o).dtype});
    if (!foldable) {
      std::vector<int> ins;
      for (int in : n.inputs) ins.push_back(mapped(in));
      int nid = out.add_node(n.op, ins, specs, n.attrs, n.origin);
      for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = out.node(nid).outputs[i];
      continue;
    }
    std::vector<int> mapped_ins;
    for (int in : n.inputs) mapped_ins.push_back(mapped(in));
    const std::string key = fold_key(n, mapped_ins, g);
    if (auto it = done.find(key); it != done.end()) {
      for (size_t i = 0; i < n.outputs.size(); ++i) map[n.outputs[i]] = it->second[i];
      ++count;
      continue;
    }
    // Evaluate the node alone, its operands bound to the current compile-time data.
    Graph single;
    std::vector<int> ins;
    for (int in : n.inputs) {
      if (in < 0) {
        ins.push_back(-1);
        continue;
      }
      const Value& src = out.value(mapped(in));
      ins.push_back(single.add_weight(src.shape, src.dtype, src.data, src.name));
    }
    int sid = single.add_node(n.op, ins, specs, n.attrs, n.origin);
    single.set_outputs(single.node(sid).outputs);
    std::vector<std::vector<uint8_t>> bytes = eval(single);
    DNNF_CHECK(bytes.size() == n.outputs.size(), "evaluator returned ", bytes.size(), " outputs for ", n.op);
    std::vector<int> folded_ids;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      const Value& ov = g.value(n.outputs[i]);
      map[ov.id] = out.add_constant(ov.shape, ov.dtype, bytes[i].data(), "folded_" + ov.name);
      folded_ids.push_back(map[ov.id]);
    }
    done.emplace(key, std::move(folded_ids));
    ++count;
  }
  std::vector<int> outs;
  for (int o : g.outputs()) outs.push_back(mapped(o));
  out.set_outputs(outs);
  if (folded) *folded = count;
  return out;
}

}  // namespace dnnfusion::rewrite
