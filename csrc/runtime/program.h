// What the executor runs per call when a fusion plan was applied: an ordered list of steps, each
// either one node's library kernel (optionally with a fused block's generated prologue/epilogue
// hooked in) or a generated loop nest that computes one fused block's values. Produced by
// csrc/codegen; without a Program the executor runs one step per node (fusion mode "none").
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/fusion_hooks.h"

extern "C" {
// The C ABI between generated code and the runtime's thread pool (generated sources declare the
// same struct): parallel_for splits [0, n) into chunks of at least `grain` and calls body on each.
struct dnnf_parallel {
  void* pool;
  void (*parallel_for)(void* pool, int64_t n, int64_t grain,
                       void (*body)(const void* ctx, int64_t begin, int64_t end), const void* ctx);
};
}

namespace dnnfusion::runtime {

// A generated loop nest: args = one pointer per Step::args entry.
using GeneratedFn = void (*)(const void* const* args, const dnnf_parallel* par);
using HookFn = void (*)(const void* ctx, float* data, int64_t start, int64_t count);

struct Step {
  enum class Kind : int8_t { Node, Generated };
  Kind kind = Kind::Node;
  int node = -1;                  // Node: the node whose kernel runs
  GeneratedFn fn = nullptr;       // Generated: the loop nest
  HookFn epilogue = nullptr;      // Node: applied to output 0 inside the kernel
  HookFn prologue = nullptr;      // Node: computes input 0 inside the kernel
  // Node: inputs read through a strided view of another value instead of a materialized tensor.
  struct InputView {
    int slot;                     // input position of the node
    int value;                    // the value whose buffer is read
    std::vector<int64_t> strides; // element strides, in the node input's shape
    int64_t offset = 0;           // elements
  };
  std::vector<InputView> input_views;
  // Node: output 0 written at these element strides (in the output's shape) into its buffer, which
  // is that of a permuted view of it (empty: contiguous).
  std::vector<int64_t> out_strides;
  std::vector<int> args;          // value ids whose addresses form the generated code's pointer table
  // Node: positions in args of the operands the epilogue reads at the output's own element
  // indices (ElementHook::same_index, at most two).
  std::vector<int> epilogue_same_index;
  std::vector<int> reads;         // value ids read (liveness)
  std::vector<int> writes;        // value ids written (liveness); for Node steps: the node's outputs
  int block = -1;                 // fusion block it belongs to
  std::string label;              // for reports: "block 3: conv+add+relu (epilogue)"
};

struct Alias {
  int value;        // this value has no buffer of its own...
  int target;       // ...it lives in target's buffer
  int64_t byte_offset = 0;
  int after_step = 0;  // takes effect once steps [0, after_step] are bound; aliases sorted by it
};

struct Program {
  std::vector<Step> steps;
  std::vector<Alias> aliases;       // applied before memory planning, in order
  std::shared_ptr<void> module;     // keeps the generated code loaded
  int blocks = 0;
};

}  // namespace dnnfusion::runtime
