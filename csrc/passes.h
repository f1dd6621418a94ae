// Passes as data: a name and a function over a PassContext, so the pipeline and each target list
// their passes and one logger (pass_logger.h) runs them all the same way. Also the builders of the
// passes that more than one list uses (constant folding, the counting rewrites).
// Precondition of every pass: the graph verifies. Postcondition: it verifies and computes the
// same values (passes change how, never what).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compile_options.h"
#include "compile_stats.h"
#include "ecg/graph.h"

namespace dnnfusion {

namespace target {
class Target;
}

// Runs a graph whose inputs are all weights/constants on the compile's target and returns each
// output's bytes (constant folding evaluates with the kernels that will run the graph).
using Evaluator = std::function<std::vector<std::vector<uint8_t>>(const ecg::Graph&)>;

// What a pass may touch: the graph it rewrites, the compile's options and statistics, the
// target, the evaluator, and its own record (changed / detail, for DNNFUSION_DEBUG and
// DNNFUSION_TIME_PASSES).
struct PassContext {
  ecg::Graph& g;
  const CompileOptions& opts;
  CompileStats& stats;
  const target::Target& target;
  const Evaluator& evaluate;
  bool changed = false;
  std::string detail;
};

struct Pass {
  std::string name;
  std::function<void(PassContext&)> run;
};

// Constant folding (rewrite/fold_constants), adding to CompileStats::folded_nodes.
Pass fold_constants_pass();
// A rewrite `ecg::Graph f(const ecg::Graph&, int* count)`: the detail says "<count> <what>"; with
// `rule`, the count is reported under that name in CompileStats::rules_applied; with `counter`,
// it is added to CompileStats::target_counters[counter].
using CountingRewrite = ecg::Graph (*)(const ecg::Graph&, int*);
Pass counting_pass(std::string name, CountingRewrite f, std::string what, std::string rule = "",
                   std::string counter = "");

}  // namespace dnnfusion
