// Checks the graph invariants of csrc/ecg/README.md. Passes call it between steps in tests and
// debug builds (DNNFUSION_VERIFY=1 or a debug build); it throws dnnfusion::Error naming the
// first broken invariant and the node involved.
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::ecg {

void verify_graph(const Graph& g);

}  // namespace dnnfusion::ecg
