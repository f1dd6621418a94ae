// Internal helpers shared by the three planners (not part of the public fusion interface): the
// graph's producer/consumer adjacency over nodes, the graph of groups formed so far (UnitDag) that
// tells a planner whether a merge would make the block DAG cyclic, and the common finishing step
// that turns a node partition into a Plan.
// Precondition: the graph satisfies the ECG invariants (csrc/ecg/README.md), in particular I1 (node
// ids are a topological order). Postcondition of finish_plan: the Plan meets every postcondition
// verify_plan checks, provided the partition's quotient graph is acyclic (it throws otherwise).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "ecg/op_registry.h"
#include "fusion/fusion_plan.h"

namespace dnnfusion::fusion::detail {

const ecg::OpInfo& op_info(const ecg::Graph& g, int n);
ecg::MappingType node_mapping(const ecg::Graph& g, int n);
bool is_many_to_many(const ecg::Graph& g, int n);
// nullptr if every Many-to-Many node of `members` (ascending node ids) can take the inputs the
// members compute for it (PlanHooks::m2m_input_fusible); else why not.
const char* m2m_input_violation(const ecg::Graph& g, const PlanHooks& hooks, const std::vector<int>& members);

// Node-level data-flow adjacency: succ[n] / pred[n] are the distinct nodes that consume an output
// of n / produce an input of n, ascending. Weights, constants and graph inputs are not nodes.
struct Adjacency {
  std::vector<std::vector<int>> succ;
  std::vector<std::vector<int>> pred;
};
Adjacency build_adjacency(const ecg::Graph& g);

// The graph of groups ("units") a planner has formed so far, each node starting alone. It answers
// whether merging some units would put a cycle into the group graph (some path leaves the merged
// set, runs through other units, and comes back: such a block could never run as one kernel), and
// performs merges. Every unit carries a label with label(X) < label(Y) for each edge X -> Y (node
// ids to begin with, since they are a topological order); a path only climbs labels, so the search
// never looks past the highest label among the units merged, which keeps queries local.
class UnitDag {
 public:
  explicit UnitDag(const Adjacency& adj);
  int unit(int node) const { return unit_of_[static_cast<size_t>(node)]; }
  const std::vector<int>& members(int unit) const { return members_[static_cast<size_t>(unit)]; }
  // `units`: distinct unit ids. Direct edges between them do not count.
  bool merge_creates_cycle(const std::vector<int>& units) const;
  // Precondition: !merge_creates_cycle(units) (else it throws dnnfusion::Error). Returns the
  // merged unit's id.
  int merge(const std::vector<int>& units);

 private:
  const Adjacency& adj_;
  std::vector<int> unit_of_;
  std::vector<std::vector<int>> members_;
  std::vector<int64_t> label_;
  int64_t max_label_ = 0;
  // Scratch marks by generation (mutable: queries are logically const).
  mutable std::vector<unsigned> mark_, seen_;
  mutable unsigned gen_ = 0;
};

// The block's type: Table 3 folded over its nodes in topological order (first op = row).
ecg::MappingType fold_block_type(const ecg::Graph& g, const std::vector<int>& nodes);

// Turns group ids (one per node, any ints) into a Plan: blocks in a topological order of the block
// DAG (ties broken by the smallest node id, so plans are deterministic), node lists ascending,
// block_of, type and dominant filled. Throws dnnfusion::Error if the groups form a cycle.
Plan finish_plan(const ecg::Graph& g, const std::vector<int>& group_of, std::vector<std::string> log);

std::string node_label(const ecg::Graph& g, int n);  // "5:relu"
std::string node_list(const ecg::Graph& g, const std::vector<int>& nodes);  // "{3:conv, 5:relu}", long ones cut

}  // namespace dnnfusion::fusion::detail
