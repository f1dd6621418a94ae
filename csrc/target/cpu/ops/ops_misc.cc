// Reductions, cumsum, concatenation, indexing (embedding, index_select, gather), padding, repeat
// and tensor sources (arange, full, zeros, ones, scalar_tensor), bound to their kernel families.
#include <algorithm>
#include <set>
#include <unordered_map>

#include "common/error.h"
#include "kernels/cpu/data_movement.h"
#include "kernels/cpu/reduction.h"
#include "runtime/op_attrs.h"
#include "runtime/op_kernels.h"
#include "target/cpu/cpu_kernels.h"

namespace dnnfusion::target::cpu {

using namespace runtime;  // the kernel contract (OpKernel, KernelCall) and its helpers

using ecg::Graph;
using ecg::Node;

namespace {

const std::vector<int64_t>& shp(const Graph& g, int v) { return g.value(v).shape; }

// ---- reductions ----
const std::unordered_map<std::string, kernels::ReduceOp>& reduce_ops() {
  static const std::unordered_map<std::string, kernels::ReduceOp> m = {
      {"sum", kernels::ReduceOp::Sum},   {"mean", kernels::ReduceOp::Mean},     {"amax", kernels::ReduceOp::Max},
      {"amin", kernels::ReduceOp::Min},  {"prod", kernels::ReduceOp::Prod},     {"var", kernels::ReduceOp::Var},
      {"argmax", kernels::ReduceOp::ArgMax}, {"argmin", kernels::ReduceOp::ArgMin}};
  return m;
}

std::vector<int64_t> reduce_dims(const Node& n, int64_t rank) {
  std::set<int64_t> dims;
  if (n.has_attr("dim"))
    for (auto d : n.attr_ints("dim")) dims.insert(normalize_dim(d, rank, n));
  // An empty list (or no dim) reduces everything, as in ATen.
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::string check_reduce(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  auto dims = reduce_dims(n, static_cast<int64_t>(x.size()));
  if ((n.op == "argmax" || n.op == "argmin") && !n.has_attr("dim") && x.size() > 1)
    return "";  // flattened argmax: handled by reducing the flattened tensor
  if ((n.op == "argmax" || n.op == "argmin") && dims.size() > 1) return n.op + " over several dims";
  if (n.op == "mean" && !is_floating(g.value(n.outputs[0]).dtype)) return "mean with an integral output dtype";
  return require_dtypes(g, n, kAllTypes);
}

void run_reduce(KernelCall& c) {
  const auto& xv = c.g.value(c.n.inputs[0]);
  const auto& yv = c.g.value(c.n.outputs[0]);
  auto shape = xv.shape;
  auto dims = reduce_dims(c.n, static_cast<int64_t>(shape.size()));
  if ((c.n.op == "argmax" || c.n.op == "argmin") && !c.n.has_attr("dim")) {
    shape = {xv.numel()};
    dims = {0};
  }
  const double correction = var_correction(c.n);
  kernels::reduce(reduce_ops().at(c.n.op), shape, dims, c.in[0], xv.dtype, c.out[0], yv.dtype, correction, c.par);
}

void run_cumsum(KernelCall& c) {
  const auto& xv = c.g.value(c.n.inputs[0]);
  int64_t d = normalize_dim(c.n.attr_int("dim"), static_cast<int64_t>(xv.shape.size()), c.n);
  kernels::cumsum(xv.shape, d, c.in[0], xv.dtype, c.out[0], c.g.value(c.n.outputs[0]).dtype, c.par);
}

std::string check_same_dtype(const Graph& g, const Node& n) {
  DType t = g.value(n.outputs[0]).dtype;
  for (int v : n.inputs)
    if (v >= 0 && g.value(v).dtype != t) return std::string("mixed dtypes (") + dtype_name(g.value(v).dtype) + " vs " + dtype_name(t) + ")";
  return require_dtypes(g, n, kAllTypes);
}

// ---- cat ----
std::string check_cat(const Graph& g, const Node& n) {
  if (n.inputs.empty()) return "cat of no tensors";
  return check_same_dtype(g, n);
}

void run_cat(KernelCall& c) {
  const auto& out = c.g.value(c.n.outputs[0]);
  std::vector<const void*> srcs;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < c.n.inputs.size(); ++i) {
    const auto& s = shp(c.g, c.n.inputs[i]);
    if (cat_skips_operand(s, out.shape)) continue;
    srcs.push_back(c.in[i]);
    shapes.push_back(s);
  }
  int64_t d = normalize_dim(c.n.attr_int("dim", 0), static_cast<int64_t>(out.shape.size()), c.n);
  kernels::concat(dtype_size(out.dtype), srcs, shapes, d, c.out[0], c.par);
}

// ---- indexing ----
std::string check_index_dtype(const Graph& g, int idx) {
  DType t = g.value(idx).dtype;
  if (t != DType::Int64 && t != DType::Int32) return std::string("index dtype ") + dtype_name(t) + " (supported: int64, int32)";
  return "";
}

std::string check_embedding(const Graph& g, const Node& n) {
  if (shp(g, n.inputs[0]).size() != 2) return "embedding weight must be 2-D";
  return check_index_dtype(g, n.inputs[1]);
}

void run_embedding(KernelCall& c) {
  const auto& w = shp(c.g, c.n.inputs[0]);
  const auto& iv = c.g.value(c.n.inputs[1]);
  kernels::index_select(dtype_size(c.g.value(c.n.inputs[0]).dtype), c.in[0], 1, w[0], w[1], c.in[1], iv.dtype, iv.numel(),
                        c.out[0], c.par);
}

std::string check_index_select(const Graph& g, const Node& n) { return check_index_dtype(g, n.inputs[1]); }

void run_index_select(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  const auto& iv = c.g.value(c.n.inputs[1]);
  int64_t d = normalize_dim(c.n.attr_int("dim"), static_cast<int64_t>(x.size()), c.n);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x[i];
  for (size_t i = d + 1; i < x.size(); ++i) inner *= x[i];
  kernels::index_select(dtype_size(c.g.value(c.n.inputs[0]).dtype), c.in[0], outer, x.empty() ? 1 : x[d], inner, c.in[1],
                        iv.dtype, iv.numel(), c.out[0], c.par);
}

std::string check_gather(const Graph& g, const Node& n) {
  if (g.value(n.inputs[1]).dtype != DType::Int64) return "gather index must be int64";
  if (shp(g, n.inputs[0]).size() != shp(g, n.inputs[1]).size()) return "gather index rank differs from the input rank";
  return "";
}

void run_gather(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  int64_t d = normalize_dim(c.n.attr_int("dim"), static_cast<int64_t>(x.size()), c.n);
  kernels::gather(dtype_size(c.g.value(c.n.inputs[0]).dtype), c.in[0], x, d, static_cast<const int64_t*>(c.in[1]),
                  shp(c.g, c.n.inputs[1]), c.out[0], c.par);
}

// ---- padding and repeat ----
void run_pad(KernelCall& c) {
  const auto& xv = c.g.value(c.n.inputs[0]);
  kernels::constant_pad(xv.dtype, c.in[0], xv.shape, c.n.attr_ints("pad"), c.n.attr_float("value", 0.0), c.out[0], c.par);
}

std::string check_repeat(const Graph& g, const Node& n) {
  if (n.attr_ints("repeats").size() < shp(g, n.inputs[0]).size()) return "repeat with fewer repeats than dims";
  return "";
}

void run_repeat(KernelCall& c) {
  // out viewed as [r0, s0, r1, s1, ...] reads input element (i1, i3, ...): a strided view with zero
  // strides on the repeat axes.
  const auto& xv = c.g.value(c.n.inputs[0]);
  auto reps = c.n.attr_ints("repeats");
  std::vector<int64_t> s(reps.size(), 1);
  std::copy(xv.shape.begin(), xv.shape.end(), s.end() - static_cast<int64_t>(xv.shape.size()));
  auto cs = contiguous_strides(s);
  std::vector<int64_t> shape, strides;
  for (size_t i = 0; i < reps.size(); ++i) {
    shape.push_back(reps[i]);
    strides.push_back(0);
    shape.push_back(s[i]);
    strides.push_back(cs[i]);
  }
  kernels::strided_copy(dtype_size(xv.dtype), shape, c.in[0], strides, 0, c.out[0], c.par);
}

// ---- sources ----
void run_arange(KernelCall& c) {
  const auto& yv = c.g.value(c.n.outputs[0]);
  kernels::arange(yv.dtype, c.n.attr_float("start", 0.0), c.n.attr_float("step", 1.0), yv.numel(), c.out[0]);
}

void run_fill(KernelCall& c) {
  const auto& yv = c.g.value(c.n.outputs[0]);
  double v = c.n.op == "zeros" ? 0.0 : c.n.op == "ones" ? 1.0 : c.n.op == "scalar_tensor" ? c.n.attr_float("s") : c.n.attr_float("fill_value");
  kernels::fill(yv.dtype, v, yv.numel(), c.out[0], c.par);
}

std::string check_out_dtype(const Graph& g, const Node& n) { return require_dtypes(g, n, kAllTypes); }

}  // namespace

void register_misc_ops(KernelTable& t) {
  for (const auto& [name, op] : reduce_ops()) t.emplace_back(name, OpKernel{check_reduce, nullptr, run_reduce, nullptr});
  t.emplace_back("cumsum", OpKernel{check_out_dtype, nullptr, run_cumsum, nullptr});
  t.emplace_back("cat", OpKernel{check_cat, nullptr, run_cat, nullptr});
  t.emplace_back("embedding", OpKernel{check_embedding, nullptr, run_embedding, nullptr});
  t.emplace_back("index_select", OpKernel{check_index_select, nullptr, run_index_select, nullptr});
  t.emplace_back("gather", OpKernel{check_gather, nullptr, run_gather, nullptr});
  t.emplace_back("constant_pad_nd", OpKernel{check_out_dtype, nullptr, run_pad, nullptr});
  t.emplace_back("repeat", OpKernel{check_repeat, nullptr, run_repeat, nullptr});
  t.emplace_back("arange", OpKernel{check_out_dtype, nullptr, run_arange, nullptr});
  for (const char* op : {"full", "zeros", "ones", "scalar_tensor"}) t.emplace_back(op, OpKernel{check_out_dtype, nullptr, run_fill, nullptr});
}

}  // namespace dnnfusion::target::cpu
