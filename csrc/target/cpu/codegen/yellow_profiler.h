// Measures DNNFusion's yellow cells (Table 3, fuse_depend): for a growing block and a candidate node
// it builds the subgraph of block + candidate with the real shapes, attributes and weights,
// compiles it once as one fused block and once as the block and the candidate apart, and times
// both on random inputs — so the measurement sees what fusing enables inside the block (an
// epilogue, a strided operand), not just the pair in isolation. All fused variants of one call
// share one generated translation unit (one compiler run); a progress bar on stderr shows the
// measurements, which run once per machine and block shape (the profile database keeps them).
// Precondition: block + candidate is a plan block the planner accepted (constraints checked), and
// the block alone is one too. Postcondition: one timing per query, in microseconds (median).
#pragma once
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "target/target.h"

namespace dnnfusion::codegen {

using target::YellowQuery;
using target::YellowTiming;

// What identifies a measurement: every node's op, mapping type, shapes/dtypes and attributes.
std::string yellow_key(const ecg::Graph& g, const YellowQuery& q);

std::vector<YellowTiming> measure_yellow(const ecg::Graph& g, const std::vector<YellowQuery>& queries, int threads,
                                         const target::Target& cpu);

}  // namespace dnnfusion::codegen
