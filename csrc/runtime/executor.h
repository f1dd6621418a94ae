// Runs an ECG on a target (csrc/target/target.h): executes a Program (runtime/program.h: the
// target's kernels per node, or a fusion plan's generated code and hooked kernels), aliases
// contiguous views instead of copying them, plans every materialized intermediate into one arena
// (the target's memory) by liveness, and runs the steps in order on a persistent thread pool.
// Without a Program: one step per node.
// Precondition: the graph verifies, the target supports every node a Node step runs (else the
// constructor throws naming the node), and a Program's steps write each value before reading it.
// Postcondition of run(): every graph output buffer holds its value.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "runtime/op_kernels.h"
#include "runtime/program.h"
#include "runtime/thread_pool.h"

namespace dnnfusion::target {
class Target;
}

namespace dnnfusion::runtime {

struct ExecOptions {
  int threads = 0;  // <= 0: one per physical core
  const target::Target* target = nullptr;  // whose kernels and memory; nullptr: the default target
};

struct ExecStats {
  int num_nodes = 0;
  int kernels_per_call = 0;   // kernel launches per run(); aliased views launch none
  int aliased_views = 0;
  int64_t arena_bytes = 0;    // planned peak of intermediate buffers
  int64_t naive_bytes = 0;    // one buffer per intermediate, for comparison
  int64_t scratch_bytes = 0;  // largest kernel scratch, shared by all nodes
  int64_t flops = 0;
  int blocks = 0;             // fusion blocks (0 without a Program)
  int generated_steps = 0;    // steps that run generated code (loop nests)
  int hooked_steps = 0;       // library kernels running a generated prologue/epilogue
  int64_t irs_bytes = 0;      // bytes of intermediate results written to memory per call
  int64_t constant_bytes = 0;  // the graph's own constants, gathered into one huge-page block
};

class Executable {
 public:
  Executable(ecg::Graph graph, const ExecOptions& opts, Program program = {});
  ~Executable();
  // inputs: one pointer per graph input (contiguous, graph dtype/shape); outputs: one
  // preallocated contiguous buffer per graph output. Thread-safe (calls are serialized).
  // `device`: the device and stream a device target's kernels run on (KernelCall::device).
  void run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
           const DeviceContext* device = nullptr);

  const ecg::Graph& graph() const { return graph_; }
  const ExecStats& stats() const { return stats_; }
  int threads() const { return pool_->num_threads(); }

 private:
  enum class Base : int8_t { Input, Output, Arena, Fixed };
  struct Loc {
    Base base = Base::Arena;
    int index = 0;            // input/output position
    int64_t byte_offset = 0;  // from the base (arena offset, view offset)
    const void* fixed = nullptr;
  };
  struct Bound {
    Step step;
    const OpKernel* kernel = nullptr;  // Node steps
    bool skip = false;  // every output is an alias, or empty: nothing to launch
    bool writes_nothing = false;  // every value it writes has zero elements
    std::vector<char> aliased;  // per output: a view into its input, not written by this step
    std::vector<const void*> ptrs;  // pointer table of step.args, refilled per call
    kernels::ElementHook epi, pro;
    std::vector<std::vector<int64_t>> in_strides;  // per node input, from step.input_views
    std::vector<const void*> in;  // KernelCall::in / out, kept between calls (no allocation per step)
    std::vector<void*> out;
    double total_ns = 0;  // DNNFUSION_STEP_PROFILE=1: time spent in this step over all calls
  };
  // Moves the constants the graph owns and its steps read (packed weights, folded constants) into
  // one block on huge pages (common/large_alloc.h): a model streams them on every call, and most
  // are far smaller than a huge page on their own. Against only those of 2 MiB or more on huge
  // pages, batch 1, 2 threads, one process: mobilenet_v3_large 6.5%, mobilenet_v2 4.7%, resnet50
  // 2.6%, efficientnet_b0 1.2% faster. Borrowed weights stay where their owner keeps them.
  void gather_constants(const Program& program);
  void* resolve(const Loc& l, const std::vector<const void*>& in, const std::vector<void*>& out) const;

  ecg::Graph graph_;
  const target::Target* target_ = nullptr;
  ThreadPool* pool_ = nullptr;
  std::vector<Loc> loc_;
  std::vector<Bound> steps_;
  std::shared_ptr<void> module_;
  ExecStats stats_;
  std::mutex run_mu_;
  bool profile_steps_ = false;  // $DNNFUSION_STEP_PROFILE: time each step, print the top ones at exit
  int profile_top_ = 0;
  int64_t calls_ = 0;
  std::shared_ptr<void> constants_;  // gather_constants' block
  void* arena_ = nullptr;
  size_t arena_size_ = 0;
  int64_t scratch_offset_ = 0;
};

}  // namespace dnnfusion::runtime
