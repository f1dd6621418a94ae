// Folds inference batch norm into the convolution (or addmm/mm) that feeds it:
//   y = γ (conv(x, W) + b − μ) / √(σ² + ε) + β  =  conv(x, W·s, (b − μ)·s + β),  s = γ / √(σ² + ε)
// with s applied per output channel (dim 0 of a conv weight, the columns of an mm weight). The new
// weight and bias are emitted as weight-only ECG nodes (add/sqrt/div/mul/sub/view over the
// original tensors), so fold_constants computes them; nothing is evaluated here.
//
// Folds `_native_batch_norm_legit_no_training` when: its output 0 is the only one used; its input
// is output 0 of a non-transposed convolution, or of an mm / addmm (alpha = beta = 1) on a rank-2
// input (BatchNorm1d after linear), used by nothing else; the weight, every BN parameter and the
// bias are compile-time; everything is float32. Any other BN stays (it is a One-to-One op).
// Precondition: the graph verifies. Postcondition: the graph verifies and computes the same
// values up to fp32 rounding; run fold_constants afterwards to evaluate the new weights.
#pragma once
#include <utility>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// `folded` (optional) receives the number of batch norms folded.
ecg::Graph fold_batchnorm(const ecg::Graph& g, int* folded = nullptr);

// Whether `bn` is an inference batch norm whose output 0 alone is used, over a float32 input of
// rank >= 2 (K = dim 1 channels), with running mean and variance present and every parameter
// compile-time, float32, of shape [K]: the precondition of both ways to remove it.
bool constant_batchnorm(const ecg::Graph& g, const std::vector<char>& is_const, const ecg::Node& bn);

class GraphRebuilder;
// For inference batch norm node `bn` of rb.src() (running mean and variance present): emits
// s = γ / √(σ² + ε) (1 / √(σ² + ε) without γ) and shift = β − μ·s (no β: −μ·s) as [K] weight-only
// nodes; returns {s, shift} as new ids. Shared with batchnorm_to_affine.
std::pair<int, int> emit_batchnorm_scale_shift(GraphRebuilder& rb, const ecg::Node& bn);

}  // namespace dnnfusion::rewrite
