// Replaces a multi-output split (split, split_with_sizes, unbind) by one single-output slice (or
// select, for unbind) per used output. The results are the same views; what changes is that each
// piece is now its own data-movement node, which the fusion planner can fold into the strided
// operand of the kernel that reads it (a split node's outputs would all live or die together).
// Precondition: the graph verifies. Postcondition: the graph verifies and computes the same values.
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// `replaced` (optional) receives the number of split nodes replaced.
ecg::Graph split_to_slices(const ecg::Graph& g, int* replaced = nullptr);

}  // namespace dnnfusion::rewrite
