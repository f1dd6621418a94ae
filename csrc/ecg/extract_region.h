// Cuts one compiled region out of a whole-model ECG.
//
// The Python front end imports a model's graph once into one ECG, asks the target about every
// node there (with the real weights and real producers in view), and groups the accepted nodes
// into regions. Each region is then compiled on its own graph, made here.
//
// Precondition: `nodes` are ids of `whole` in topological order; every value they read is
// produced by one of them, listed in `inputs`, or compile-time (a weight or a constant); the
// `outputs` are produced by them or listed in `inputs`.
// Postcondition: a new graph whose inputs are `inputs` in order (weights and constants among them
// stay weights and constants and are not inputs), whose nodes are copies of `nodes` (ops,
// attributes, origins, output shapes), and whose outputs are `outputs` in order. Weights keep
// borrowing `whole`'s data; constants are copied.
#pragma once
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::ecg {

Graph extract_region(const Graph& whole, const std::vector<int>& nodes, const std::vector<int>& inputs,
                     const std::vector<int>& outputs);

}  // namespace dnnfusion::ecg
