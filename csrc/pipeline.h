// The compile pipeline, top to bottom: import (the caller's ECG) -> verify -> target-neutral
// rewrites -> the target's passes -> fusion planning with the target's hooks -> the target's code
// generation -> memory planning and binding (runtime::Executable). Every pass runs through one
// PassLogger: DNNFUSION_DEBUG=1 dumps the ECG after each pass (or "unchanged"),
// DNNFUSION_TIME_PASSES=1 prints each pass's time, DNNFUSION_VERIFY=1 runs the verifier after every
// pass. The pipeline never names a particular target (csrc/target/target.h).
#pragma once
#include <memory>
#include <vector>

#include "codegen/block_report.h"
#include "compile_options.h"
#include "compile_stats.h"
#include "ecg/graph.h"
#include "fusion/fusion_plan.h"
#include "runtime/executor.h"

namespace dnnfusion {

struct Compiled {
  std::unique_ptr<runtime::Executable> exe;
  CompileStats stats;
  fusion::Plan plan;
  std::vector<codegen::BlockReport> blocks;  // what code generation made of each plan block
};

// Throws UnknownTarget / TargetUnavailable for opts.target before any pass runs.
Compiled compile_graph(ecg::Graph g, const CompileOptions& opts);

}  // namespace dnnfusion
