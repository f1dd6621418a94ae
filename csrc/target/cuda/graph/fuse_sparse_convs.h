// The cuda target's pass: every sparse convolution chain (graph/sparse_conv_chains.h) whose value
// the rest of the graph reads becomes one `sparse_conv2d` node running a kernel generated for its
// weights, with its bias, residual add and ReLU/ReLU6 applied in the kernel before the store. The
// kernels are built here (template from the on-disk cache or NVRTC, rewrite, ptxas), through the
// process-wide cache of sparse_conv/compiled_conv_cache.h; the node's attribute "kernel" names the
// entry. A chain value read by something other than the next step of its chain (or a graph output)
// gets a node of its own, so every accepted op is replaced even when an intermediate is shared
// (the convolution is then computed once per such value).
//
// sparse_conv2d: inputs (x, weight, bias or absent, residual or absent), attributes stride,
// padding, dilation (the convolution's), activation ("none" | "relu" | "relu6"), kernel.
// Precondition: the graph verifies; the target-neutral rewrites ran (batch norms folded, weights
// constant-folded). Postcondition: the graph verifies, computes the same values up to fp32
// rounding, and no chain op remains; `report` gets one line per built kernel.
#pragma once
#include <string>
#include <vector>

#include "compile_options.h"
#include "ecg/graph.h"

namespace dnnfusion::cuda {

struct FuseSparseConvsReport {
  int kernels = 0;          // sparse_conv2d nodes emitted
  int reused = 0;           // of those, found already built in this process
  int epilogue_ops = 0;     // add / activation nodes absorbed
  std::vector<std::string> lines;  // per kernel: shape, density, SASS FFMA, registers, times
};

// device < 0: kernels built for `arch` and run emulated on the CPU (no driver touched).
ecg::Graph fuse_sparse_convs(const ecg::Graph& g, const CompileOptions& opts, const std::string& arch, int device,
                             FuseSparseConvsReport* report);

}  // namespace dnnfusion::cuda
