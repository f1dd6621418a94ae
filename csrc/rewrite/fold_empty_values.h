// Zero-size values need no computation: a node whose every output has zero elements, none of
// them a graph output, is removed and its results read as empty constants instead. Zero-size
// tensors then never reach fusion, layout or code generation, whose loop and work-split
// arithmetic divides by extents; what still reads them (a reduction over an empty dim, a cat with
// an empty operand, a GEMM with K = 0) sees a compile-time operand of zero bytes. An empty graph
// output keeps its node (outputs stay produced values, invariant I6); the executor skips it.
// Precondition: the graph verifies. Postcondition: the graph verifies, computes the same values,
// and no node outside the graph's outputs has only empty outputs.
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// `folded` (optional) receives the number of nodes removed.
ecg::Graph fold_empty_values(const ecg::Graph& g, int* folded = nullptr);

}  // namespace dnnfusion::rewrite
