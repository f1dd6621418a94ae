// Binds ECG ops to CPU kernels: for each op, whether this node can run in the core (and why not),
// how much scratch it needs, how to run it, and — for data-movement ops — the strided view of its
// input that it computes (the executor aliases contiguous views instead of copying them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "kernels/cpu/parallel.h"

namespace dnnfusion::runtime {

struct KernelCall {
  const ecg::Graph& g;
  const ecg::Node& n;
  std::vector<const void*> in;  // one per node input (nullptr for absent optionals)
  std::vector<void*> out;       // one per node output, contiguous buffers
  void* scratch;                // scratch_bytes() bytes, 64-byte aligned
  const kernels::Parallel& par;
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
};

// nullptr if the core has no kernel for the op.
const OpKernel* find_kernel(const std::string& op);
// "" if the node can run in the core, else why not (unknown op, dtype, attribute...).
std::string check_node(const ecg::Graph& g, const ecg::Node& n);
std::vector<std::string> kernel_op_names();

// Registration, one function per binding file (called once by find_kernel).
using KernelTable = std::vector<std::pair<std::string, OpKernel>>;
void register_view_ops(KernelTable& t);
void register_elementwise_ops(KernelTable& t);
void register_nn_ops(KernelTable& t);
void register_misc_ops(KernelTable& t);

// Helpers shared by the binding files.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
int64_t normalize_dim(int64_t dim, int64_t rank, const ecg::Node& n);
std::string require_dtypes(const ecg::Graph& g, const ecg::Node& n, std::initializer_list<DType> allowed);

}  // namespace dnnfusion::runtime
