// Neural-network ops bound to their kernel families: convolution, GEMM-based ops (addmm, mm,
// bmm, baddbmm), attention, pooling, normalization and softmax. Float32 only.
#include <cmath>
#include <tuple>

#include "common/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv_bf16x6.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/conv_nchwc_expand_dw.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "kernels/cpu/normalization.h"
#include "kernels/cpu/pooling.h"
#include "kernels/cpu/pooling_nchwc.h"
#include "kernels/cpu/softmax.h"
#include "runtime/op_attrs.h"
#include "runtime/op_kernels.h"
#include "target/cpu/cpu_kernels.h"
#include "target/cpu/layout/pack_gemm_weights.h"
#include "target/cpu/ops/nchwc_conv_shape.h"

namespace dnnfusion::target::cpu {

using namespace runtime;  // the kernel contract (OpKernel, KernelCall) and its helpers

using ecg::Graph;
using ecg::Node;

namespace {

const std::vector<int64_t>& shp(const Graph& g, int v) { return g.value(v).shape; }
const float* fin(const KernelCall& c, size_t i) { return static_cast<const float*>(c.in[i]); }
float* fout(const KernelCall& c, size_t i) { return static_cast<float*>(c.out[i]); }

std::string f32_only(const Graph& g, const Node& n) { return require_dtypes(g, n, {DType::Float32}); }


// ---- convolution (1-D and 2-D, NCHW) ----

std::string check_conv(const Graph& g, const Node& n) {
  if (n.attr_int("transposed", 0)) return "transposed convolution has no core kernel";
  const auto& x = shp(g, n.inputs[0]);
  if (x.size() != 3 && x.size() != 4) return "convolution on a rank-" + std::to_string(x.size()) + " input (supported: 1-D and 2-D, batched)";
  if (shp(g, n.inputs[1]).size() != x.size()) return "convolution weight rank differs from the input rank";
  auto s = conv2d_shape(g, n);
  if (s.groups <= 0 || s.C % s.groups || s.K % s.groups) return "channels not divisible by groups";
  if (shp(g, n.inputs[1])[1] * s.groups != s.C) return "weight input channels do not match the input";
  return f32_only(g, n);
}

size_t conv_scratch(const Graph& g, const Node& n, int threads) { return kernels::conv2d_scratch_bytes(conv2d_shape(g, n), threads); }

void run_conv(KernelCall& c) {
  int b = c.n.input_or_absent(2);
  kernels::conv2d_nchw(conv2d_shape(c.g, c.n), fin(c, 0), fin(c, 1), b >= 0 ? fin(c, 2) : nullptr, fout(c, 0),
                       kernels::Activation::None, c.scratch, c.par, c.epilogue);
}

// ---- NCHW[x]c convolution (csrc/target/cpu/layout puts these in; shape: nchwc_conv_shape.h) ----
// packed: the packed weight value (the pack node's output, the conv's second input).
std::string check_conv_nchwc_common(const Graph& g, const Node& n, bool with_input, int packed) {
  if (n.attr_ints("weight_shape", {}).size() != 4) return n.op + " without a 4-D weight_shape attribute";
  try {
    const auto s = nchwc_conv_shape(g, n, with_input);
    const auto k = nchwc_knobs(n);
    kernels::conv_nchwc_check(s, k, kernels::active_isa());
    const int64_t want = kernels::conv_nchwc_packed_weight_floats(s, k);
    if (g.value(packed).numel() != want)
      return detail::str_cat(n.op, ": the packed weight has ", g.value(packed).numel(), " floats, the blocks (ic_bn=",
                             k.ic_bn, ", oc_bn=", k.oc_bn, ") need ", want);
  } catch (const std::exception& e) {
    return e.what();
  }
  return f32_only(g, n);
}

std::string check_conv_nchwc(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  const int64_t icb = n.attr_int("ic_bn", -1), C = n.attr_int("in_channels", -1);
  if (x.size() != 5 || icb <= 0 || x[4] != icb || x[1] != (C + icb - 1) / icb)
    return "conv2d_nchwc input is not [N, ceil(C/ic_bn), H, W, ic_bn]";
  if (n.input_or_absent(3) >= 0) {  // per-image input-channel scale (layout/fold_input_scale)
    const auto& sc = shp(g, n.inputs[3]);
    if (sc.size() != 5 || (sc[0] != 1 && sc[0] != x[0]) || sc[1] != x[1] || sc[2] != 1 || sc[3] != 1 || sc[4] != icb)
      return "conv2d_nchwc input scale is not [N or 1, ceil(C/ic_bn), 1, 1, ic_bn]";
    if (n.attr_int("groups", 1) != 1) return "conv2d_nchwc input scale needs groups == 1";
  }
  return check_conv_nchwc_common(g, n, true, n.inputs[1]);
}

std::string check_pack_weight(const Graph& g, const Node& n) {
  return check_conv_nchwc_common(g, n, false, n.outputs[0]);
}

void run_conv_nchwc(KernelCall& c) {
  const int b = c.n.input_or_absent(2);
  if (c.n.input_or_absent(3) >= 0) {
    kernels::conv2d_nchwc_scaled_input(nchwc_conv_shape(c.g, c.n, true), nchwc_knobs(c.n), fin(c, 0), fin(c, 1), fin(c, 3),
                                       shp(c.g, c.n.inputs[3])[0], b >= 0 ? fin(c, 2) : nullptr, nullptr,
                                       kernels::Activation::None, fout(c, 0), c.par,
                                       c.epilogue ? *c.epilogue : kernels::ElementHook{});
    return;
  }
  kernels::conv2d_nchwc(nchwc_conv_shape(c.g, c.n, true), nchwc_knobs(c.n), fin(c, 0), fin(c, 1),
                        b >= 0 ? fin(c, 2) : nullptr, nullptr, kernels::Activation::None, fout(c, 0), c.par,
                        c.epilogue ? *c.epilogue : kernels::ElementHook{});
}

// conv2d_nchwc_expand_dw (layout/fuse_expand_depthwise): the depthwise conv's attributes, the
// expand conv's prefixed with expand_, the activations expand_act and dw_act; inputs
// (x, expand weight, expand bias, dw weight, dw bias).
kernels::Conv2dShape expand_shape(const Graph& g, const Node& n) { return nchwc_conv_shape(g, n, true, "expand_"); }

// The depthwise conv reads the first conv's output, not the node's input x.
kernels::Conv2dShape expand_dw_shape(const Graph& g, const Node& n) {
  const kernels::Conv2dShape e = expand_shape(g, n);
  kernels::Conv2dShape d = nchwc_conv_shape(g, n, true);
  d.H = e.OH(), d.W = e.OW();
  return d;
}

kernels::ConvNchwcKnobs expand_knobs(const Node& n) {
  return {static_cast<int>(n.attr_int("expand_ic_bn")), static_cast<int>(n.attr_int("oc_bn")),
          static_cast<int>(n.attr_int("expand_reg_n")), n.attr_int("expand_unroll_ker", 0) != 0};
}

// The expand + depthwise part of a conv2d_nchwc_expand_dw[_project] node: input layout, both
// convs' shapes and knobs, activations, packed weight sizes (inputs 0-4).
std::string check_expand_dw_front(const Graph& g, const Node& n);

std::string check_conv_expand_dw(const Graph& g, const Node& n) {
  if (n.inputs.size() != 5) return "conv2d_nchwc_expand_dw needs 5 inputs (x, w1, b1, w2, b2)";
  if (n.outputs.size() == 2) {  // the per-channel mean (layout/fuse_channel_mean)
    const auto& y = shp(g, n.outputs[0]);
    const auto& m = g.value(n.outputs[1]);
    if (y.size() != 5 || m.shape != std::vector<int64_t>{y[0], y[1], 1, 1, y[4]} || m.dtype != DType::Float32 ||
        y[4] > 64)
      return "conv2d_nchwc_expand_dw: the second output (the channel mean) is not float32 [N, Cb, 1, 1, b<=64]";
  } else if (n.outputs.size() != 1) {
    return "conv2d_nchwc_expand_dw has one output, or two with the channel mean";
  }
  return check_expand_dw_front(g, n);
}

std::string check_expand_dw_front(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  const int64_t icb = n.attr_int("expand_ic_bn", -1), C = n.attr_int("expand_in_channels", -1);
  if (x.size() != 5 || icb <= 0 || x[4] != icb || x[1] != (C + icb - 1) / icb)
    return "conv2d_nchwc_expand_dw input is not [N, ceil(C/expand_ic_bn), H, W, expand_ic_bn]";
  if (n.attr_ints("expand_weight_shape", {}).size() != 4 || n.attr_ints("weight_shape", {}).size() != 4)
    return "conv2d_nchwc_expand_dw without 4-D weight_shape / expand_weight_shape attributes";
  try {
    const auto e = expand_shape(g, n), d = expand_dw_shape(g, n);
    const auto ke = expand_knobs(n), kd = nchwc_knobs(n);
    kernels::conv_nchwc_expand_dw_check(e, ke, d, kd, kernels::active_isa());
    kernels::expand_act_from_name(n.attr_str("expand_act"));
    kernels::expand_act_from_name(n.attr_str("dw_act"));
    for (auto [slot, s, k] : {std::tuple{1, e, ke}, std::tuple{3, d, kd}})
      if (g.value(n.inputs[slot]).numel() != kernels::conv_nchwc_packed_weight_floats(s, k))
        return detail::str_cat("conv2d_nchwc_expand_dw: packed weight ", slot, " has ", g.value(n.inputs[slot]).numel(),
                               " floats, its blocks need ", kernels::conv_nchwc_packed_weight_floats(s, k));
  } catch (const std::exception& ex) {
    return ex.what();
  }
  return f32_only(g, n);
}

void run_conv_expand_dw(KernelCall& c) {
  auto opt = [&](size_t slot) { return c.n.input_or_absent(slot) >= 0 ? fin(c, slot) : nullptr; };
  kernels::conv2d_nchwc_expand_dw(expand_shape(c.g, c.n), expand_knobs(c.n), expand_dw_shape(c.g, c.n),
                                  nchwc_knobs(c.n), fin(c, 0), fin(c, 1), opt(2),
                                  kernels::expand_act_from_name(c.n.attr_str("expand_act")), fin(c, 3), opt(4),
                                  kernels::expand_act_from_name(c.n.attr_str("dw_act")), fout(c, 0),
                                  c.out.size() > 1 ? fout(c, 1) : nullptr, c.par,
                                  c.epilogue ? *c.epilogue : kernels::ElementHook{});
}

// conv2d_nchwc_expand_dw_project (layout/fuse_depthwise_project): conv2d_nchwc_expand_dw's
// inputs and attributes, then the projection's packed weight and bias (inputs 5, 6) and its
// attributes prefixed with project_ (weight_shape, in_channels, oc_bn, reg_n, unroll_ker; ic_bn is
// the depthwise block oc_bn); project_add_expand = 1 adds the first conv's activated output to the
// projection's (the skip connection that starts there).
kernels::Conv2dShape project_shape(const Graph& g, const Node& n) {
  const kernels::Conv2dShape d = expand_dw_shape(g, n);
  kernels::Conv2dShape p{};
  const auto ws = n.attr_ints("project_weight_shape");
  p.N = d.N, p.C = n.attr_int("project_in_channels"), p.H = d.OH(), p.W = d.OW(), p.K = ws.at(0);
  p.R = ws.at(2), p.S = ws.at(3);
  p.stride_h = p.stride_w = p.dil_h = p.dil_w = p.groups = 1;
  return p;
}

kernels::ConvNchwcKnobs project_knobs(const Node& n) {
  return {static_cast<int>(n.attr_int("oc_bn")), static_cast<int>(n.attr_int("project_oc_bn")),
          static_cast<int>(n.attr_int("project_reg_n")), n.attr_int("project_unroll_ker", 0) != 0};
}

std::string check_conv_expand_dw_project(const Graph& g, const Node& n) {
  if (n.inputs.size() != 7 || n.outputs.size() != 1)
    return "conv2d_nchwc_expand_dw_project needs 7 inputs (x, w1, b1, w2, b2, w3, b3) and one output";
  if (n.attr_ints("project_weight_shape", {}).size() != 4)
    return "conv2d_nchwc_expand_dw_project without a 4-D project_weight_shape attribute";
  if (auto why = check_expand_dw_front(g, n); !why.empty()) return why;
  const auto& y = shp(g, n.outputs[0]);
  try {
    const auto p = project_shape(g, n);
    const auto kp = project_knobs(n);
    kernels::conv_nchwc_expand_dw_project_check(expand_shape(g, n), expand_knobs(n), expand_dw_shape(g, n),
                                                nchwc_knobs(n), p, kp, kernels::active_isa(),
                                                n.attr_int("project_add_expand", 0) != 0);
    if (g.value(n.inputs[5]).numel() != kernels::conv_nchwc_packed_weight_floats(p, kp))
      return detail::str_cat("conv2d_nchwc_expand_dw_project: packed weight 5 has ", g.value(n.inputs[5]).numel(),
                             " floats, its blocks need ", kernels::conv_nchwc_packed_weight_floats(p, kp));
    if (y != std::vector<int64_t>{p.N, (p.K + kp.oc_bn - 1) / kp.oc_bn, p.H, p.W, kp.oc_bn})
      return "conv2d_nchwc_expand_dw_project output is not [N, ceil(K/project_oc_bn), OH, OW, project_oc_bn]";
  } catch (const std::exception& ex) {
    return ex.what();
  }
  return "";
}

void run_conv_expand_dw_project(KernelCall& c) {
  auto opt = [&](size_t slot) { return c.n.input_or_absent(slot) >= 0 ? fin(c, slot) : nullptr; };
  kernels::conv2d_nchwc_expand_dw_project(
      expand_shape(c.g, c.n), expand_knobs(c.n), expand_dw_shape(c.g, c.n), nchwc_knobs(c.n), project_shape(c.g, c.n),
      project_knobs(c.n), fin(c, 0), fin(c, 1), opt(2), kernels::expand_act_from_name(c.n.attr_str("expand_act")),
      fin(c, 3), opt(4), kernels::expand_act_from_name(c.n.attr_str("dw_act")), fin(c, 5), opt(6),
      c.n.attr_int("project_add_expand", 0) != 0, fout(c, 0), c.par, c.epilogue ? *c.epilogue : kernels::ElementHook{});
}

void run_pack_weight(KernelCall& c) {
  kernels::conv_nchwc_pack_weight(nchwc_conv_shape(c.g, c.n, false), nchwc_knobs(c.n), fin(c, 0), fout(c, 0));
}

// The direct kernel's packed weight -> the AMX packing (layout/use_amx_convs); attributes as the
// conv's, amx = 1.
std::string check_repack_bf16x6(const Graph& g, const Node& n) {
  if (auto why = check_conv_nchwc_common(g, n, false, n.outputs[0]); !why.empty()) return why;
  auto k = nchwc_knobs(n);
  if (!k.amx) return "conv2d_nchwc_repack_bf16x6 without amx = 1";
  k.amx = false;
  const auto s = nchwc_conv_shape(g, n, false);
  if (g.value(n.inputs[0]).numel() != kernels::conv_nchwc_packed_weight_floats(s, k))
    return "conv2d_nchwc_repack_bf16x6: the input is not the direct kernel's packed weight for these blocks";
  return "";
}

void run_repack_bf16x6(KernelCall& c) {
  const auto k = nchwc_knobs(c.n);
  kernels::conv_bf16x6_repack_weight(nchwc_conv_shape(c.g, c.n, false), k.ic_bn, k.oc_bn, fin(c, 0), fout(c, 0));
}

// ---- GEMM family ----
// The last two dims of input `slot` as a matrix (row-major unless a fused block hands the operand
// over strided), and the distance between batch entries.
kernels::MatrixView mat(const KernelCall& c, size_t slot, int64_t* batch_stride = nullptr) {
  const auto& s = shp(c.g, c.n.inputs[slot]);
  const auto& st = c.strides_of(slot);
  const float* p = static_cast<const float*>(c.in[slot]);
  if (st.empty()) {
    if (batch_stride) *batch_stride = s[s.size() - 2] * s.back();
    return kernels::MatrixView{p, s.back(), 1};
  }
  if (batch_stride) *batch_stride = st[0];
  return kernels::MatrixView{p, st[st.size() - 2], st.back()};
}

std::string check_mm(const Graph& g, const Node& n) {
  size_t a = (n.op == "addmm" || n.op == "baddbmm") ? 1 : 0;
  const size_t rank = (n.op == "bmm" || n.op == "baddbmm") ? 3 : 2;
  if (shp(g, n.inputs[a]).size() != rank || shp(g, n.inputs[a + 1]).size() != rank)
    return n.op + " expects rank-" + std::to_string(rank) + " operands";
  return f32_only(g, n);
}

// Writes beta * bias (broadcast to out) into C, or sets up a per-column/per-row bias epilogue.
void prepare_bias(const Graph& g, const KernelCall& c, int bias_input, int64_t batch, int64_t M, int64_t N, double beta,
                  kernels::GemmEpilogue* ep) {
  const auto& b = shp(g, c.n.inputs[bias_input]);
  const float* bp = fin(c, bias_input);
  int64_t numel = 1;
  for (auto d : b) numel *= d;
  if (beta == 1.0 && numel == N && (b.size() == 1 || (b.size() >= 2 && b[b.size() - 1] == N))) {
    ep->bias = bp;
    ep->bias_mode = kernels::GemmEpilogue::Bias::PerCol;
    return;
  }
  if (beta == 0.0) return;
  // General broadcast: materialize beta*bias in C and accumulate into it (the GEMM's epilogue hook
  // still sees each element once: it runs only on the final K block's stores).
  std::vector<int64_t> bs(3, 0);
  auto cs = contiguous_strides(b);
  for (size_t i = 0; i < b.size(); ++i) {
    size_t d = 3 - b.size() + i;
    bs[d] = b[i] == 1 ? 0 : cs[i];
  }
  float* C = fout(c, 0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < N; ++j) C[(i * M + m) * N + j] = static_cast<float>(beta) * bp[i * bs[0] + m * bs[1] + j * bs[2]];
  ep->beta = 1.f;
}

void run_mm(KernelCall& c) {
  const Graph& g = c.g;
  const Node& n = c.n;
  const bool has_bias = n.op == "addmm" || n.op == "baddbmm";
  const size_t a = has_bias ? 1 : 0;
  const auto& as = shp(g, n.inputs[a]);
  const auto& bs = shp(g, n.inputs[a + 1]);
  const bool batched = as.size() == 3;
  const int64_t batch = batched ? as[0] : 1;
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  kernels::GemmEpilogue ep;
  if (has_bias) {
    ep.alpha = static_cast<float>(n.attr_float("alpha", 1.0));
    prepare_bias(g, c, 0, batch, M, N, n.attr_float("beta", 1.0), &ep);
  }
  int64_t sa = 0, sb = 0;
  const kernels::MatrixView A = mat(c, a, &sa), B = mat(c, a + 1, &sb);
  if (batched)
    kernels::sgemm_batched(batch, M, N, K, A, sa, B, sb, fout(c, 0), N, M * N, ep, c.par, c.epilogue);
  else
    kernels::sgemm(M, N, K, A, B, fout(c, 0), N, ep, c.par, c.epilogue);
}

// The packed-B format a gemm_pack_b / mm_packed node names ("" = fp32 panels), and whether this
// process can run it: the reason it cannot, or "".
bool bf16x6_packing(const Node& n) { return n.has_attr("packing") && n.attr_str("packing") == layout::kBf16x6Packing; }

std::string packing_unsupported(const Node& n, const char* op) {
  if (n.has_attr("packing") && !bf16x6_packing(n))
    return std::string(op) + ": unknown packing '" + n.attr_str("packing") + "' (allowed: bf16x6, or none for fp32 panels)";
  if (bf16x6_packing(n)) {
    if (!kernels::bf16x6_available())
      return std::string(op) + ": B was packed for the AMX bf16x6 GEMM, which this CPU, OS or DNNFUSION_AMX=0 rules out";
    return "";
  }
  const int64_t nr = n.attr_int("nr", 0);
  if (nr != kernels::sgemm_panel_width())
    return std::string(op) + ": B was packed for panel width " + std::to_string(nr) + ", this CPU's micro-kernel uses " +
           std::to_string(kernels::sgemm_panel_width());
  return "";
}

int64_t packed_floats(const Node& n, int64_t K, int64_t N) {
  return bf16x6_packing(n) ? kernels::bf16x6_packed_b_floats(K, N)
                           : kernels::sgemm_packed_b_floats(K, N, static_cast<int>(n.attr_int("nr")));
}

std::string check_gemm_pack_b(const Graph& g, const Node& n) {
  const auto& b = shp(g, n.inputs[0]);
  if (b.size() != 2) return "gemm_pack_b expects a [K, N] operand";
  if (auto why = packing_unsupported(n, "gemm_pack_b"); !why.empty()) return why;
  if (shp(g, n.outputs[0]) != std::vector<int64_t>{packed_floats(n, b[0], b[1])})
    return "gemm_pack_b: output size is not the packed size of its operand";
  return f32_only(g, n);
}

void run_gemm_pack_b(KernelCall& c) {
  const auto& b = shp(c.g, c.n.inputs[0]);
  if (bf16x6_packing(c.n))
    kernels::bf16x6_pack_b(b[0], b[1], mat(c, 0), fout(c, 0));
  else
    kernels::sgemm_pack_b(b[0], b[1], mat(c, 0), static_cast<int>(c.n.attr_int("nr")), fout(c, 0));
}

std::string check_mm_packed(const Graph& g, const Node& n) {
  const auto& a = shp(g, n.inputs[0]);
  const int64_t N = n.attr_int("n", -1);
  if (a.size() != 2) return "mm_packed expects a rank-2 first operand";
  if (N < 0) return "mm_packed without an n attribute";
  if (auto why = packing_unsupported(n, "mm_packed"); !why.empty()) return why;
  if (shp(g, n.inputs[1]) != std::vector<int64_t>{packed_floats(n, a[1], N)})
    return "mm_packed: packed B size does not match K x n";
  const int bias = n.input_or_absent(2);
  if (bias >= 0 && g.value(bias).numel() != N) return "mm_packed: bias must have n elements";
  if (shp(g, n.outputs[0]) != std::vector<int64_t>{a[0], N}) return "mm_packed: output is not [M, n]";
  return f32_only(g, n);
}

void run_mm_packed(KernelCall& c) {
  const auto& a = shp(c.g, c.n.inputs[0]);
  const int64_t M = a[0], K = a[1], N = c.n.attr_int("n");
  kernels::GemmEpilogue ep;
  ep.alpha = static_cast<float>(c.n.attr_float("alpha", 1.0));
  if (c.n.input_or_absent(2) >= 0) {
    ep.bias = fin(c, 2);
    ep.bias_mode = kernels::GemmEpilogue::Bias::PerCol;
  }
  if (bf16x6_packing(c.n))
    kernels::sgemm_bf16x6_packed_b(M, N, K, mat(c, 0), fin(c, 1), fout(c, 0), N, ep, c.par, c.epilogue);
  else
    kernels::sgemm_packed_b(M, N, K, mat(c, 0), fin(c, 1), static_cast<int>(c.n.attr_int("nr")), fout(c, 0), N, ep,
                            c.par, c.epilogue);
}

// ---- scaled dot-product attention ----
std::string check_sdpa(const Graph& g, const Node& n) { return runtime::sdpa_unsupported(g, n); }

size_t sdpa_scratch(const Graph& g, const Node& n, int threads) {
  return kernels::sdpa_scratch_bytes(shp(g, n.inputs[0])[2], shp(g, n.inputs[1])[2], threads);
}

kernels::Tensor4 t4(const KernelCall& c, size_t slot) {
  const auto& given = c.strides_of(slot);
  auto cs = given.empty() ? contiguous_strides(shp(c.g, c.n.inputs[slot])) : given;
  return kernels::Tensor4{static_cast<const float*>(c.in[slot]), cs[0], cs[1], cs[2], cs[3]};
}

void run_sdpa(KernelCall& c) {
  const auto& q = shp(c.g, c.n.inputs[0]);
  const auto& k = shp(c.g, c.n.inputs[1]);
  const auto& v = shp(c.g, c.n.inputs[2]);
  kernels::AttnMask mask;
  int m = c.n.input_or_absent(3);
  if (m >= 0) {
    const auto& ms = shp(c.g, m);
    auto cs = contiguous_strides(ms);
    int64_t st[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < ms.size(); ++i) {
      size_t d = 4 - ms.size() + i;
      st[d] = ms[i] == 1 ? 0 : cs[i];
    }
    mask = kernels::AttnMask{c.in[3], c.g.value(m).dtype == DType::Bool, st[0], st[1], st[2], st[3]};
  }
  double scale = c.n.has_attr("scale") ? c.n.attr_float("scale") : 1.0 / std::sqrt(static_cast<double>(q[3]));
  float* lse = c.out.size() > 1 && c.g.value(c.n.outputs[1]).numel() == q[0] * q[1] * q[2] ? fout(c, 1) : nullptr;
  const int64_t* os = nullptr;
  if (c.out_strides) {
    const auto& s = *c.out_strides;
    DNNF_CHECK(s.size() == 4 && (s[3] == 1 || v[3] <= 1), "attention output strides must keep rows contiguous");
    os = s.data();
  }
  kernels::sdpa(q[0], q[1], q[2], k[2], q[3], v[3], t4(c, 0), t4(c, 1), t4(c, 2), mask,
                c.n.attr_int("is_causal", 0) != 0, static_cast<float>(scale), fout(c, 0), lse, c.scratch, c.par, os);
}

// ---- pooling ----
// The pooling window attributes (shared by the NCHW and NCHW[x]c ops) over the given extents.
kernels::Pool2dShape pool_window(const Node& n, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  auto ks = n.attr_ints("kernel_size");
  auto st = n.attr_ints("stride", {});
  if (st.empty()) st = ks;
  auto pd = n.attr_ints("padding", {0});
  auto dl = n.attr_ints("dilation", {1});
  return kernels::Pool2dShape{N, C, H, W, OH, OW, at_or(ks, 0, 1), at_or(ks, 1, 1),
                              at_or(st, 0, 1), at_or(st, 1, 1), at_or(pd, 0, 0), at_or(pd, 1, 0),
                              at_or(dl, 0, 1), at_or(dl, 1, 1)};
}

kernels::Pool2dShape pool_shape(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  const auto& y = shp(g, n.outputs[0]);
  const size_t r = x.size();
  return pool_window(n, r == 4 ? x[0] : 1, x[r - 3], x[r - 2], x[r - 1], y[y.size() - 2], y[y.size() - 1]);
}

std::string check_pool(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  if (x.size() != 3 && x.size() != 4) return "2-D pooling on a rank-" + std::to_string(x.size()) + " input";
  if (n.op == "max_pool2d_with_indices" && n.outputs.size() > 1 && g.value(n.outputs[1]).dtype != DType::Int64)
    return "max_pool2d indices must be int64";
  auto r = require_dtypes(g, n, {DType::Float32, DType::Int64});
  if (!r.empty()) return r;
  return g.value(n.inputs[0]).dtype == DType::Float32 ? "" : "pooling on non-float32 input";
}

void run_max_pool(KernelCall& c) {
  int64_t* idx = c.out.size() > 1 ? static_cast<int64_t*>(c.out[1]) : nullptr;
  kernels::max_pool2d_nchw(pool_shape(c.g, c.n), fin(c, 0), fout(c, 0), idx, c.par, c.epilogue);
}

void run_avg_pool(KernelCall& c) {
  int64_t div = c.n.has_attr("divisor_override") ? c.n.attr_int("divisor_override") : 0;
  kernels::avg_pool2d_nchw(pool_shape(c.g, c.n), fin(c, 0), fout(c, 0), c.n.attr_int("count_include_pad", 1) != 0, div, c.par,
                           c.epilogue);
}

// Pooling on NCHW[b]c activations [N, C/b, H, W, b] (csrc/target/cpu/layout): the NCHW problem's shape
// with C = C/b * b; same attributes as the NCHW ops.
kernels::Pool2dShape pool_nchwc_shape(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  const auto& y = shp(g, n.outputs[0]);
  return pool_window(n, x[0], x[1] * x[4], x[2], x[3], y[2], y[3]);
}

std::string check_pool_nchwc(const Graph& g, const Node& n) {
  const auto& x = shp(g, n.inputs[0]);
  const auto& y = shp(g, n.outputs[0]);
  if (x.size() != 5 || y.size() != 5 || x[4] != y[4] || x[1] != y[1] || x[0] != y[0])
    return n.op + " expects [N, C/b, H, W, b] input and output with the same blocks";
  if (n.op == "avg_pool2d_nchwc" && n.attr_ints("dilation", {1}) != std::vector<int64_t>{1} &&
      n.attr_ints("dilation", {1}) != std::vector<int64_t>{1, 1})
    return "avg_pool2d_nchwc with dilation";
  return f32_only(g, n);
}

void run_max_pool_nchwc(KernelCall& c) {
  kernels::max_pool2d_nchwc(pool_nchwc_shape(c.g, c.n), shp(c.g, c.n.inputs[0])[4], fin(c, 0), fout(c, 0), c.par,
                            c.epilogue);
}

void run_avg_pool_nchwc(KernelCall& c) {
  const int64_t div = c.n.has_attr("divisor_override") ? c.n.attr_int("divisor_override") : 0;
  kernels::avg_pool2d_nchwc(pool_nchwc_shape(c.g, c.n), shp(c.g, c.n.inputs[0])[4], fin(c, 0), fout(c, 0),
                            c.n.attr_int("count_include_pad", 1) != 0, div, c.par, c.epilogue);
}

void run_adaptive_avg_pool(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  const auto& y = shp(c.g, c.n.outputs[0]);
  const bool batched = x.size() == 4;
  kernels::adaptive_avg_pool2d_nchw(batched ? x[0] : 1, x[x.size() - 3], x[x.size() - 2], x.back(), y[y.size() - 2], y.back(),
                                    fin(c, 0), fout(c, 0), c.par, c.epilogue);
}

// ---- normalization ----
std::string check_batch_norm(const Graph& g, const Node& n) {
  if (shp(g, n.inputs[0]).size() < 2) return "batch_norm on a rank < 2 input";
  if (n.inputs.size() < 5 || n.inputs[3] < 0 || n.inputs[4] < 0) return "batch_norm without running statistics";
  return f32_only(g, n);
}

void run_batch_norm(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  int64_t inner = 1;
  for (size_t i = 2; i < x.size(); ++i) inner *= x[i];
  kernels::batch_norm_inference(fin(c, 0), fin(c, 3), fin(c, 4), c.n.inputs[1] >= 0 ? fin(c, 1) : nullptr,
                                c.n.inputs[2] >= 0 ? fin(c, 2) : nullptr, static_cast<float>(c.n.attr_float("eps")), x[0], x[1],
                                inner, fout(c, 0), c.par);
}

std::string check_layer_norm(const Graph& g, const Node& n) { return f32_only(g, n); }

void run_layer_norm(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  auto ns = c.n.attr_ints("normalized_shape");
  int64_t cols = 1, numel = 1;
  for (auto d : ns) cols *= d;
  for (auto d : x) numel *= d;
  int64_t rows = cols ? numel / cols : 0;
  float* mean = c.out.size() > 1 && c.g.value(c.n.outputs[1]).numel() == rows ? fout(c, 1) : nullptr;
  float* rstd = c.out.size() > 2 && c.g.value(c.n.outputs[2]).numel() == rows ? fout(c, 2) : nullptr;
  kernels::layer_norm(fin(c, 0), c.n.input_or_absent(1) >= 0 ? fin(c, 1) : nullptr, c.n.input_or_absent(2) >= 0 ? fin(c, 2) : nullptr,
                      static_cast<float>(c.n.attr_float("eps")), rows, cols, fout(c, 0), mean, rstd, c.par, c.epilogue,
                      c.prologue);
}

void run_group_norm(KernelCall& c) {
  const int64_t N = c.n.attr_int("N"), C = c.n.attr_int("C"), HxW = c.n.attr_int("HxW"), G = c.n.attr_int("group");
  float* mean = c.out.size() > 1 && c.g.value(c.n.outputs[1]).numel() == N * G ? fout(c, 1) : nullptr;
  float* rstd = c.out.size() > 2 && c.g.value(c.n.outputs[2]).numel() == N * G ? fout(c, 2) : nullptr;
  kernels::group_norm(fin(c, 0), c.n.input_or_absent(1) >= 0 ? fin(c, 1) : nullptr, c.n.input_or_absent(2) >= 0 ? fin(c, 2) : nullptr,
                      static_cast<float>(c.n.attr_float("eps")), N, C, HxW, G, fout(c, 0), mean, rstd, c.par);
}

std::string check_group_norm(const Graph& g, const Node& n) {
  if (n.attr_int("group") <= 0 || n.attr_int("C") % n.attr_int("group")) return "group_norm channels not divisible by groups";
  return f32_only(g, n);
}

// ---- softmax ----
std::string check_softmax(const Graph& g, const Node& n) {
  if (n.attr_int("half_to_float", 0)) return "softmax with half_to_float";
  return f32_only(g, n);
}

void run_softmax(KernelCall& c) {
  const auto& x = shp(c.g, c.n.inputs[0]);
  const int64_t d = normalize_dim(c.n.attr_int("dim"), static_cast<int64_t>(x.size()), c.n);
  int64_t outer = 1, inner = 1, dim = x.empty() ? 1 : x[d];
  for (int64_t i = 0; i < d; ++i) outer *= x[i];
  for (size_t i = d + 1; i < x.size(); ++i) inner *= x[i];
  kernels::softmax(fin(c, 0), fout(c, 0), outer, dim, inner, c.n.op == "_log_softmax", c.par, c.epilogue, c.prologue);
}

}  // namespace

void register_nn_ops(KernelTable& t) {
  // Trailing flags: {epilogue_hook, prologue_hook}, set only where run() passes the hook on.
  t.emplace_back("convolution", OpKernel{check_conv, conv_scratch, run_conv, nullptr, true, false});
  t.emplace_back("conv2d_nchwc", OpKernel{check_conv_nchwc, nullptr, run_conv_nchwc, nullptr, true, false});
  t.emplace_back("conv2d_nchwc_pack_weight", OpKernel{check_pack_weight, nullptr, run_pack_weight, nullptr});
  t.emplace_back("conv2d_nchwc_repack_bf16x6", OpKernel{check_repack_bf16x6, nullptr, run_repack_bf16x6, nullptr});
  t.emplace_back("conv2d_nchwc_expand_dw", OpKernel{check_conv_expand_dw, nullptr, run_conv_expand_dw, nullptr, true, false});
  t.emplace_back("conv2d_nchwc_expand_dw_project",
                 OpKernel{check_conv_expand_dw_project, nullptr, run_conv_expand_dw_project, nullptr, true, false});
  for (const char* op : {"addmm", "mm", "bmm", "baddbmm"})
    t.emplace_back(op, OpKernel{check_mm, nullptr, run_mm, nullptr, true, false,
                                std::string(op) == "addmm" || std::string(op) == "baddbmm" ? 0b110u : 0b011u});
  t.emplace_back("mm_packed", OpKernel{check_mm_packed, nullptr, run_mm_packed, nullptr, true, false, 0b001u});
  t.emplace_back("gemm_pack_b", OpKernel{check_gemm_pack_b, nullptr, run_gemm_pack_b, nullptr});
  // Attention reads q/k/v through any strides (its GEMMs pack them) and writes rows of its output
  // at any stride, so the head split/merge permutes around it fold into it.
  t.emplace_back("_scaled_dot_product_flash_attention_for_cpu",
                 OpKernel{check_sdpa, sdpa_scratch, run_sdpa, nullptr, false, false, 0b111u, true});
  t.emplace_back("max_pool2d_with_indices", OpKernel{check_pool, nullptr, run_max_pool, nullptr, true, false});
  t.emplace_back("avg_pool2d", OpKernel{check_pool, nullptr, run_avg_pool, nullptr, true, false});
  t.emplace_back("max_pool2d_nchwc", OpKernel{check_pool_nchwc, nullptr, run_max_pool_nchwc, nullptr, true, false});
  t.emplace_back("avg_pool2d_nchwc", OpKernel{check_pool_nchwc, nullptr, run_avg_pool_nchwc, nullptr, true, false});
  t.emplace_back("_adaptive_avg_pool2d", OpKernel{check_pool, nullptr, run_adaptive_avg_pool, nullptr, true, false});
  t.emplace_back("_native_batch_norm_legit_no_training", OpKernel{check_batch_norm, nullptr, run_batch_norm, nullptr});
  t.emplace_back("native_layer_norm", OpKernel{check_layer_norm, nullptr, run_layer_norm, nullptr, true, true});
  t.emplace_back("native_group_norm", OpKernel{check_group_norm, nullptr, run_group_norm, nullptr});
  t.emplace_back("_softmax", OpKernel{check_softmax, nullptr, run_softmax, nullptr, true, true});
  t.emplace_back("_log_softmax", OpKernel{check_softmax, nullptr, run_softmax, nullptr, true, true});
}

}  // namespace dnnfusion::target::cpu
