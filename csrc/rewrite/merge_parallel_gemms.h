// Horizontal GEMM merging (distributivity of the matrix product over column concatenation):
//   X·W1 + b1, X·W2 + b2, ...  =  slices of  X·[W1 W2 ...] + [b1 b2 ...]
// One GEMM over the concatenated weight reads X once and launches once instead of n times; the
// concatenation is a weight-only subgraph that fold_constants evaluates at compile time. This is
// what turns a transformer layer's separate query/key/value projections into one kernel.
//
// Merges addmm nodes (alpha = beta = 1, 1-D compile-time bias of length N) that share the same
// activation X [M, K] and have constant weights [K, N] (already folded: run after fold_constants), when every user of each output is
// data movement (view/permute family: the attention head split), so the column slices become
// strided operands instead of copies. mm nodes (no bias) are merged among themselves likewise.
// Precondition: the graph verifies. Postcondition: the graph verifies and computes the same
// values (the same products and sums, in the same order per element); run fold_constants after.
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// `merged` (optional) receives the number of GEMM nodes removed (a group of n counts n - 1).
ecg::Graph merge_parallel_gemms(const ecg::Graph& g, int* merged = nullptr);

}  // namespace dnnfusion::rewrite
