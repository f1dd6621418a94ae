// The reference target's reductions (sum, mean, amax, amin, prod, var, argmax, argmin), cumsum,
// cat, indexing (embedding, index_select, gather), constant_pad_nd, repeat and tensor sources
// (arange, full, zeros, ones, scalar_tensor), bound to the reference kernels of
// kernels/reference/ref_elementwise_misc with the cpu target's semantics.
// Precondition of run(): check() returned "" for the node; every operand and output is a
// contiguous buffer of the graph's shape and dtype. Postcondition: the outputs hold what ATen
// computes for the node (keepdim and dtype only shape the output, which the graph records);
// an out-of-range index throws dnnfusion::Error instead of reading outside the operand.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "runtime/op_attrs.h"
#include "target/reference/reference_kernels.h"

namespace dnnfusion::target::reference {

using namespace runtime;  // the kernel contract (OpKernel, KernelCall) and its helpers
namespace ref = ::dnnfusion::reference;

using ecg::Graph;
using ecg::Node;
using kernels::ReduceOp;

namespace {


const std::vector<int64_t>& shp(const Graph& g, int v) { return g.value(v).shape; }
int64_t rank_of(const std::vector<int64_t>& s) { return static_cast<int64_t>(s.size()); }

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// `count` present tensor operands and one output.
std::string check_arity(const Node& n, size_t count) {
  if (n.inputs.size() != count) return n.op + " expects " + std::to_string(count) + " tensor operands";
  for (int v : n.inputs)
    if (v < 0) return n.op + " with an absent operand";
  if (n.outputs.size() != 1) return n.op + " expects one output";
  return "";
}

// ATen's `dtype=` argument already decided the output dtype; a disagreement means a broken graph.
std::string check_dtype_attr(const Graph& g, const Node& n) {
  const DType out = g.value(n.outputs[0]).dtype;
  if (n.has_attr("dtype") && n.attr_str("dtype") != dtype_name(out))
    return "dtype attribute " + n.attr_str("dtype") + " differs from the output dtype " + dtype_name(out);
  return "";
}

std::string check_same_dtype(const Graph& g, const Node& n, int data) {
  const DType in = g.value(data).dtype, out = g.value(n.outputs[0]).dtype;
  if (in != out) return std::string("mixed dtypes (") + dtype_name(in) + " vs " + dtype_name(out) + ")";
  return "";
}

// ---- reductions ----
const std::unordered_map<std::string, ReduceOp>& reduce_ops() {
  static const std::unordered_map<std::string, ReduceOp> m = {
      {"sum", ReduceOp::Sum},   {"mean", ReduceOp::Mean}, {"amax", ReduceOp::Max},      {"amin", ReduceOp::Min},
      {"prod", ReduceOp::Prod}, {"var", ReduceOp::Var},   {"argmax", ReduceOp::ArgMax}, {"argmin", ReduceOp::ArgMin}};
  return m;
}

bool is_arg(const Node& n) { return n.op == "argmax" || n.op == "argmin"; }

// The reduction as the kernel sees it: sorted unique dims (none = all, as in ATen); argmax/argmin
// without a dim reduce the flattened tensor.
void reduce_problem(const Graph& g, const Node& n, std::vector<int64_t>* shape, std::vector<int64_t>* dims) {
  *shape = shp(g, n.inputs[0]);
  std::set<int64_t> ds;
  if (n.has_attr("dim"))
    for (int64_t d : n.attr_ints("dim")) ds.insert(normalize_dim(d, rank_of(*shape), n));
  *dims = std::vector<int64_t>(ds.begin(), ds.end());
  if (is_arg(n) && !n.has_attr("dim")) {
    *shape = {numel_of(*shape)};
    *dims = {0};
  }
}

std::string check_reduce_attrs(const Graph& g, const Node& n) {
  const DType out = g.value(n.outputs[0]).dtype;
  if (is_arg(n) && n.has_attr("dim") && n.attr_ints("dim").size() != 1) return n.op + " over several dims";
  if (is_arg(n) && out != DType::Int64) return n.op + " with output dtype " + dtype_name(out) + " (indices are int64)";
  if ((n.op == "mean" || n.op == "var") && !is_floating(out)) return n.op + " with an integral output dtype";
  return check_dtype_attr(g, n);
}

// keepdim only changes the output's shape, so the output must hold exactly the kept elements.
std::string check_reduce_shape(const Graph& g, const Node& n) {
  std::vector<int64_t> shape, dims;
  reduce_problem(g, n, &shape, &dims);
  int64_t kept = 1, reduced = 1;
  for (int64_t d = 0; d < rank_of(shape); ++d) {
    const bool red = dims.empty() || std::count(dims.begin(), dims.end(), d) > 0;
    (red ? reduced : kept) *= shape[d];
  }
  const bool needs_element = n.op == "amax" || n.op == "amin" || is_arg(n);
  if (needs_element && reduced == 0) return n.op + " over an empty axis";
  const int64_t got = g.value(n.outputs[0]).numel();
  if (got != kept) return detail::str_cat(n.op, ": the output has ", got, " elements, the reduction gives ", kept);
  return "";
}

std::string check_reduce(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1);
  if (why.empty()) why = check_reduce_attrs(g, n);
  if (why.empty()) why = check_reduce_shape(g, n);
  return why.empty() ? require_dtypes(g, n, kAllTypes) : why;
}

void run_reduce(KernelCall& c) {
  std::vector<int64_t> shape, dims;
  reduce_problem(c.g, c.n, &shape, &dims);
  const double correction = runtime::var_correction(c.n);
  ref::reduce(reduce_ops().at(c.n.op), shape, dims, c.in[0], c.g.value(c.n.inputs[0]).dtype, c.out[0],
              c.g.value(c.n.outputs[0]).dtype, correction);
}

// ---- cumsum ----
std::string check_cumsum(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1);
  if (!why.empty()) return why;
  if (shp(g, n.inputs[0]) != shp(g, n.outputs[0])) return "cumsum changes the shape";
  if (!n.has_attr("dim")) return "cumsum without dim";
  normalize_dim(n.attr_int("dim"), rank_of(shp(g, n.inputs[0])), n);  // throws when out of range
  why = check_dtype_attr(g, n);
  return why.empty() ? require_dtypes(g, n, kAllTypes) : why;
}

void run_cumsum(KernelCall& c) {
  const auto& xv = c.g.value(c.n.inputs[0]);
  const int64_t d = normalize_dim(c.n.attr_int("dim"), rank_of(xv.shape), c.n);
  ref::cumsum(xv.shape, d, c.in[0], xv.dtype, c.out[0], c.g.value(c.n.outputs[0]).dtype);
}

// ---- cat ----
std::string check_cat_shapes(const Graph& g, const Node& n) {
  const auto& out = shp(g, n.outputs[0]);
  if (out.empty()) return "cat of 0-d tensors";
  const int64_t d = normalize_dim(n.attr_int("dim", 0), rank_of(out), n);
  int64_t total = 0;
  for (int v : n.inputs) {
    const auto& s = shp(g, v);
    if (cat_skips_operand(s, out)) continue;
    if (s.size() != out.size())
      return "cat operand of rank " + std::to_string(s.size()) + " into a rank-" + std::to_string(out.size()) + " output";
    for (int64_t i = 0; i < rank_of(out); ++i)
      if (i != d && s[i] != out[i]) return "cat operand " + ecg::shape_str(s) + " does not fit the output " + ecg::shape_str(out);
    total += s[d];
  }
  return total == out[d] ? "" : "cat operands do not add up to the output along dim";
}

std::string check_cat(const Graph& g, const Node& n) {
  if (n.inputs.empty()) return "cat of no tensors";
  std::string why = check_arity(n, n.inputs.size());
  for (size_t i = 0; why.empty() && i < n.inputs.size(); ++i) why = check_same_dtype(g, n, n.inputs[i]);
  if (why.empty()) why = check_cat_shapes(g, n);
  return why.empty() ? require_dtypes(g, n, kAllTypes) : why;
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
  const int64_t d = normalize_dim(c.n.attr_int("dim", 0), rank_of(out.shape), c.n);
  ref::concat(dtype_size(out.dtype), srcs, shapes, d, c.out[0]);
}

// ---- indexing ----
std::string check_index_dtype(const Graph& g, int idx) {
  const DType t = g.value(idx).dtype;
  if (t != DType::Int64 && t != DType::Int32) return std::string("index dtype ") + dtype_name(t) + " (supported: int64, int32)";
  return "";
}

// padding_idx, scale_grad_by_freq and sparse only change the backward pass: the forward ignores them.
std::string check_embedding(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 2);
  if (why.empty() && shp(g, n.inputs[0]).size() != 2) why = "embedding weight must be 2-D";
  if (why.empty()) why = check_index_dtype(g, n.inputs[1]);
  if (why.empty()) why = check_same_dtype(g, n, n.inputs[0]);
  if (!why.empty()) return why;
  auto want = shp(g, n.inputs[1]);
  want.push_back(shp(g, n.inputs[0])[1]);
  return want == shp(g, n.outputs[0]) ? "" : "embedding output is not the index shape + [embedding_dim]";
}

void run_embedding(KernelCall& c) {
  const auto& w = shp(c.g, c.n.inputs[0]);
  const auto& iv = c.g.value(c.n.inputs[1]);
  ref::index_select(dtype_size(c.g.value(c.n.inputs[0]).dtype), c.in[0], 1, w[0], w[1], c.in[1], iv.dtype, iv.numel(),
                    c.out[0]);
}

std::string check_index_select_shape(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  const int64_t k = g.value(n.inputs[1]).numel();
  if (shp(g, n.inputs[1]).size() > 1) return "index_select index must be 0-D or 1-D";
  std::vector<int64_t> want = x;
  if (!want.empty()) want[normalize_dim(n.attr_int("dim"), rank_of(x), n)] = k;
  else if (k != 1) return "index_select of a 0-d tensor with " + std::to_string(k) + " indices";
  return want == shp(g, n.outputs[0]) ? "" : "index_select output shape does not match the index";
}

std::string check_index_select(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 2);
  if (why.empty()) why = check_index_dtype(g, n.inputs[1]);
  if (why.empty()) why = check_same_dtype(g, n, n.inputs[0]);
  return why.empty() ? check_index_select_shape(g, n) : why;
}

void run_index_select(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  const auto& iv = c.g.value(c.n.inputs[1]);
  const int64_t d = normalize_dim(c.n.attr_int("dim"), rank_of(x), c.n);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x[i];
  for (int64_t i = d + 1; i < rank_of(x); ++i) inner *= x[i];
  ref::index_select(dtype_size(c.g.value(c.n.inputs[0]).dtype), c.in[0], outer, x.empty() ? 1 : x[d], inner, c.in[1],
                    iv.dtype, iv.numel(), c.out[0]);
}

std::string check_gather_shape(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  const auto& idx = shp(g, n.inputs[1]);
  if (x.size() != idx.size()) return "gather index rank differs from the input rank";
  const int64_t d = normalize_dim(n.attr_int("dim"), rank_of(x), n);
  for (int64_t i = 0; i < rank_of(x); ++i)
    if (i != d && idx[i] > x[i])
      return "gather index " + ecg::shape_str(idx) + " exceeds the input " + ecg::shape_str(x) + " off dim";
  return idx == shp(g, n.outputs[0]) ? "" : "gather output shape differs from the index shape";
}

// sparse_grad only changes the backward pass.
std::string check_gather(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 2);
  if (why.empty() && g.value(n.inputs[1]).dtype != DType::Int64) why = "gather index must be int64";
  if (why.empty()) why = check_same_dtype(g, n, n.inputs[0]);
  return why.empty() ? check_gather_shape(g, n) : why;
}

// The reference gather reads wherever an index points: a bad index must throw here instead.
void require_in_range(const int64_t* idx, int64_t count, int64_t size) {
  for (int64_t i = 0; i < count; ++i)
    if (idx[i] < -size || idx[i] >= size) DNNF_THROW("gather: index ", idx[i], " is out of bounds for size ", size);
}

void run_gather(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  const int64_t d = normalize_dim(c.n.attr_int("dim"), rank_of(x), c.n);
  const auto* idx = static_cast<const int64_t*>(c.in[1]);
  require_in_range(idx, c.g.value(c.n.inputs[1]).numel(), x.empty() ? 1 : x[d]);
  ref::gather(dtype_size(c.g.value(c.n.inputs[0]).dtype), c.in[0], x, d, idx, shp(c.g, c.n.inputs[1]), c.out[0]);
}

// ---- padding and repeat ----
std::string check_pad_shape(const Graph& g, const Node& n) {
  const auto pads = n.attr_ints("pad");
  auto want = shp(g, n.inputs[0]);
  if (pads.size() % 2 || pads.size() > 2 * want.size())
    return "constant_pad_nd with " + std::to_string(pads.size()) + " pad values for rank " + std::to_string(want.size());
  for (size_t k = 0; k < pads.size() / 2; ++k) want[want.size() - 1 - k] += pads[2 * k] + pads[2 * k + 1];
  return want == shp(g, n.outputs[0]) ? "" : "constant_pad_nd output shape does not match the pads";
}

std::string check_pad(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1);
  if (why.empty()) why = check_same_dtype(g, n, n.inputs[0]);
  if (why.empty()) why = check_pad_shape(g, n);
  if (why.empty() && is_integral(g.value(n.inputs[0]).dtype) && !std::isfinite(n.attr_float("value", 0.0)))
    why = "constant_pad_nd of an integral tensor with a non-finite value";
  return why.empty() ? require_dtypes(g, n, kAllTypes) : why;
}

void run_pad(KernelCall& c) {
  const auto& xv = c.g.value(c.n.inputs[0]);
  ref::constant_pad(xv.dtype, c.in[0], xv.shape, c.n.attr_ints("pad"), c.n.attr_float("value", 0.0), c.out[0]);
}

std::string check_repeat(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1);
  if (why.empty()) why = check_same_dtype(g, n, n.inputs[0]);
  if (!why.empty()) return why;
  const auto reps = n.attr_ints("repeats");
  const auto& x = shp(g, n.inputs[0]);
  if (reps.size() < x.size()) return "repeat with fewer repeats than dims";
  std::vector<int64_t> want(reps.size());
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0) return "repeat with a negative count";
    const size_t lead = reps.size() - x.size();
    want[i] = reps[i] * (i < lead ? 1 : x[i - lead]);
  }
  return want == shp(g, n.outputs[0]) ? "" : "repeat output shape does not match the repeats";
}

void run_repeat(KernelCall& c) {
  // out viewed as [r0, s0, r1, s1, ...] reads input element (i1, i3, ...): a strided copy with
  // zero strides on the repeat axes.
  const auto& xv = c.g.value(c.n.inputs[0]);
  const auto reps = c.n.attr_ints("repeats");
  std::vector<int64_t> s(reps.size(), 1);
  std::copy(xv.shape.begin(), xv.shape.end(), s.end() - rank_of(xv.shape));
  const auto cs = contiguous_strides(s);
  std::vector<int64_t> shape, strides;
  for (size_t i = 0; i < reps.size(); ++i) {
    shape.insert(shape.end(), {reps[i], s[i]});
    strides.insert(strides.end(), {0, cs[i]});
  }
  ref::strided_copy(dtype_size(xv.dtype), shape, c.in[0], strides, 0, c.out[0]);
}

// ---- sources ----
std::string check_source(const Graph& g, const Node& n) {
  if (!n.inputs.empty()) return n.op + " takes no tensor operands";
  if (n.outputs.size() != 1) return n.op + " expects one output";
  const std::string why = check_dtype_attr(g, n);
  return why.empty() ? require_dtypes(g, n, kAllTypes) : why;
}

// torch sizes arange as ceil((end - start) / step); `end` reaches the kernel only through that.
std::string check_arange(const Graph& g, const Node& n) {
  std::string why = check_source(g, n);
  if (!why.empty()) return why;
  const auto& out = shp(g, n.outputs[0]);
  const double start = n.attr_float("start", 0.0), step = n.attr_float("step", 1.0);
  if (out.size() != 1) return "arange output must be 1-D";
  if (step == 0) return "arange with step 0";
  if (!n.has_attr("end")) return "";
  const double want = std::max(0.0, std::ceil((n.attr_float("end") - start) / step));
  return want == static_cast<double>(out[0]) ? "" : "arange output length does not match start/end/step";
}

void run_arange(KernelCall& c) {
  const auto& yv = c.g.value(c.n.outputs[0]);
  ref::arange(yv.dtype, c.n.attr_float("start", 0.0), c.n.attr_float("step", 1.0), yv.numel(), c.out[0]);
}

double fill_value(const Node& n) {
  if (n.op == "zeros") return 0.0;
  if (n.op == "ones") return 1.0;
  return n.op == "scalar_tensor" ? n.attr_float("s") : n.attr_float("fill_value");
}

std::string check_fill(const Graph& g, const Node& n) {
  std::string why = check_source(g, n);
  if (!why.empty()) return why;
  const auto& out = g.value(n.outputs[0]);
  if (n.has_attr("size") && n.attr_ints("size") != out.shape) return n.op + " size attribute differs from the output shape";
  if (is_integral(out.dtype) && !std::isfinite(fill_value(n))) return n.op + " of a non-finite value into an integral dtype";
  return "";
}

void run_fill(KernelCall& c) {
  const auto& yv = c.g.value(c.n.outputs[0]);
  ref::fill(yv.dtype, fill_value(c.n), yv.numel(), c.out[0]);
}

}  // namespace

void register_misc_ops(KernelTable& t) {
  for (const auto& kv : reduce_ops()) t.emplace_back(kv.first, OpKernel{check_reduce, nullptr, run_reduce, nullptr});
  t.emplace_back("cumsum", OpKernel{check_cumsum, nullptr, run_cumsum, nullptr});
  t.emplace_back("cat", OpKernel{check_cat, nullptr, run_cat, nullptr});
  t.emplace_back("embedding", OpKernel{check_embedding, nullptr, run_embedding, nullptr});
  t.emplace_back("index_select", OpKernel{check_index_select, nullptr, run_index_select, nullptr});
  t.emplace_back("gather", OpKernel{check_gather, nullptr, run_gather, nullptr});
  t.emplace_back("constant_pad_nd", OpKernel{check_pad, nullptr, run_pad, nullptr});
  t.emplace_back("repeat", OpKernel{check_repeat, nullptr, run_repeat, nullptr});
  t.emplace_back("arange", OpKernel{check_arange, nullptr, run_arange, nullptr});
  for (const char* op : {"full", "zeros", "ones", "scalar_tensor"})
    t.emplace_back(op, OpKernel{check_fill, nullptr, run_fill, nullptr});
}

}  // namespace dnnfusion::target::reference
