// One sparse convolution kernel, end to end: the shape's dense template PTX
// (conv_template, cached on disk), rewritten for the real weights (ptx_rewrite: zero weights cost
// no instruction), assembled by ptxas for one GPU architecture, with its statistics (PTX and SASS
// FMA counts, registers, spills, cubin bytes, the time of each step). If ptxas reports register
// spills, the tile is shrunk (conv_spec.h `smaller`) and the kernel rebuilt, until it fits or the
// tile is minimal.
//
// Precondition: a shape that passes ConvShape::validate(), K*C*R*S finite weights (KCRS), an arch
// that validate_arch() accepts. Postcondition: the kernel's PTX, launched with `launch` over the
// kernel ABI of conv_template.h, computes act(conv(x, w) + bias + residual); emulate() runs exactly
// that PTX on the CPU through the PTX interpreter, and launch() runs the assembled cubin on a GPU.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "target/cuda/sparse_conv/conv_spec.h"

namespace dnnfusion::cuda {

struct SparseConvStats {
  int64_t weights = 0;           // K*C*R*S
  int64_t nonzeros = 0;
  int64_t ptx_fma = 0;           // FMAs left in the rewritten PTX
  int64_t ptx_fma_dense = 0;     // FMAs of the dense template (weights x outputs per weight)
  long sass_ffma = -1;           // from nvdisasm; -1 when it is not installed (see sass_note)
  long sass_instructions = 0;    // .text bytes / 16
  long registers = 0;            // per thread, from ptxas
  long spill_bytes = 0;          // spill stores + loads of the final kernel (0 unless the tile is minimal)
  long cubin_bytes = 0;
  int tile_shrinks = 0;          // rebuilds with a smaller tile because ptxas spilled
  bool template_cache_hit = false;
  double template_seconds = 0;   // template source + NVRTC (or cache read) + checks, all tiles tried
  double nvrtc_seconds = 0;      // of that, NVRTC
  double rewrite_seconds = 0;
  double ptxas_seconds = 0;
  std::string sass_note;         // why sass_ffma is -1, else ""
};

struct SparseConvOptions {
  std::string arch = "sm_90";
  std::string cache_dir;  // template PTX cache; "": the private per-user cache (common/private_cache.h), "cuda"
};

struct SparseConvKernel {
  ConvShape shape;
  Epilogue epilogue;
  ConvTile tile;
  LaunchDims launch;
  std::string arch, entry, ptx, cubin;
  SparseConvStats stats;

  // The parsed PTX and the loaded GPU module, made on first use and kept with the kernel.
  struct Loaded;
  mutable std::mutex loaded_mutex;
  mutable std::shared_ptr<Loaded> loaded;
};

// Builds the kernel of `weights` (K*C*R*S floats, KCRS). Throws InvalidInput on a bad shape, arch
// or weight (NaN/Inf), TargetUnavailable without NVRTC or ptxas, UnsupportedOp for a layer whose
// template would be too large to compile in reasonable time.
std::shared_ptr<const SparseConvKernel> build_sparse_conv(const ConvShape& shape, const Epilogue& epilogue,
                                                          const float* weights, const SparseConvOptions& options);

// Runs the kernel's PTX on the CPU (the PTX interpreter) over its whole grid: x (n, c, h, w), bias
// (k) and residual (n, k, out_h, out_w) when the epilogue has them (else ignored), y (n, k, out_h,
// out_w), all contiguous host memory. `threads`: host threads running blocks.
void emulate_sparse_conv(const SparseConvKernel& kernel, const float* x, const float* bias, const float* residual,
                         float* y, int threads);

// Runs the cubin on the current CUDA device's `stream` (a CUstream; nullptr = the default stream)
// with device pointers; the module is loaded on first use and kept. TargetUnavailable without a
// CUDA driver and device.
void launch_sparse_conv(const SparseConvKernel& kernel, uint64_t x, uint64_t bias, uint64_t residual, uint64_t y,
                        void* stream, int device);

}  // namespace dnnfusion::cuda
