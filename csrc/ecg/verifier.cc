#include "ecg/verifier.h"

#include <set>

#include "common/error.h"
#include "ecg/op_registry.h"

namespace dnnfusion::ecg {

void verify_graph(const Graph& g) {
  const int nv = static_cast<int>(g.values().size());
  std::vector<char> defined(static_cast<size_t>(nv), 0);
  // I2: every value has a well-formed shape and dtype; I4: ids are positions.
  for (int i = 0; i < nv; ++i) {
    const Value& v = g.value(i);
    if (v.id != i) DNNF_THROW("ECG invariant: value at position ", i, " has id ", v.id);
    for (auto d : v.shape)
      if (d < 0) DNNF_THROW("ECG invariant: value %", v.name, " has negative dimension in ", shape_str(v.shape));
    if (v.is_compile_time()) {
      if (v.data == nullptr && v.numel() > 0) DNNF_THROW("ECG invariant: ", value_kind_name(v.kind), " %", v.name, " has no data");
      if (v.producer != -1) DNNF_THROW("ECG invariant: compile-time value %", v.name, " has a producer");
      defined[i] = 1;
    }
  }
  for (int id : g.inputs()) {
    const Value& v = g.value(id);
    if (v.kind != ValueKind::Input) DNNF_THROW("ECG invariant: graph input %", v.name, " is not marked as input");
    defined[id] = 1;
  }
  // I1: topological order — every operand is defined before its use; I3: single producer.
  std::vector<int> use_count(static_cast<size_t>(nv), 0);
  for (const Node& n : g.nodes()) {
    if (!n.info || n.info != find_op(n.op)) DNNF_THROW("ECG invariant: node ", n.id, " op '", n.op, "' is not in the registry");
    if (n.info->num_outputs > 0 && static_cast<int>(n.outputs.size()) != n.info->num_outputs)
      DNNF_THROW("ECG invariant: node ", n.id, " '", n.op, "' has ", n.outputs.size(), " outputs, the op has ", n.info->num_outputs);
    for (int in : n.inputs) {
      if (in < 0) continue;
      if (in >= nv) DNNF_THROW("ECG invariant: node ", n.id, " '", n.op, "' reads unknown value ", in);
      if (!defined[in]) DNNF_THROW("ECG invariant: node ", n.id, " '", n.op, "' reads %", g.value(in).name, " before it is defined (not topological)");
      ++use_count[in];
    }
    for (size_t s = 0; s < n.outputs.size(); ++s) {
      int out = n.outputs[s];
      const Value& v = g.value(out);
      if (defined[out]) DNNF_THROW("ECG invariant: value %", v.name, " defined twice (node ", n.id, ")");
      if (v.producer != n.id || v.producer_slot != static_cast<int>(s) || v.kind != ValueKind::Activation)
        DNNF_THROW("ECG invariant: value %", v.name, " does not point back to its producer node ", n.id);
      defined[out] = 1;
    }
  }
  // I5: use lists agree with the nodes; I6: outputs are defined, distinct and marked.
  for (int i = 0; i < nv; ++i)
    if (static_cast<int>(g.value(i).users.size()) != use_count[i])
      DNNF_THROW("ECG invariant: value %", g.value(i).name, " lists ", g.value(i).users.size(), " users but has ", use_count[i], " uses");
  std::set<int> outs;
  for (int id : g.outputs()) {
    if (id < 0 || id >= nv || !defined[id]) DNNF_THROW("ECG invariant: graph output ", id, " is not defined");
    if (!outs.insert(id).second) DNNF_THROW("ECG invariant: value %", g.value(id).name, " is returned twice (outputs must not alias)");
    if (!g.value(id).is_output) DNNF_THROW("ECG invariant: output %", g.value(id).name, " is not marked as output");
  }
  for (int i = 0; i < nv; ++i)
    if (g.value(i).is_output && !outs.count(i)) DNNF_THROW("ECG invariant: %", g.value(i).name, " is marked as output but not returned");
}

}  // namespace dnnfusion::ecg
