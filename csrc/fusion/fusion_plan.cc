// Mode names, DNNFusion's Table 3, the planner dispatch, the "none" planner and the plan verifier
// (see fusion_plan.h for the contract every planner meets).
#include "fusion/fusion_plan.h"

#include <algorithm>

#include "common/error.h"
#include "fusion/plan_util.h"

namespace dnnfusion::fusion {

using ecg::MappingType;

Mode parse_mode(const std::string& name) {
  if (name == "none") return Mode::None;
  if (name == "tvm") return Mode::Tvm;
  if (name == "dnnfusion") return Mode::DnnFusion;
  DNNF_THROW("unknown fusion mode '", name, "' (valid: none, tvm, dnnfusion)");
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::None: return "none";
    case Mode::Tvm: return "tvm";
    case Mode::DnnFusion: return "dnnfusion";
  }
  return "?";
}

const char* cell_name(Cell c) {
  switch (c) {
    case Cell::Green: return "green";
    case Cell::Yellow: return "yellow";
    case Cell::Red: return "red";
  }
  return "?";
}

FuseRule table3(MappingType first, MappingType second) {
  constexpr Cell G = Cell::Green, Y = Cell::Yellow, R = Cell::Red;
  constexpr MappingType O2O = MappingType::OneToOne, O2M = MappingType::OneToMany, M2M = MappingType::ManyToMany,
                        Reo = MappingType::Reorganize, Shu = MappingType::Shuffle;
  // Rows/columns in MappingType's declaration order. The paper leaves the type of a red cell blank;
  // we give it Many-to-Many (the heavier side) so a type can be folded over any block, including
  // the unfused pairs the tvm/none planners may place next to each other.
  static const FuseRule kTable[5][5] = {
      /* One-to-One   */ {{G, O2O}, {G, O2M}, {G, M2M}, {G, Reo}, {G, Shu}},
      /* One-to-Many  */ {{G, O2M}, {Y, O2M}, {R, M2M}, {Y, O2M}, {Y, O2M}},
      /* Many-to-Many */ {{G, M2M}, {Y, M2M}, {R, M2M}, {Y, M2M}, {Y, M2M}},
      /* Reorganize   */ {{G, Reo}, {Y, O2M}, {Y, M2M}, {G, Reo}, {G, Reo}},
      /* Shuffle      */ {{G, Shu}, {Y, O2M}, {Y, M2M}, {G, Reo}, {G, Shu}},
  };
  return kTable[static_cast<int>(first)][static_cast<int>(second)];
}

Plan plan_none(const ecg::Graph& g) {
  std::vector<int> group(g.nodes().size());
  for (size_t i = 0; i < group.size(); ++i) group[i] = static_cast<int>(i);
  return detail::finish_plan(g, group, {});
}

Plan plan_fusion(Mode mode, const ecg::Graph& g, const PlanHooks& hooks) {
  Plan p;
  switch (mode) {
    case Mode::None: p = plan_none(g); break;
    case Mode::Tvm: p = plan_tvm(g, hooks); break;
    case Mode::DnnFusion: p = plan_dnnfusion(g, hooks); break;
  }
  // Cheap (linear) and a broken plan would otherwise surface as wrong numbers at run time.
  verify_plan(g, p, hooks);
  return p;
}

void verify_plan(const ecg::Graph& g, const Plan& p, const PlanHooks& hooks) {
  const int n_nodes = static_cast<int>(g.nodes().size());
  const int n_blocks = static_cast<int>(p.blocks.size());
  if (static_cast<int>(p.block_of.size()) != n_nodes)
    DNNF_THROW("fusion plan: block_of has ", p.block_of.size(), " entries for ", n_nodes, " nodes");
  std::vector<int> seen(static_cast<size_t>(n_nodes), -1);
  for (int b = 0; b < n_blocks; ++b) {
    const Block& blk = p.blocks[static_cast<size_t>(b)];
    if (blk.nodes.empty()) DNNF_THROW("fusion plan: block ", b, " is empty");
    int m2m = -1;
    for (size_t i = 0; i < blk.nodes.size(); ++i) {
      const int n = blk.nodes[i];
      if (n < 0 || n >= n_nodes) DNNF_THROW("fusion plan: block ", b, " names node ", n, " which does not exist");
      if (i > 0 && blk.nodes[i - 1] >= n)
        DNNF_THROW("fusion plan: block ", b, " lists its nodes out of ascending order (", blk.nodes[i - 1], " before ", n, ")");
      if (seen[static_cast<size_t>(n)] >= 0)
        DNNF_THROW("fusion plan: node ", detail::node_label(g, n), " is in blocks ", seen[static_cast<size_t>(n)], " and ", b);
      seen[static_cast<size_t>(n)] = b;
      if (p.block_of[static_cast<size_t>(n)] != b)
        DNNF_THROW("fusion plan: block_of[", n, "] = ", p.block_of[static_cast<size_t>(n)], " but the node is in block ", b);
      if (detail::is_many_to_many(g, n)) {
        if (m2m >= 0)
          DNNF_THROW("fusion plan: block ", b, " holds two Many-to-Many nodes, ", detail::node_label(g, m2m), " and ",
                     detail::node_label(g, n));
        m2m = n;
      }
      if (hooks.fusible && blk.nodes.size() > 1 && !hooks.fusible(g, n))
        DNNF_THROW("fusion plan: node ", detail::node_label(g, n), " is not fusible but shares block ", b, " with ",
                   blk.nodes.size() - 1, " other node(s)");
    }
    if (blk.dominant != m2m)
      DNNF_THROW("fusion plan: block ", b, " names dominant ", blk.dominant, " but its Many-to-Many node is ", m2m);
  }
  for (int n = 0; n < n_nodes; ++n)
    if (seen[static_cast<size_t>(n)] < 0) DNNF_THROW("fusion plan: node ", detail::node_label(g, n), " is in no block");
  // Every cross-block edge must point forward in the block list: that makes the list a topological
  // order of the block DAG, and so also proves the DAG acyclic.
  for (int n = 0; n < n_nodes; ++n) {
    for (int v : g.node(n).inputs) {
      if (v < 0) continue;
      const int prod = g.value(v).producer;
      if (prod < 0) continue;
      const int bp = p.block_of[static_cast<size_t>(prod)], bc = p.block_of[static_cast<size_t>(n)];
      if (bp > bc)
        DNNF_THROW("fusion plan: block ", bc, " (node ", detail::node_label(g, n), ") reads the output of node ",
                   detail::node_label(g, prod), " from the later block ", bp, ": blocks are not in a topological order",
                   " or form a cycle");
    }
  }
}

}  // namespace dnnfusion::fusion
