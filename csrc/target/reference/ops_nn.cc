// The reference target's neural-network ops — convolution (1-D and 2-D, NCHW), the GEMM family
// (addmm, mm, bmm, baddbmm), attention, pooling (max with indices, average, adaptive average),
// normalization (inference batch norm, layer norm, group norm) and (log-)softmax — bound to the
// plain loops of kernels/reference (ref_gemm_conv, ref_elementwise_misc). Float32 only, as on the
// cpu target; the NCHW[x]c and packed-GEMM ops are not here (only the cpu target runs the
// layout/packing passes that create them).
// Precondition of run(): check() returned "" for the node; every operand and output is a
// contiguous buffer of the graph's shape and dtype. Postcondition: every output the node has
// (max_pool2d's indices, attention's logsumexp, the norms' mean/rstd) holds ATen's value;
// check() refuses a node with an output the reference kernels would leave unwritten.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "runtime/op_attrs.h"
#include "target/reference/reference_kernels.h"

namespace dnnfusion::target::reference {

using namespace runtime;  // the kernel contract (OpKernel, KernelCall) and its helpers
namespace ref = ::dnnfusion::reference;

using ecg::Graph;
using ecg::Node;
using Shape = std::vector<int64_t>;

namespace {

const Shape& shp(const Graph& g, int v) { return g.value(v).shape; }
int64_t numel(const Graph& g, int v) { return g.value(v).numel(); }
const float* fin(const KernelCall& c, size_t i) { return static_cast<const float*>(c.in[i]); }
float* fout(const KernelCall& c, size_t i) { return static_cast<float*>(c.out[i]); }
// Optional operand i, or nullptr when absent.
const float* fopt(const KernelCall& c, size_t i) { return c.n.input_or_absent(i) >= 0 ? fin(c, i) : nullptr; }
// Output i when the node has it, else nullptr (its check() vouched for its size).
float* fopt_out(const KernelCall& c, size_t i) { return i < c.out.size() ? fout(c, i) : nullptr; }

std::string f32_only(const Graph& g, const Node& n) { return require_dtypes(g, n, {DType::Float32}); }

// Operands [0, required) present, at most `total` operands, between 1 and `outputs` outputs.
std::string check_arity(const Node& n, size_t required, size_t total, size_t outputs) {
  if (n.inputs.size() < required || n.inputs.size() > total)
    return n.op + " with " + std::to_string(n.inputs.size()) + " operands";
  for (size_t i = 0; i < required; ++i)
    if (n.inputs[i] < 0) return n.op + " with an absent operand " + std::to_string(i);
  if (n.outputs.empty() || n.outputs.size() > outputs) return n.op + " with " + std::to_string(n.outputs.size()) + " outputs";
  return "";
}

// Optional operand i, when present, has `count` elements (a per-channel / per-column parameter).
std::string check_param(const Graph& g, const Node& n, size_t i, int64_t count) {
  const int v = n.input_or_absent(i);
  if (v < 0 || numel(g, v) == count) return "";
  return detail::str_cat(n.op, ": operand ", i, " has ", numel(g, v), " elements, expected ", count);
}

// Extra output i, when present, has `count` elements.
std::string check_extra_output(const Graph& g, const Node& n, size_t i, int64_t count) {
  if (i >= n.outputs.size() || numel(g, n.outputs[i]) == count) return "";
  return detail::str_cat(n.op, ": output ", i, " has ", numel(g, n.outputs[i]), " elements, the op gives ", count);
}


// Strides of `in` broadcast over `out` (numpy rules, aligned right); empty if it does not broadcast.
Shape broadcast_strides(const Shape& in, const Shape& out) {
  if (in.size() > out.size()) return {};
  const Shape cs = contiguous_strides(in);
  Shape s(out.size(), 0);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != 1 && in[i] != out[lead + i]) return {};
    s[lead + i] = in[i] == 1 ? 0 : cs[i];
  }
  return s;
}

bool broadcasts(const Shape& in, const Shape& out) { return out.empty() || !broadcast_strides(in, out).empty(); }

// ---- convolution (1-D and 2-D, NCHW) ----

// output_padding only matters to the transposed convolution, which is refused.
std::string check_conv_attrs(const Node& n, size_t spatial) {
  if (n.attr_int("transposed", 0)) return "transposed convolution has no reference kernel";
  for (const char* k : {"stride", "padding", "dilation"}) {
    const Shape v = n.attr_ints(k, {});
    if (v.size() > spatial) return std::string("convolution ") + k + " has more values than spatial dims";
    for (int64_t e : v)
      if (e < (std::string(k) == "padding" ? 0 : 1)) return std::string("convolution ") + k + " value " + std::to_string(e);
  }
  return "";
}

std::string check_conv_shapes(const Graph& g, const Node& n) {
  const auto s = conv2d_shape(g, n);
  if (s.groups <= 0 || s.C % s.groups || s.K % s.groups) return "channels not divisible by groups";
  if (shp(g, n.inputs[1])[1] * s.groups != s.C) return "weight input channels do not match the input";
  std::string why = check_param(g, n, 2, s.K);
  if (!why.empty()) return why;
  const Shape want = shp(g, n.inputs[0]).size() == 3 ? Shape{s.N, s.K, s.OW()} : Shape{s.N, s.K, s.OH(), s.OW()};
  return want == shp(g, n.outputs[0]) ? "" : "convolution output shape does not match stride/padding/dilation";
}

std::string check_conv(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 2, 3, 1);
  if (!why.empty()) return why;
  const Shape& x = shp(g, n.inputs[0]);
  if (x.size() != 3 && x.size() != 4)
    return "convolution on a rank-" + std::to_string(x.size()) + " input (supported: 1-D and 2-D, batched)";
  if (shp(g, n.inputs[1]).size() != x.size()) return "convolution weight rank differs from the input rank";
  why = check_conv_attrs(n, x.size() - 2);
  if (why.empty()) why = check_conv_shapes(g, n);
  return why.empty() ? f32_only(g, n) : why;
}

void run_conv(KernelCall& c) {
  ref::ref_conv2d_nchw(conv2d_shape(c.g, c.n), fin(c, 0), fin(c, 1), fopt(c, 2), fout(c, 0), kernels::Activation::None);
}

// ---- GEMM family: out = [beta * bias +] alpha * A @ B, batched for bmm/baddbmm ----
bool has_bias(const Node& n) { return n.op == "addmm" || n.op == "baddbmm"; }

struct GemmDims {
  int64_t batch, M, N, K;
};

GemmDims gemm_dims(const Graph& g, const Node& n) {
  const size_t a = has_bias(n) ? 1 : 0;
  const Shape& as = shp(g, n.inputs[a]);
  const Shape& bs = shp(g, n.inputs[a + 1]);
  return GemmDims{as.size() == 3 ? as[0] : 1, as[as.size() - 2], bs.back(), as.back()};
}

std::string check_mm_shapes(const Graph& g, const Node& n) {
  const size_t a = has_bias(n) ? 1 : 0;
  const Shape& as = shp(g, n.inputs[a]);
  const Shape& bs = shp(g, n.inputs[a + 1]);
  const bool batched = as.size() == 3;
  if (as.back() != bs[bs.size() - 2])
    return n.op + ": inner dimensions differ (" + ecg::shape_str(as) + " @ " + ecg::shape_str(bs) + ")";
  if (batched && as[0] != bs[0]) return n.op + ": batch sizes differ";
  const GemmDims d = gemm_dims(g, n);
  const Shape want = batched ? Shape{d.batch, d.M, d.N} : Shape{d.M, d.N};
  if (want != shp(g, n.outputs[0])) return n.op + " output shape is not " + ecg::shape_str(want);
  if (a && !broadcasts(shp(g, n.inputs[0]), want)) return n.op + ": bias does not broadcast to the output";
  return "";
}

std::string check_mm(const Graph& g, const Node& n) {
  const size_t a = has_bias(n) ? 1 : 0;
  const size_t rank = (n.op == "bmm" || n.op == "baddbmm") ? 3 : 2;
  std::string why = check_arity(n, a + 2, a + 2, 1);
  if (!why.empty()) return why;
  if (shp(g, n.inputs[a]).size() != rank || shp(g, n.inputs[a + 1]).size() != rank)
    return n.op + " expects rank-" + std::to_string(rank) + " operands";
  if (!a && (n.attr_float("alpha", 1.0) != 1.0 || n.attr_float("beta", 1.0) != 1.0))
    return n.op + " has no alpha/beta, but one != 1 is set";
  why = check_mm_shapes(g, n);
  return why.empty() ? f32_only(g, n) : why;
}

// y (the output's shape, contiguous) = beta * bias broadcast over it.
void write_scaled_bias(const float* bias, const Shape& bshape, const Shape& out, double beta, float* y) {
  const Shape bs = broadcast_strides(bshape, out);
  int64_t count = 1;
  for (int64_t e : out) count *= e;
  for (int64_t p = 0; p < count; ++p) {
    int64_t off = 0, rest = p;
    for (size_t d = out.size(); d-- > 0;) {
      off += rest % out[d] * bs[d];
      rest /= out[d];
    }
    y[p] = static_cast<float>(beta * bias[off]);
  }
}

void run_mm(KernelCall& c) {
  const GemmDims d = gemm_dims(c.g, c.n);
  const size_t a = has_bias(c.n) ? 1 : 0;
  kernels::GemmEpilogue ep;
  const double beta = a ? c.n.attr_float("beta", 1.0) : 0.0;
  if (a) ep.alpha = static_cast<float>(c.n.attr_float("alpha", 1.0));
  if (beta != 0.0) {  // beta == 0 ignores the bias entirely (NaN included), as ATen does
    write_scaled_bias(fin(c, 0), shp(c.g, c.n.inputs[0]), shp(c.g, c.n.outputs[0]), beta, fout(c, 0));
    ep.beta = 1.f;
  }
  for (int64_t b = 0; b < d.batch; ++b)
    ref::ref_sgemm(d.M, d.N, d.K, kernels::MatrixView{fin(c, a) + b * d.M * d.K, d.K, 1},
                   kernels::MatrixView{fin(c, a + 1) + b * d.K * d.N, d.N, 1}, fout(c, 0) + b * d.M * d.N, d.N, ep);
}

// ---- scaled dot-product attention: (query, key, value[, attn_mask]) -> (output, logsumexp) ----
std::string check_sdpa(const Graph& g, const Node& n) { return runtime::sdpa_unsupported(g, n); }

kernels::Tensor4 t4(const KernelCall& c, size_t slot) {
  const Shape cs = contiguous_strides(shp(c.g, c.n.inputs[slot]));
  return kernels::Tensor4{fin(c, slot), cs[0], cs[1], cs[2], cs[3]};
}

kernels::AttnMask attn_mask(const KernelCall& c) {
  const int m = c.n.input_or_absent(3);
  if (m < 0) return {};
  const Shape &q = shp(c.g, c.n.inputs[0]), &k = shp(c.g, c.n.inputs[1]);
  const Shape st = broadcast_strides(shp(c.g, m), {q[0], q[1], q[2], k[2]});
  return kernels::AttnMask{c.in[3], c.g.value(m).dtype == DType::Bool, st[0], st[1], st[2], st[3]};
}

void run_sdpa(KernelCall& c) {
  const Shape &q = shp(c.g, c.n.inputs[0]), &k = shp(c.g, c.n.inputs[1]), &v = shp(c.g, c.n.inputs[2]);
  const double scale = c.n.has_attr("scale") ? c.n.attr_float("scale") : 1.0 / std::sqrt(static_cast<double>(q[3]));
  float* lse = c.out.size() > 1 && numel(c.g, c.n.outputs[1]) != 0 ? fout(c, 1) : nullptr;
  ref::ref_sdpa(q[0], q[1], q[2], k[2], q[3], v[3], t4(c, 0), t4(c, 1), t4(c, 2), attn_mask(c),
                c.n.attr_int("is_causal", 0) != 0, static_cast<float>(scale), fout(c, 0), lse);
}

// ---- pooling (NCHW or CHW) ----
kernels::Pool2dShape pool_shape(const Graph& g, const Node& n) {
  const Shape& x = shp(g, n.inputs[0]);
  const Shape& y = shp(g, n.outputs[0]);
  const size_t r = x.size();
  const Shape ks = n.attr_ints("kernel_size");
  Shape st = n.attr_ints("stride", {});
  if (st.empty()) st = ks;  // ATen: stride=[] means the kernel size
  const Shape pd = n.attr_ints("padding", {0}), dl = n.attr_ints("dilation", {1});
  return kernels::Pool2dShape{r == 4 ? x[0] : 1, x[r - 3], x[r - 2], x[r - 1], y[y.size() - 2], y[y.size() - 1],
                              at_or(ks, 0, 1), at_or(ks, 1, 1), at_or(st, 0, 1), at_or(st, 1, 1),
                              at_or(pd, 0, 0), at_or(pd, 1, 0), at_or(dl, 0, 1), at_or(dl, 1, 1)};
}

// ATen's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Input rank 3/4 with a non-empty plane; output 0 of the same rank and leading dims.
std::string check_pool_io(const Graph& g, const Node& n) {
  const Shape& x = shp(g, n.inputs[0]);
  const Shape& y = shp(g, n.outputs[0]);
  if (x.size() != 3 && x.size() != 4) return "2-D pooling on a rank-" + std::to_string(x.size()) + " input";
  if (x[x.size() - 1] == 0 || x[x.size() - 2] == 0) return "pooling of an empty plane";
  if (y.size() != x.size() || !std::equal(x.begin(), x.end() - 2, y.begin()))
    return "pooling output shape does not match the input";
  if (g.value(n.inputs[0]).dtype != DType::Float32) return "pooling on non-float32 input";
  return "";
}

std::string check_pool_window(const Node& n, const kernels::Pool2dShape& s) {
  for (const char* k : {"kernel_size", "stride", "padding", "dilation"})
    if (n.attr_ints(k, {}).size() > 2) return std::string("pooling ") + k + " with more than 2 values";
  if (n.attr_ints("kernel_size").empty()) return "pooling without a kernel_size";
  if (s.kh < 1 || s.kw < 1 || s.sh < 1 || s.sw < 1 || s.dh < 1 || s.dw < 1)
    return "pooling kernel_size, stride and dilation must be >= 1";
  if (s.ph < 0 || s.pw < 0 || s.ph > s.kh / 2 || s.pw > s.kw / 2) return "pooling padding must be in [0, kernel_size / 2]";
  const bool ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  if (s.OH != pooled_size(s.H, s.kh, s.ph, s.sh, s.dh, ceil_mode) || s.OW != pooled_size(s.W, s.kw, s.pw, s.sw, s.dw, ceil_mode))
    return "pooling output size does not match kernel_size/stride/padding/dilation/ceil_mode";
  return "";
}

std::string check_max_pool(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1, 1, 2);
  if (why.empty()) why = check_pool_io(g, n);
  if (!why.empty()) return why;
  if (n.outputs.size() > 1 && g.value(n.outputs[1]).dtype != DType::Int64) return "max_pool2d indices must be int64";
  if (n.outputs.size() > 1 && shp(g, n.outputs[1]) != shp(g, n.outputs[0]))
    return "max_pool2d indices shape differs from the output's";
  if (g.value(n.outputs[0]).dtype != DType::Float32) return "pooling with a non-float32 output";
  return check_pool_window(n, pool_shape(g, n));
}

void run_max_pool(KernelCall& c) {
  int64_t* idx = c.out.size() > 1 ? static_cast<int64_t*>(c.out[1]) : nullptr;
  ref::ref_max_pool2d(pool_shape(c.g, c.n), fin(c, 0), fout(c, 0), idx);
}

std::string check_avg_pool(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1, 1, 1);
  if (why.empty()) why = check_pool_io(g, n);
  if (why.empty()) why = f32_only(g, n);
  if (!why.empty()) return why;
  for (int64_t d : n.attr_ints("dilation", {1}))
    if (d != 1) return "avg_pool2d with dilation";
  if (n.has_attr("divisor_override") && n.attr_int("divisor_override") <= 0) return "avg_pool2d divisor_override must be > 0";
  return check_pool_window(n, pool_shape(g, n));
}

void run_avg_pool(KernelCall& c) {
  const int64_t div = c.n.has_attr("divisor_override") ? c.n.attr_int("divisor_override") : 0;
  ref::ref_avg_pool2d(pool_shape(c.g, c.n), fin(c, 0), fout(c, 0), c.n.attr_int("count_include_pad", 1) != 0, div);
}

std::string check_adaptive_pool(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1, 1, 1);
  if (why.empty()) why = check_pool_io(g, n);
  if (why.empty()) why = f32_only(g, n);
  if (!why.empty()) return why;
  const Shape& y = shp(g, n.outputs[0]);
  if (n.has_attr("output_size") && n.attr_ints("output_size") != Shape{y[y.size() - 2], y.back()})
    return "_adaptive_avg_pool2d output_size differs from the output shape";
  return "";
}

void run_adaptive_avg_pool(KernelCall& c) {
  const Shape& x = shp(c.g, c.n.inputs[0]);
  const Shape& y = shp(c.g, c.n.outputs[0]);
  const size_t r = x.size();
  ref::ref_adaptive_avg_pool2d(r == 4 ? x[0] : 1, x[r - 3], x[r - 2], x[r - 1], y[r - 2], y[r - 1], fin(c, 0), fout(c, 0));
}

// ---- normalization ----
// (input, weight?, bias?, running_mean, running_var); momentum only updates running statistics,
// which inference does not.
std::string check_batch_norm(const Graph& g, const Node& n) {
  if (n.inputs.size() < 5 || n.input_or_absent(3) < 0 || n.input_or_absent(4) < 0) return "batch_norm without running statistics";
  std::string why = check_arity(n, 1, 5, 3);
  if (!why.empty()) return why;
  const Shape& x = shp(g, n.inputs[0]);
  if (x.size() < 2) return "batch_norm on a rank < 2 input";
  for (size_t i = 1; why.empty() && i < 5; ++i) why = check_param(g, n, i, x[1]);
  if (!why.empty()) return why;
  if (shp(g, n.outputs[0]) != x) return "batch_norm output shape differs from the input";
  // ATen on CPU returns empty save_mean / save_invstd in inference.
  for (size_t o = 1; why.empty() && o < n.outputs.size(); ++o) why = check_extra_output(g, n, o, 0);
  return why.empty() ? f32_only(g, n) : why;
}

void run_batch_norm(KernelCall& c) {
  const Shape& x = shp(c.g, c.n.inputs[0]);
  int64_t inner = 1;
  for (size_t i = 2; i < x.size(); ++i) inner *= x[i];
  ref::batch_norm_inference(fin(c, 0), fin(c, 3), fin(c, 4), fopt(c, 1), fopt(c, 2),
                            static_cast<float>(c.n.attr_float("eps")), x[0], x[1], inner, fout(c, 0));
}

// rows x cols of layer norm: cols = prod(normalized_shape), which must be x's trailing dims.
bool layer_norm_dims(const Graph& g, const Node& n, int64_t* rows, int64_t* cols) {
  const Shape& x = shp(g, n.inputs[0]);
  const Shape ns = n.attr_ints("normalized_shape");
  if (ns.size() > x.size() || !std::equal(ns.begin(), ns.end(), x.end() - static_cast<int64_t>(ns.size()))) return false;
  *cols = 1;
  for (int64_t d : ns) *cols *= d;
  *rows = *cols ? numel(g, n.inputs[0]) / *cols : 0;
  return true;
}

std::string check_layer_norm(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1, 3, 3);
  if (!why.empty()) return why;
  int64_t rows = 0, cols = 0;
  if (!layer_norm_dims(g, n, &rows, &cols)) return "layer_norm normalized_shape is not the input's trailing dims";
  why = check_param(g, n, 1, cols);
  if (why.empty()) why = check_param(g, n, 2, cols);
  if (why.empty() && shp(g, n.outputs[0]) != shp(g, n.inputs[0])) why = "layer_norm output shape differs from the input";
  for (size_t o = 1; why.empty() && o < n.outputs.size(); ++o) why = check_extra_output(g, n, o, rows);
  if (why.empty() && !n.has_attr("eps")) why = "layer_norm without eps";
  return why.empty() ? f32_only(g, n) : why;
}

void run_layer_norm(KernelCall& c) {
  int64_t rows = 0, cols = 0;
  layer_norm_dims(c.g, c.n, &rows, &cols);
  ref::layer_norm(fin(c, 0), fopt(c, 1), fopt(c, 2), static_cast<float>(c.n.attr_float("eps")), rows, cols, fout(c, 0),
                  fopt_out(c, 1), fopt_out(c, 2));
}

// (input, weight?, bias?) with attributes N, C, HxW, group, eps; mean/rstd are [N, group].
std::string check_group_norm(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1, 3, 3);
  if (!why.empty()) return why;
  const int64_t N = n.attr_int("N"), C = n.attr_int("C"), HxW = n.attr_int("HxW"), G = n.attr_int("group");
  if (G <= 0 || C % G) return "group_norm channels not divisible by groups";
  const Shape& x = shp(g, n.inputs[0]);
  if (x.size() < 2 || x[0] != N || x[1] != C || numel(g, n.inputs[0]) != N * C * HxW)
    return "group_norm input " + ecg::shape_str(x) + " is not N x C x HxW";
  why = check_param(g, n, 1, C);
  if (why.empty()) why = check_param(g, n, 2, C);
  if (why.empty() && shp(g, n.outputs[0]) != x) why = "group_norm output shape differs from the input";
  for (size_t o = 1; why.empty() && o < n.outputs.size(); ++o) why = check_extra_output(g, n, o, N * G);
  if (why.empty() && !n.has_attr("eps")) why = "group_norm without eps";
  return why.empty() ? f32_only(g, n) : why;
}

void run_group_norm(KernelCall& c) {
  const int64_t N = c.n.attr_int("N"), C = c.n.attr_int("C"), HxW = c.n.attr_int("HxW"), G = c.n.attr_int("group");
  ref::group_norm(fin(c, 0), fopt(c, 1), fopt(c, 2), static_cast<float>(c.n.attr_float("eps")), N, C, HxW, G, fout(c, 0),
                  fopt_out(c, 1), fopt_out(c, 2));
}

// ---- softmax / log_softmax over one dim ----
std::string check_softmax(const Graph& g, const Node& n) {
  std::string why = check_arity(n, 1, 1, 1);
  if (!why.empty()) return why;
  if (n.attr_int("half_to_float", 0)) return "softmax with half_to_float";
  if (shp(g, n.outputs[0]) != shp(g, n.inputs[0])) return n.op + " output shape differs from the input";
  if (!n.has_attr("dim")) return n.op + " without dim";
  normalize_dim(n.attr_int("dim"), static_cast<int64_t>(shp(g, n.inputs[0]).size()), n);  // throws when out of range
  return f32_only(g, n);
}

void run_softmax(KernelCall& c) {
  const Shape& x = shp(c.g, c.n.inputs[0]);
  const int64_t r = static_cast<int64_t>(x.size());
  const int64_t d = normalize_dim(c.n.attr_int("dim"), r, c.n);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x[i];
  for (int64_t i = d + 1; i < r; ++i) inner *= x[i];
  ref::softmax(fin(c, 0), fout(c, 0), outer, x.empty() ? 1 : x[d], inner, c.n.op == "_log_softmax");
}

}  // namespace

void register_nn_ops(KernelTable& t) {
  // No hooks, no strided operands: one node, one plain loop nest, contiguous buffers.
  t.emplace_back("convolution", OpKernel{check_conv, nullptr, run_conv, nullptr});
  for (const char* op : {"addmm", "mm", "bmm", "baddbmm"}) t.emplace_back(op, OpKernel{check_mm, nullptr, run_mm, nullptr});
  t.emplace_back("_scaled_dot_product_flash_attention_for_cpu", OpKernel{check_sdpa, nullptr, run_sdpa, nullptr});
  t.emplace_back("max_pool2d_with_indices", OpKernel{check_max_pool, nullptr, run_max_pool, nullptr});
  t.emplace_back("avg_pool2d", OpKernel{check_avg_pool, nullptr, run_avg_pool, nullptr});
  t.emplace_back("_adaptive_avg_pool2d", OpKernel{check_adaptive_pool, nullptr, run_adaptive_avg_pool, nullptr});
  t.emplace_back("_native_batch_norm_legit_no_training", OpKernel{check_batch_norm, nullptr, run_batch_norm, nullptr});
  t.emplace_back("native_layer_norm", OpKernel{check_layer_norm, nullptr, run_layer_norm, nullptr});
  t.emplace_back("native_group_norm", OpKernel{check_group_norm, nullptr, run_group_norm, nullptr});
  t.emplace_back("_softmax", OpKernel{check_softmax, nullptr, run_softmax, nullptr});
  t.emplace_back("_log_softmax", OpKernel{check_softmax, nullptr, run_softmax, nullptr});
}

}  // namespace dnnfusion::target::reference
