// Common-subexpression elimination: nodes with the same op, the same operands (in either order
// for a commutative op: add with alpha 1, mul, maximum, minimum) and equal attributes and result
// types compute the same values, so later ones are dropped and their uses read the first.
// Compile-time leaves are merged first — weights by data pointer, small constants (<= 1 KiB) by
// content — since the importer makes a fresh constant for every Python scalar. Nodes are visited
// in topological order with operands already merged, so one sweep is the fixpoint.
// A merge that would give two graph outputs the same value is skipped (invariant I6).
// Precondition: the graph verifies. Postcondition: the graph verifies, computes the same values,
// and no two remaining nodes are duplicates (a second run merges nothing).
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// `merged` (optional) receives the number of nodes dropped.
ecg::Graph eliminate_common_subexpressions(const ecg::Graph& g, int* merged = nullptr);

}  // namespace dnnfusion::rewrite
