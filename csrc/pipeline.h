// The compile pipeline: the ordered list of passes from an imported ECG to an executable.
// DNNFUSION_DEBUG=1 dumps the ECG after each pass (or "unchanged"); DNNFUSION_TIME_PASSES=1
// prints each pass's time; DNNFUSION_VERIFY=1 runs the verifier after every pass.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "runtime/executor.h"

namespace dnnfusion {

struct CompileOptions {
  int threads = 0;  // <= 0: one per physical core
};

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
};

Compiled compile_graph(ecg::Graph g, const CompileOptions& opts);

}  // namespace dnnfusion
