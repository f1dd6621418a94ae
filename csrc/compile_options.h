// What a compile is asked to do: the options that cross the Python bridge as one struct. The
// first group is target-neutral; the next ones are read by the targets that implement them (the
// cpu target's NCHW[x]c layouts, Winograd, GEMM packing; the cuda target's sparse kernels), and
// ignored by the others.
#pragma once
#include <cstdint>
#include <string>

#include "fusion/fusion_plan.h"

namespace dnnfusion {

struct CompileOptions {
  std::string target;  // a name from csrc/target/targets.def; "": the default (its first line)
  int threads = 0;             // <= 0: one per physical core
  fusion::Mode fusion = fusion::Mode::DnnFusion;
  bool profile = true;  // measure yellow fusion cells (profile database); false: yellow never fuses

  // ---- cpu target ----
  // NCHW[x]c convolutions (csrc/target/cpu/layout). Global: blocks chosen by global search when
  // the tuning database has every candidate; Local: each conv its own fastest blocks (ablation);
  // ConvsOnly: transforms around every conv, no propagation (ablation); Off: NCHW everywhere.
  enum class Layout { Global, Local, ConvsOnly, Off } layout = Layout::Global;
  bool tune = false;       // measure conv candidates the tuning database lacks (progress bar)
  std::string tuning_db = "<default>";  // path; "" = no database (heuristic knobs, nothing measured)
  // mm/addmm with a compile-time weight read it packed once (pack_gemm_weights); false: packed on
  // every call (ablation; Python option pack_gemm_weights=False).
  bool pack_gemm_weights = true;
  // 1x1 expand conv + activation + depthwise conv as one kernel (fuse_expand_depthwise; DNNFusion
  // mode with layout on), with the SE mean and, where the depthwise output is large, the 1x1
  // projection; false for the ablation (Python option fuse_expand_depthwise).
  bool fuse_expand_depthwise = true;
  // 3x3 stride-1 convs run Winograd where kernels::conv_winograd_pays (layout on); false: the
  // direct algorithm everywhere (Python option winograd).
  bool winograd = true;
  // Where the AMX bf16x6 kernels run on a CPU with AMX (fp32 accuracy from six bf16 products):
  // Measure times them against the fp32 kernels on each layer the shape rules allow and keeps
  // the faster (layout/measure_amx.h; once per shape and process); Rule takes every such layer;
  // Off none (Python option amx = 'measure' | 'rule' | 'off').
  enum class Amx { Measure, Rule, Off } amx = Amx::Measure;

  // ---- cuda target ----
  // A convolution gets a kernel generated for its weights when at least this fraction of its
  // weights is zero (Python option sparse_threshold); denser ones stay on ATen (cuDNN).
  double sparse_threshold = 0.7;
  // ...and when it has at most this many weights (K*C*R*S): the template's one-time compile grows
  // faster than linearly with it (Python option sparse_max_weights).
  int64_t sparse_max_weights = int64_t{1} << 20;

  // ---- set by the bridge ----
  int device_index = 0;  // the device a device target's region runs on (its weights' device)
};

// Parses "global" | "local" | "convs-only" | "off"; throws dnnfusion::InvalidInput naming the valid ones.
CompileOptions::Layout parse_layout_mode(const std::string& s);
// Parses "measure" | "rule" | "off"; throws dnnfusion::InvalidInput naming the valid ones.
CompileOptions::Amx parse_amx_mode(const std::string& s);
const char* amx_mode_name(CompileOptions::Amx a);

}  // namespace dnnfusion
