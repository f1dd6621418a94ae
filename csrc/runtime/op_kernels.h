// The contract between the executor and a target's kernels: for each op, whether this node can run
// (and why not), how much scratch it needs, how to run it, and — for data-movement ops — the
// strided view of its input that it computes (the executor aliases contiguous views instead of
// copying them). Which kernels exist is each target's business (csrc/target/target.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "kernels/cpu/fusion_hooks.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::runtime {

// Where a device target's kernels run: the device index and the stream (e.g. a CUstream) on which
// the caller's framework orders its work. Host targets get none.
struct DeviceContext {
  int index = 0;
  void* stream = nullptr;
};

struct KernelCall {
  const ecg::Graph& g;
  const ecg::Node& n;
  std::vector<const void*> in;  // one per node input (nullptr for absent optionals)
  std::vector<void*> out;       // one per node output, contiguous buffers
  void* scratch;                // scratch_bytes() bytes, 64-byte aligned
  const kernels::Parallel& par;
  // Set only for ops whose OpKernel advertises the hook (fused blocks, csrc/codegen).
  const kernels::ElementHook* epilogue = nullptr;
  const kernels::ElementHook* prologue = nullptr;
  // Per input: element strides of a strided operand (empty: contiguous). Only set for inputs the
  // OpKernel lists in strided_inputs (a fused block's data-movement ops folded into the operand).
  const std::vector<std::vector<int64_t>>* in_strides = nullptr;
  const std::vector<int64_t>& strides_of(size_t i) const {
    static const std::vector<int64_t> none;
    return in_strides && i < in_strides->size() ? (*in_strides)[i] : none;
  }
  // Element strides at which output 0 is written (empty: contiguous). Only set for ops whose
  // OpKernel has strided_output: a fused block's permute of the output folded into the store.
  const std::vector<int64_t>* out_strides = nullptr;
  const DeviceContext* device = nullptr;  // set by callers that run a device target
};

// Output `slot` as a strided view of input 0 (all in elements).
struct ViewSpec {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  bool is_contiguous() const;  // strides are the row-major strides of shape
};

struct OpKernel {
  // "" if this node runs in the core, else the reason it falls back (dtype, attribute, ...).
  std::string (*check)(const ecg::Graph&, const ecg::Node&) = nullptr;
  size_t (*scratch_bytes)(const ecg::Graph&, const ecg::Node&, int threads) = nullptr;
  void (*run)(KernelCall&) = nullptr;
  // Data-movement ops only: describes output `slot`; the executor copies or aliases.
  ViewSpec (*view)(const ecg::Graph&, const ecg::Node&, int slot) = nullptr;
  // run() honours KernelCall::epilogue (applied to output 0) / KernelCall::prologue (computes
  // input 0, which is then null) when these are set.
  bool epilogue_hook = false;
  bool prologue_hook = false;
  // Bit i set: run() reads input i through KernelCall::strides_of(i) when given.
  uint32_t strided_inputs = 0;
  // run() writes output 0 through KernelCall::out_strides when given, provided its innermost dim
  // stays contiguous (stride 1, or extent 1): kernels store whole rows.
  bool strided_output = false;
};

// A target's kernel table (csrc/target/target.h): op name -> kernel, filled once per target.
using KernelTable = std::vector<std::pair<std::string, OpKernel>>;
// The data-movement ops (view, permute, expand, slice, split...): pure index arithmetic that any
// target whose buffers are addressable by strides can register as it is.
void register_view_ops(KernelTable& t);

// Helpers shared by the binding files.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
int64_t normalize_dim(int64_t dim, int64_t rank, const ecg::Node& n);
std::string require_dtypes(const ecg::Graph& g, const ecg::Node& n, std::initializer_list<DType> allowed);
// var's divisor is N - correction: ATen's var.dim says it as `unbiased` (true: 1, false: 0),
// var.correction as `correction` (default 1).
double var_correction(const ecg::Node& n);

}  // namespace dnnfusion::runtime
