#include "ecg/extract_region.h"

#include <unordered_map>

#include "common/error.h"

namespace dnnfusion::ecg {

namespace {

// A compile-time value keeps its kind across the cut: weights and constants are what fusion and
// the layout passes may fold or repack, so turning them into inputs would change the plan.
int copy_boundary_value(const Value& v, Graph& out, bool as_input) {
  switch (v.kind) {
    case ValueKind::Weight: return out.add_weight(v.shape, v.dtype, v.data, v.name);
    case ValueKind::Constant: return out.add_constant(v.shape, v.dtype, v.data, v.name);
    case ValueKind::Input:
    case ValueKind::Activation: break;
  }
  DNNF_CHECK(as_input, "region reads value ", v.name, " (", shape_str(v.shape),
             "), which is neither produced inside it, a region input, nor compile-time");
  return out.add_input(v.shape, v.dtype, v.name);
}

}  // namespace

Graph extract_region(const Graph& whole, const std::vector<int>& nodes, const std::vector<int>& inputs,
                     const std::vector<int>& outputs) {
  Graph out;
  std::unordered_map<int, int> remap;  // value id in `whole` -> value id in `out`
  for (int v : inputs) {
    DNNF_CHECK(!remap.count(v), "value ", whole.value(v).name, " listed twice among a region's inputs");
    remap[v] = copy_boundary_value(whole.value(v), out, true);
  }
  for (int nid : nodes) {
    const Node& n = whole.node(nid);
    std::vector<int> ins;
    for (int v : n.inputs) {
      if (v < 0) {
        ins.push_back(-1);
        continue;
      }
      auto it = remap.find(v);
      if (it == remap.end()) it = remap.emplace(v, copy_boundary_value(whole.value(v), out, false)).first;
      ins.push_back(it->second);
    }
    std::vector<OutputSpec> specs;
    for (int o : n.outputs) specs.push_back({whole.value(o).shape, whole.value(o).dtype});
    const Node& copy = out.node(out.add_node(n.op, ins, specs, n.attrs, n.origin));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      DNNF_CHECK(!remap.count(n.outputs[i]), "node ", n.origin, " listed twice in a region, or after its users");
      remap[n.outputs[i]] = copy.outputs[i];
    }
  }
  std::vector<int> outs;
  for (int v : outputs) {
    auto it = remap.find(v);
    DNNF_CHECK(it != remap.end(), "region output ", whole.value(v).name, " is not produced inside the region");
    outs.push_back(it->second);
  }
  out.set_outputs(outs);
  return out;
}

}  // namespace dnnfusion::ecg
