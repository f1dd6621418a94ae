// What a fused block materializes and how each of its values is computed, decided apart from any
// code emission (DNNFusion §4.4) — plain data that every target's emitter turns into its own code:
//   - which values are written to memory: those leaving the block (graph outputs, values read by
//     other blocks), a dominant-op input its kernel can take neither as a prologue nor through
//     strides, and values no index arithmetic reaches from their consumer (found by trying);
//   - per materialized value, whether it is a contiguous view of another buffer (an alias) or
//     computed by a loop over its expression, and whether that happens before or after the
//     dominant (Many-to-Many) op;
//   - how the dominant op's kernel takes the rest: its input 0 computed by a prologue, operands read
//     through strides, its element-wise tail as an epilogue written in place of the target value,
//     or a permute of its output realized as the kernel's store strides.
// Precondition: the plan verifies for the graph (fusion::verify_plan), and `kernel` is the
// dominant op's kernel on the emitting target (nullptr for a block without one). Postcondition:
// every value the plan reads inside the block is either materialized by an earlier stage, reached
// by index arithmetic, or produced by the dominant op's kernel (with its hooks), so an emitter that
// follows the stages in order never needs to materialize anything else.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/view_compose.h"
#include "ecg/graph.h"
#include "fusion/fusion_plan.h"
#include "runtime/op_kernels.h"

namespace dnnfusion::codegen {

struct BlockPlan {
  // A materialized value: an alias of another buffer (contiguous view) or a loop over its expression.
  struct Stage {
    int value = -1;
    bool alias = false;
    int alias_of = -1;          // alias: the buffer it lives in
    int64_t elem_offset = 0;    // alias: where, in elements of alias_of
  };
  struct StridedOperand {
    int slot;                   // input position of the dominant op
    int value;                  // the buffer read
    std::vector<int64_t> strides;
    int64_t offset = 0;         // elements
  };

  int block = -1;
  std::vector<int> nodes;       // ascending
  int dominant = -1;            // the Many-to-Many node, -1 if none
  std::vector<int> materialized;  // sorted value ids
  std::vector<Stage> before;    // stages before the dominant op (all stages when there is none)
  std::vector<Stage> after;     // stages after it
  int prologue_value = -1;      // the dominant op's input 0, computed by its kernel's prologue hook
  int epilogue_target = -1;     // value the kernel's epilogue writes in place of its output 0
  int store_target = -1;        // permute of output 0 the kernel writes through store_strides
  std::vector<int64_t> store_strides;
  std::vector<StridedOperand> strided_operands;
  // Report: how each in-block edge is realized ("One-to-One -> Many-to-Many: prologue" -> count)
  // and the bytes the block writes for its own use only.
  std::map<std::string, int> edge_rules;
  int64_t internal_bytes = 0;

  bool is_materialized(int v) const;
  // Whether value v is computed by a node of this block.
  bool produced_inside(const ecg::Graph& g, int v) const;
  // The leaves of the stage computing `top`: values from outside the block, the dominant op's
  // outputs, and materialized values other than `top` itself (ExprBuilder's is_leaf).
  std::function<bool(int)> leaves_of(const ecg::Graph& g, int top) const;
};

// Plans block `index` of `plan` (a singleton block: the node alone, no stages).
BlockPlan plan_block(const ecg::Graph& g, const fusion::Plan& plan, int index, const runtime::OpKernel* kernel);

bool is_f32(const ecg::Graph& g, int v);
// The view lists its buffer's elements in row-major order of `shape` (strides of size-1 dims do
// not matter: a batch-1 transpose is the identity).
bool identity_view(const StridedView& v, const std::vector<int64_t>& shape);

}  // namespace dnnfusion::codegen
