// Removes nodes that pass an operand through unchanged: clone, contiguous, alias,
// lift_fresh_copy, _to_copy to the same dtype, view/reshape/flatten/squeeze/unsqueeze/expand/
// repeat to the same shape, a slice covering its whole dim with step 1, identity permute/
// transpose/t, zero padding, cat of one non-empty tensor (the rest empty), x*1, x+0, 0+x, x-0 and x/1 (the constant's every
// element exactly 1 or 0, and the result's shape and dtype those of the kept operand, so
// broadcasting and type promotion change nothing). Uses of the result read the operand instead.
// Also drops a no-op operand: an attention's mask that is a constant of all zeros (float32) or all
// true (bool) — the node stays, without the mask (counted as one no-op removed).
// A node whose result is a graph output stays when removing it would make that output a graph
// input, a weight/constant or another output (invariant I6).
// Precondition: the graph verifies. Postcondition: the graph verifies, computes the same values
// (x+0 may turn -0 into +0), and one sweep reaches the fixpoint (a second run removes nothing).
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// `removed` (optional) receives the number of nodes removed.
ecg::Graph remove_noops(const ecg::Graph& g, int* removed = nullptr);

}  // namespace dnnfusion::rewrite
