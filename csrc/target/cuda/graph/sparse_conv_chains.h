// Which convolutions of a graph get a sparse kernel of their own, and which element-wise ops after
// them the kernel absorbs: the one place that decides it, read both when the cuda target says
// which nodes it runs (at import, before the rewrites) and by the pass that builds the kernels
// (after them), so that every node accepted at import is one the pass replaces.
//
// A convolution is eligible when it is a plain 2-D convolution (groups 1, not transposed, float32,
// batched NCHW input) whose weight and bias are compile-time, whose weights have at least
// `sparse_threshold` zeros, and whose weight count is at most `sparse_max_weights` (the template's
// compile time grows with it). A value is a *chain* of an eligible convolution when it is, with
// BN folded, act(conv(x) + bias [+ residual]):
//   conv                                  -> the convolution's output
//   _native_batch_norm_legit_no_training  -> of a bare chain, only with `through_batchnorm` (at
//                                            import: fold_batchnorm folds it into the convolution
//                                            before the pass, which must not read past one)
//   add(chain, r) / add(r, chain)         -> of a chain with no residual and no activation; r a
//                                            float32 tensor of the same shape, alpha 1
//   relu, hardtanh(0, 6), clamp(0, 6)     -> of a chain with no activation yet
// Precondition: the graph verifies. Postcondition: none (queries).
#pragma once
#include <optional>
#include <string>

#include "compile_options.h"
#include "ecg/graph.h"
#include "target/cuda/sparse_conv/conv_spec.h"

namespace dnnfusion::cuda {

struct SparseChain {
  int conv = -1;      // the convolution node
  int residual = -1;  // the added value, or -1
  Activation act = Activation::none;
  int from = -1;      // the value this step extends (-1 for the convolution itself)
};

// "" when node n (a convolution) is eligible, else why not (for explain()).
std::string sparse_conv_refusal(const ecg::Graph& g, const ecg::Node& n, const CompileOptions& opts);
// The conv shape of an eligible convolution node.
ConvShape conv_shape_of(const ecg::Graph& g, const ecg::Node& n);
// Fraction of non-zero weights of convolution node n (its weight must be compile-time).
double weight_density(const ecg::Graph& g, const ecg::Node& n);

// The chain value `v` is, or nullopt. Pure function of the graph (recursive over producers).
std::optional<SparseChain> chain_of(const ecg::Graph& g, int v, const CompileOptions& opts,
                                    bool through_batchnorm = false);
// "" when node n is a chain step (its output 0 a chain, batch norms passed through), else why not:
// the support answer of the cuda target at import for every op it accepts.
std::string chain_refusal(const ecg::Graph& g, const ecg::Node& n, const CompileOptions& opts);

}  // namespace dnnfusion::cuda
