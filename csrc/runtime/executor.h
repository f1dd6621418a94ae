// Runs an ECG on the CPU: resolves every node to its kernel binding, aliases contiguous views
// instead of copying them, plans intermediate buffers into one arena by liveness, and executes
// the nodes in order on a persistent thread pool.
// Precondition: the graph verifies and every node passes check_node (else the constructor throws
// naming the node). Postcondition of run(): every graph output buffer holds its value.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "runtime/op_kernels.h"
#include "runtime/thread_pool.h"

namespace dnnfusion::runtime {

struct ExecOptions {
  int threads = 0;  // <= 0: one per physical core
};

struct ExecStats {
  int num_nodes = 0;
  int kernels_per_call = 0;   // kernel launches per run(); aliased views launch none
  int aliased_views = 0;
  int64_t arena_bytes = 0;    // planned peak of intermediate buffers
  int64_t naive_bytes = 0;    // one buffer per intermediate, for comparison
  int64_t scratch_bytes = 0;  // largest kernel scratch, shared by all nodes
  int64_t flops = 0;
};

class Executable {
 public:
  Executable(ecg::Graph graph, const ExecOptions& opts);
  ~Executable();
  // inputs: one pointer per graph input (contiguous, graph dtype/shape); outputs: one
  // preallocated contiguous buffer per graph output. Thread-safe (calls are serialized).
  void run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs);

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
  struct Step {
    int node = -1;
    const OpKernel* kernel = nullptr;
    bool skip = false;  // every output is an alias: nothing to launch
    std::vector<char> aliased;  // per output: a view into its input, not written by this step
  };
  void* resolve(const Loc& l, const std::vector<const void*>& in, const std::vector<void*>& out) const;

  ecg::Graph graph_;
  ThreadPool* pool_ = nullptr;
  std::vector<Loc> loc_;
  std::vector<Step> steps_;
  ExecStats stats_;
  std::mutex run_mu_;
  void* arena_ = nullptr;
  size_t arena_size_ = 0;
  int64_t scratch_offset_ = 0;
};

}  // namespace dnnfusion::runtime
