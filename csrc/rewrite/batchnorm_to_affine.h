// Turns each inference batch norm that fold_batchnorm could not fold (its input is not a conv or
// linear output it may absorb into, e.g. DenseNet's pre-activation BN on a concatenation) into a
// per-channel affine map:  y = x · s + shift,  s = γ / √(σ² + ε),  shift = β − μ·s,
// with s and shift viewed as [K, 1, ..., 1] so they broadcast over channel dim 1. As a mul and an
// add with per-channel constants it is element-wise: it fuses with its neighbours, and the layout
// pass keeps it on NCHW[x]c tensors (a batch-norm node forced a transform to NCHW and back).
// s and shift are weight-only nodes that fold_constants evaluates.
// Applies to every BN that satisfies constant_batchnorm (fold_batchnorm.h) and is still there
// after fold_batchnorm.
// Precondition: the graph verifies. Postcondition: the graph verifies and computes the same
// values up to fp32 rounding (the same s and shift the folded form uses).
#pragma once
#include "ecg/graph.h"

namespace dnnfusion::rewrite {

// `rewritten` (optional) receives the number of batch norms turned into mul + add.
ecg::Graph batchnorm_to_affine(const ecg::Graph& g, int* rewritten = nullptr);

}  // namespace dnnfusion::rewrite
