// What a compile did, as named fields: filled by the pipeline and its passes, read by the bridge
// (one struct crosses into Python, where explain() reads the fields by name). Target-specific
// quantities go into `target_counters` / `target_notes` under names the target's Python glue
// (dnnfusion/targets/<name>.py) declares and checks.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dnnfusion {

struct PassRecord {
  std::string name;
  double ms = 0;
  bool changed = false;
  std::string detail;
};

struct CompileStats {
  std::string target;             // the target the graph was compiled for
  std::vector<PassRecord> passes;  // in the order they ran
  int folded_nodes = 0;           // constant-folded nodes over all fold_constants runs
  // Fusion report (DNNFusion Table 5 quantities).
  int ops_imported = 0;           // ECG nodes before any pass
  int ops_after_rewrite = 0;      // nodes entering fusion planning
  std::map<std::string, int> rules_applied;
  std::map<std::string, int> edge_rules;
  int generated_functions = 0;
  int profiled_pairs = 0;         // yellow pairs measured by this compile (0: all in the database)
  double codegen_compile_ms = 0;  // module compiler time (0 when the kernel cache had it)
  bool codegen_cache_hit = false;
  std::string generated_source_path;
  std::map<std::string, int64_t> target_counters;
  std::map<std::string, std::string> target_notes;
};

}  // namespace dnnfusion
