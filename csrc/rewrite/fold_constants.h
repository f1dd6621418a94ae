// Constant folding of weight-only subgraphs: a node whose tensor operands are all known at
// compile time (weights, constants, or none, like arange) is evaluated once and its outputs
// become graph-owned constants — e.g. the transposed linear weights aot_autograd emits as t(W).
// Precondition: the graph verifies. Postcondition: the graph verifies, computes the same values,
// and no remaining node has only compile-time operands.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// Runs a graph whose inputs are all weights/constants and returns the bytes of each output.
using GraphEvaluator = std::function<std::vector<std::vector<uint8_t>>(const ecg::Graph&)>;

// `folded` (optional) receives the number of nodes folded.
ecg::Graph fold_constants(const ecg::Graph& g, const GraphEvaluator& eval, int* folded = nullptr);

}  // namespace dnnfusion::rewrite
