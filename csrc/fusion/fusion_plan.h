// Fusion plans: a partition of the ECG's nodes into blocks, each of which the code generator turns
// into one kernel. Three planners make the fusion gain measurable on the same kernels:
//   none       one node per block (DNNFusion's OurB),
//   tvm        TVM's dominator-tree fusion (the OurB+ baseline),
//   dnnfusion  Listing 1 of DNNFusion: seeds, Table 3 of mapping types, profile-guided yellow cells.
// The planners only read the graph; what the code generator can express and what a yellow cell
// costs come in through PlanHooks, so csrc/fusion includes neither codegen nor runtime.
// Postcondition of every planner (checked by verify_plan): each node is in exactly one block, the
// nodes of a block are ascending (a topological order), the blocks form a DAG listed in a
// topological order, no block holds more than one Many-to-Many node, and a node the `fusible`
// hook rejects is alone in its block.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "ecg/op_registry.h"

namespace dnnfusion::fusion {

enum class Mode { None, Tvm, DnnFusion };
// "none" | "tvm" | "dnnfusion"; anything else throws dnnfusion::Error listing the valid names.
Mode parse_mode(const std::string& name);
const char* mode_name(Mode m);

// DNNFusion Table 3: first op = row, second op = column.
enum class Cell { Green, Yellow, Red };
struct FuseRule {
  Cell cell;
  ecg::MappingType result;  // the fused block's type
};
FuseRule table3(ecg::MappingType first, ecg::MappingType second);
const char* cell_name(Cell c);

struct Block {
  std::vector<int> nodes;  // node ids, ascending
  ecg::MappingType type = ecg::MappingType::OneToOne;  // per Table 3 (a singleton: its op's type)
  int dominant = -1;       // the block's Many-to-Many node, -1 if none
};

struct Plan {
  std::vector<Block> blocks;         // a topological order of the block DAG
  std::vector<int> block_of;         // node id -> index into blocks
  std::vector<std::string> log;      // one line per decision worth explaining (yellow lookups, refusals)
};

struct PlanHooks {
  // Whether node `n` may share a block with other nodes (the code generator can express it).
  // Unset: every node may.
  std::function<bool(const ecg::Graph&, int n)> fusible;
  // Yellow cell: true if fusing `candidate` into the block `block` (node ids) is faster than running
  // them apart. Unset (profiling off): yellow never fuses.
  std::function<bool(const ecg::Graph&, const std::vector<int>& block, int candidate)> yellow_is_faster;
  // How Many-to-Many node `m2m` can take its input value `v` when another node of its block
  // computes it, without v being written to memory: kPrologue (the kernel computes its input from
  // any in-block expression), kStrided (only if v is data movement — index ops — of a value from
  // outside the block), or kNo. Unset: kPrologue. A merge that would need more is refused (fusing
  // would only move the materialization into the block).
  enum InputFusion { kNo = 0, kPrologue = 1, kStrided = 2 };
  std::function<int(const ecg::Graph&, int m2m, int v)> m2m_input_fusible;
  // Which ops are data movement for kStrided (view/permute/slice/expand...). Unset: none.
  std::function<bool(const ecg::Graph&, int n)> is_index_op;
  // Yellow cell that cannot cost anything: `candidate` is data movement the fused code turns into
  // index arithmetic that every kernel of the block already does (a reshape keeps the linear
  // order; a permute the dominant kernel reads or writes through strides). Such merges fuse
  // without a measurement, with profiling on or off. Unset: none.
  std::function<bool(const ecg::Graph&, const std::vector<int>& block, int candidate)> free_merge;
  int max_block_ops = 64;     // register/tile budget of one generated kernel
  int max_block_inputs = 12;  // distinct activation values read from outside the block
  int tvm_max_group = 256;    // TVM's kMaxFusedOps
};

Plan plan_none(const ecg::Graph& g);
Plan plan_tvm(const ecg::Graph& g, const PlanHooks& hooks);
Plan plan_dnnfusion(const ecg::Graph& g, const PlanHooks& hooks);
Plan plan_fusion(Mode mode, const ecg::Graph& g, const PlanHooks& hooks);

// Throws dnnfusion::Error naming the first violated postcondition (see the header comment).
void verify_plan(const ecg::Graph& g, const Plan& p, const PlanHooks& hooks);

}  // namespace dnnfusion::fusion
