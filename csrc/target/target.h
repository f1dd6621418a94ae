// Execution targets: the one interface through which the pipeline, the planners, the executor and
// the bridge reach the hardware a compiled graph runs on. A target says which nodes it runs (one
// answer per node, with the reason when not), adds its own passes after the target-neutral
// rewrites, gives the fusion planners its hooks, turns a fusion plan into the Program the executor
// runs (its code generator and module compiler), allocates its buffers, and owns its kernel table,
// so that kernels are keyed by (target, op). Targets live in csrc/target/<name>/ and are listed,
// one line each, in csrc/target/targets.def. Nothing outside csrc/target/ includes a target's own
// headers: a target's user-facing API is bound by its own csrc/target/<name>/python/bind_api.cc
// (pybind11, no torch; built into the extension only), which registers itself with the bridge,
// so the bridge names no target. How to add one: csrc/target/README.md.
// Precondition of every member: the graph verifies. Postcondition of codegen(): the Program
// computes every graph output as the unfused graph would.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/block_report.h"
#include "compile_options.h"
#include "compile_stats.h"
#include "ecg/graph.h"
#include "fusion/fusion_plan.h"
#include "fusion/plan_with_profiles.h"
#include "kernels/cpu/parallel.h"
#include "passes.h"
#include "runtime/op_kernels.h"
#include "runtime/program.h"

namespace dnnfusion::target {

using fusion::YellowQuery;
using fusion::YellowTiming;

struct CodegenOutput {
  runtime::Program program;  // empty: one step per node
  std::vector<codegen::BlockReport> blocks;
  std::map<std::string, int> edge_rules;  // "One-to-One->Many-to-Many: prologue" -> count
  int functions = 0;                      // distinct generated functions
  double compile_ms = 0;                  // module compiler time (0 on a cache hit)
  bool cache_hit = false;
  std::string source_path;                // the generated source, for debugging
};

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;  // one line, for listings and errors
  // The device type its buffers live on, as PyTorch names it ("cpu", "cuda").
  virtual std::string device_type() const = 0;
  // "" when this machine can run the target, else what is missing (device, driver, compiler).
  virtual std::string unavailable_reason() const { return ""; }
  // Whether the fusion modes "dnnfusion" and "tvm" mean anything here; if not, every plan is
  // mode "none" whatever the option says (and the report says so).
  virtual bool fuses() const = 0;

  // The kernel this target runs `op` with; nullptr if it has none.
  const runtime::OpKernel* find_kernel(const std::string& op) const;
  std::vector<std::string> kernel_ops() const;  // sorted
  // "" if node n runs on this target, else why not (no kernel, dtype, attribute, shape).
  std::string supports(const ecg::Graph& g, const ecg::Node& n) const;
  // The answer at import (the graph as imported so far, n's producers in view): import_decision
  // where the target gives one, else supports().
  std::string supports_at_import(const ecg::Graph& g, const ecg::Node& n, const CompileOptions& opts) const;
  // For a target whose support of a node depends on the compile options or on the nodes around
  // it (a kernel that absorbs its neighbours, which its passes then replace): "" or why not.
  // nullopt: the kernel table decides (the default).
  virtual std::optional<std::string> import_decision(const ecg::Graph& g, const ecg::Node& n,
                                                     const CompileOptions& opts) const {
    return std::nullopt;
  }
  // Whether compile-time subgraphs (constant folding) can run on this target's kernels over host
  // buffers; if not, the pipeline evaluates them on the registry's host evaluator.
  virtual bool evaluates_constants() const { return true; }

  // Sets every target_counters / target_notes entry this target reports (to 0 / ""), so that a
  // report lists them all even when the pass that fills them did not run.
  virtual void init_stats(CompileStats&) const {}
  // Passes of this target, run after the target-neutral rewrites, in order.
  virtual std::vector<Pass> passes(const CompileOptions&) const { return {}; }
  // The planners' hooks: what the code generator can express, what is free to merge.
  virtual fusion::PlanHooks plan_hooks(const CompileOptions&) const { return {}; }
  // The cost oracle of yellow cells (called only when fuses() and the profile option is on).
  virtual std::vector<YellowTiming> measure_yellow(const ecg::Graph& g, const std::vector<YellowQuery>& queries,
                                                   const CompileOptions& opts) const;
  // What identifies a yellow measurement beyond the op pair and shapes (attributes, the block).
  virtual std::string yellow_key(const ecg::Graph& g, const YellowQuery& q) const { return ""; }
  // Identifies the machine/configuration measurements are valid for (profile database keys).
  virtual std::string profile_signature(int threads) const { return name(); }
  // Code generator and module compiler: the plan's blocks as a Program. Default: no generated
  // code, one step per node (what mode "none" is everywhere).
  virtual CodegenOutput codegen(const ecg::Graph& g, const fusion::Plan& plan, const CompileOptions& opts) const {
    return {};
  }

  // Buffers (the executor's arena): `bytes` with 64-byte alignment, in the target's memory.
  virtual void* allocate(size_t bytes) const = 0;
  virtual void deallocate(void* p) const = 0;
  // The copy behind a data-movement op that cannot alias its input: `shape` elements of
  // `elem_size` bytes read from src at element strides/offset, written contiguously to dst.
  virtual void strided_copy(size_t elem_size, const std::vector<int64_t>& shape, const void* src,
                            const std::vector<int64_t>& strides, int64_t offset, void* dst,
                            const kernels::Parallel& par) const = 0;

 protected:
  // Fills the kernel table once, on first use (a duplicate op is an error).
  virtual void register_kernels(runtime::KernelTable& table) const = 0;

 private:
  const std::unordered_map<std::string, runtime::OpKernel>& table() const;
  mutable std::once_flag table_once_;
  mutable std::unordered_map<std::string, runtime::OpKernel> table_;
};

// 64-byte-aligned host memory (the allocator of the targets whose buffers live in host RAM);
// throws dnnfusion::Error when the allocation fails.
void* host_allocate(size_t bytes);
void host_deallocate(void* p);

// The targets this build knows, by name. registry() holds those of targets.def, first = default.
class Registry {
 public:
  // Throws dnnfusion::Error if a target of that name is registered already.
  void add(std::unique_ptr<Target> t);
  // Throws UnknownTarget listing the registered names.
  const Target& get(const std::string& name) const;
  // get(), then throws TargetUnavailable naming what this machine lacks.
  const Target& require_available(const std::string& name) const;
  const Target& default_target() const;
  // The first registered target whose buffers are host memory and that evaluates constants: what
  // folds the compile-time subgraphs of targets that cannot (Target::evaluates_constants).
  const Target& host_evaluator() const;
  std::vector<std::string> names() const;  // registration order

 private:
  std::vector<std::unique_ptr<Target>> targets_;
};

const Registry& registry();

}  // namespace dnnfusion::target
