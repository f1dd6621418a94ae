// The compile pipeline: the ordered list of passes from an imported ECG to an executable.
// DNNFUSION_DEBUG=1 dumps the ECG after each pass (or "unchanged"); DNNFUSION_TIME_PASSES=1
// prints each pass's time; DNNFUSION_VERIFY=1 runs the verifier after every pass.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/fused_codegen.h"
#include "ecg/graph.h"
#include "fusion/fusion_plan.h"
#include "runtime/executor.h"

namespace dnnfusion {

struct CompileOptions {
  int threads = 0;  // <= 0: one per physical core
  fusion::Mode fusion = fusion::Mode::DnnFusion;
  bool profile = true;  // measure yellow fusion cells (profile database); false: yellow never fuses
  // NCHW[x]c convolutions (csrc/layout). Global: blocks chosen by global search when the tuning
  // database has every candidate; Local: each conv its own fastest blocks (ablation); ConvsOnly:
  // transforms around every conv, no propagation (ablation); Off: NCHW everywhere.
  enum class Layout { Global, Local, ConvsOnly, Off } layout = Layout::Global;
  bool tune = false;       // measure conv candidates the tuning database lacks (progress bar)
  std::string tuning_db = "<default>";  // path; "" = no database (heuristic knobs, nothing measured)
  // mm/addmm with a compile-time weight read it packed once (layout/pack_gemm_weights); false:
  // packed on every call (ablation; Python option pack_gemm_weights=False).
  bool pack_gemm_weights = true;
  // 1x1 expand conv + activation + depthwise conv as one kernel (layout/fuse_expand_depthwise;
  // DNNFusion mode with layout on); false for the ablation (Python option fuse_expand_depthwise).
  bool fuse_expand_depthwise = true;
  // 3x3 stride-1 convs run Winograd F(2x2, 3x3) where kernels::conv_winograd_pays (layout on);
  // false: the direct algorithm everywhere (Python option winograd).
  bool winograd = true;
};
// Parses "global" | "local" | "convs-only" | "off"; throws dnnfusion::Error naming the valid ones.
CompileOptions::Layout parse_layout_mode(const std::string& s);

struct PassRecord {
  std::string name;
  double ms = 0;
  bool changed = false;
  std::string detail;
};

struct Compiled {
  std::unique_ptr<runtime::Executable> exe;
  std::vector<PassRecord> passes;
  int folded_nodes = 0;
  int gemms_packed = 0;            // mm/addmm now reading a weight packed at compile time
  // Fusion report (DNNFusion Table 5 quantities).
  int ops_imported = 0;         // ECG nodes before any pass
  int ops_after_rewrite = 0;    // nodes entering fusion planning
  std::map<std::string, int> rules_applied;
  fusion::Plan plan;
  std::vector<codegen::BlockReport> blocks;
  std::map<std::string, int> edge_rules;
  int generated_functions = 0;
  int profiled_pairs = 0;       // yellow pairs measured by this compile (0: all found in the database)
  double codegen_compile_ms = 0;  // system compiler time (0 when the kernel cache had it)
  bool codegen_cache_hit = false;
  std::string generated_source_path;
  // Layout report (csrc/layout).
  int convs_winograd_f2 = 0, convs_winograd_f4 = 0;  // of convs_blocked, run as Winograd F(2x2) / F(4x4)
  int convs_blocked = 0, layout_to_blocked = 0, layout_to_plain = 0, layout_reblocked = 0, layout_propagated = 0;
  std::string layout_method;       // how the conv schemes were chosen (SchemeReport::method)
  int convs_tuned_now = 0;         // (workload, block pair) entries measured by this compile
  int expand_dw_fused = 0;         // 1x1 expand + depthwise conv chains run as one kernel
};

Compiled compile_graph(ecg::Graph g, const CompileOptions& opts);

}  // namespace dnnfusion
