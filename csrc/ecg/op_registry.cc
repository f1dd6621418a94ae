#include "ecg/op_registry.h"

#include <limits>
#include <unordered_map>

#include "common/conv_geometry.h"
#include "common/error.h"
#include "ecg/elementwise_expr.h"
#include "ecg/graph.h"

namespace dnnfusion::ecg {

const char* mapping_type_name(MappingType t) {
  switch (t) {
    case MappingType::OneToOne: return "One-to-One";
    case MappingType::OneToMany: return "One-to-Many";
    case MappingType::ManyToMany: return "Many-to-Many";
    case MappingType::Reorganize: return "Reorganize";
    case MappingType::Shuffle: return "Shuffle";
  }
  return "?";
}

const char* pattern_kind_name(PatternKind k) {
  switch (k) {
    case PatternKind::ElemWise: return "kElemWise";
    case PatternKind::Broadcast: return "kBroadcast";
    case PatternKind::Injective: return "kInjective";
    case PatternKind::CommReduce: return "kCommReduce";
    case PatternKind::OutEWiseFusable: return "kOutEWiseFusable";
    case PatternKind::Tuple: return "kTuple";
    case PatternKind::Opaque: return "kOpaque";
  }
  return "?";
}

namespace {

using M = MappingType;
using P = PatternKind;
using F = FlopModel;

MathProps none() { return {}; }
MathProps assoc_comm(std::vector<std::string> dist = {}) { return {true, true, std::move(dist), {}}; }
MathProps linear() { return {false, false, {"add", "sub"}, {"mul"}}; }
MathProps monotone() { return {false, false, {}, {"max_pool2d_with_indices", "amax"}}; }
MathProps reduce_sum() { return {false, false, {}, {"mul", "div"}}; }

// ---- element-wise expressions (ecg/elementwise_expr.h) ----
constexpr double kInf = std::numeric_limits<double>::infinity();

std::function<std::string(const Node&)> fixed(const char* text) {
  return [text](const Node&) { return std::string(text); };
}

std::string clamp_expr(double lo, double hi) {
  std::string e = "$0";
  if (lo != -kInf) e = "(" + e + " < " + float_literal(lo) + " ? " + float_literal(lo) + " : " + e + ")";
  if (hi != kInf) e = "(" + e + " > " + float_literal(hi) + " ? " + float_literal(hi) + " : " + e + ")";
  return e;
}

std::string alpha_times(const Node& n, const std::string& v) {
  const double alpha = n.attr_float("alpha", 1.0);
  return alpha == 1.0 ? v : "(" + float_literal(alpha) + " * " + v + ")";
}

std::string batch_norm_expr(const Node& n) {
  std::string e = "(($0 - $3) * (1.f / dnnf_sqrt($4 + " + float_literal(n.attr_float("eps")) + ")))";
  if (n.input_or_absent(1) >= 0) e = "(" + e + " * $1)";
  if (n.input_or_absent(2) >= 0) e = "(" + e + " + $2)";
  return e;
}

// Per-channel parameters broadcast over dim 1; the statistics outputs have no expression, so a
// node whose statistics are read is a kernel call.
std::string batch_norm_refuses(const Graph& g, const Node& n) {
  if (g.value(n.inputs[0]).shape.size() < 2) return "batch_norm input of rank < 2";
  for (size_t i = 1; i < 5; ++i)
    if (n.inputs[i] >= 0 && g.value(n.inputs[i]).shape.size() != 1) return "batch_norm parameters are not vectors";
  for (size_t s = 1; s < n.outputs.size(); ++s) {
    const auto& v = g.value(n.outputs[s]);
    if (!v.users.empty() || v.is_output) return "batch_norm statistics outputs are used";
  }
  return "";
}

std::vector<OpInfo> build_table() {
  std::vector<OpInfo> t;
  auto add = [&](const char* name, M m, P p, bool removable, MathProps props, F fm, double fpe = 0, int nout = 1) {
    t.push_back(OpInfo{name, m, p, removable, std::move(props), fm, fpe, nout, ElementwiseRule{}});
  };
  // ---- One-to-One: elementwise unary ----
  // Each row ends with the expression (ecg/elementwise_expr.h); selects are written so that a
  // NaN operand falls through to the result, as in the library kernels.
  auto unary = [&](const char* name, MathProps props, double fpe, std::function<std::string(const Node&)> text,
                   std::function<std::string(const Graph&, const Node&)> refuse = nullptr) {
    add(name, M::OneToOne, P::ElemWise, true, std::move(props), F::PerOutput, fpe);
    t.back().elementwise = ElementwiseRule{"f", std::move(text), std::move(refuse)};
  };
  auto binary = [&](const char* name, MathProps props, std::function<std::string(const Node&)> text,
                    std::function<std::string(const Graph&, const Node&)> refuse = nullptr) {
    add(name, M::OneToOne, P::Broadcast, true, std::move(props), F::PerOutput, 1);
    t.back().elementwise = ElementwiseRule{"ff", std::move(text), std::move(refuse)};
  };
  unary("relu", monotone(), 1, fixed("($0 < 0.f ? 0.f : $0)"));
  unary("hardtanh", monotone(), 1, [](const Node& n) { return clamp_expr(n.attr_float("min_val", -1.0), n.attr_float("max_val", 1.0)); });
  unary("clamp", monotone(), 1, [](const Node& n) { return clamp_expr(n.attr_float("min", -kInf), n.attr_float("max", kInf)); });
  // sigmoid and silu need exp(-x) only where it changes 1 + exp(-x): dnnf_exp_clamped skips most
  // of exp's range handling (silu 1.6x faster per element on AVX-512; results differ from torch's
  // only for x in (-88.8, -87), by less than 1e-36).
  unary("sigmoid", monotone(), 1, fixed("(1.f / (1.f + dnnf_exp_clamped(-$0)))"));
  unary("tanh", monotone(), 1, fixed("dnnf_tanh($0)"));
  unary("exp", monotone(), 1, fixed("dnnf_exp($0)"));
  unary("sqrt", monotone(), 1, fixed("dnnf_sqrt($0)"));
  unary("floor", monotone(), 1, fixed("dnnf_floor($0)"));
  unary("ceil", monotone(), 1, fixed("dnnf_ceil($0)"));
  unary("round", monotone(), 1, fixed("dnnf_rint($0)"), [](const Graph&, const Node& n) {
    return n.attr_int("decimals", 0) != 0 ? "round with decimals" : "";
  });
  unary("sign", monotone(), 1, fixed("($0 > 0.f ? 1.f : ($0 < 0.f ? -1.f : $0))"));
  unary("erf", monotone(), 1, fixed("dnnf_erf($0)"));
  unary("leaky_relu", monotone(), 1, [](const Node& n) {
    return "($0 > 0.f ? $0 : " + float_literal(n.attr_float("negative_slope", 0.01)) + " * $0)";
  });
  unary("hardswish", none(), 4, fixed("($0 * dnnf_clamp06($0 + 3.f) * (1.f / 6.f))"));
  unary("hardsigmoid", none(), 4, fixed("(dnnf_clamp06($0 + 3.f) * (1.f / 6.f))"));
  unary("silu", none(), 4, fixed("($0 / (1.f + dnnf_exp_clamped(-$0)))"));
  unary("gelu", none(), 4, [](const Node& n) -> std::string {
    if (n.has_attr("approximate") && n.attr_str("approximate") == "tanh")
      return "(0.5f * $0 * (1.f + dnnf_tanh(0.7978845608028654f * ($0 + 0.044715f * $0 * $0 * $0))))";
    return "(0.5f * $0 * (1.f + dnnf_erf($0 * 0.7071067811865476f)))";
  }, [](const Graph&, const Node& n) -> std::string {
    const std::string a = n.has_attr("approximate") ? n.attr_str("approximate") : "none";
    return a == "none" || a == "tanh" ? "" : "gelu approximation '" + a + "'";
  });
  unary("log", none(), 4, fixed("dnnf_log($0)"));
  unary("rsqrt", none(), 4, fixed("(1.f / dnnf_sqrt($0))"));
  unary("reciprocal", none(), 4, fixed("(1.f / $0)"));
  unary("neg", none(), 4, fixed("(-$0)"));
  unary("abs", none(), 4, fixed("dnnf_abs($0)"));
  unary("elu", none(), 4, [](const Node& n) {
    return "($0 > 0.f ? $0 : " + float_literal(n.attr_float("alpha", 1.0)) + " * dnnf_expm1($0))";
  }, [](const Graph&, const Node& n) {
    return n.attr_float("scale", 1.0) != 1.0 || n.attr_float("input_scale", 1.0) != 1.0 ? "elu scale" : "";
  });
  unary("softplus", none(), 4, [](const Node& n) {
    const std::string b = float_literal(n.attr_float("beta", 1.0)), th = float_literal(n.attr_float("threshold", 20.0));
    return "($0 * " + b + " > " + th + " ? $0 : dnnf_log1p(dnnf_exp_exact(" + b + " * $0)) / " + b + ")";
  });
  unary("mish", none(), 4, fixed("($0 * dnnf_tanh(dnnf_log1p(dnnf_exp_exact($0))))"));
  unary("sin", none(), 4, fixed("dnnf_sin($0)"));
  unary("cos", none(), 4, fixed("dnnf_cos($0)"));
  unary("square", none(), 4, fixed("($0 * $0)"));
  for (const char* n : {"logical_not", "bitwise_not"}) add(n, M::OneToOne, P::ElemWise, true, none(), F::PerOutput, 4);
  add("_to_copy", M::OneToOne, P::ElemWise, true, none(), F::None);
  t.back().elementwise = ElementwiseRule{"f", fixed("$0"), nullptr};
  add("clone", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("alias", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("lift_fresh_copy", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("contiguous", M::OneToOne, P::ElemWise, true, none(), F::None);
  // inputs: x, weight?, bias?, running_mean, running_var; outputs: y, and two statistics
  add("_native_batch_norm_legit_no_training", M::OneToOne, P::Broadcast, true,
      MathProps{false, false, {}, {"convolution", "addmm"}}, F::PerOutput, 2, 3);
  t.back().elementwise = ElementwiseRule{"f??ff", batch_norm_expr, batch_norm_refuses};
  // ---- One-to-One: elementwise binary/ternary (broadcast against weights keeps the type) ----
  binary("add", assoc_comm(), [](const Node& n) { return "($0 + " + alpha_times(n, "$1") + ")"; });
  binary("mul", assoc_comm({"add", "sub"}), fixed("($0 * $1)"));
  binary("sub", none(), [](const Node& n) { return "($0 - " + alpha_times(n, "$1") + ")"; });
  binary("rsub", none(), [](const Node& n) { return "($1 - " + alpha_times(n, "$0") + ")"; });
  binary("div", MathProps{false, false, {"add", "sub"}, {}}, fixed("($0 / $1)"), [](const Graph&, const Node& n) {
    return n.has_attr("rounding_mode") ? "div with rounding_mode" : "";
  });
  binary("maximum", assoc_comm(), fixed("(($0 > $1 || $0 != $0) ? $0 : $1)"));
  binary("minimum", assoc_comm(), fixed("(($0 < $1 || $0 != $0) ? $0 : $1)"));
  binary("pow", none(), fixed("dnnf_pow($0, $1)"));
  for (const char* n : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "bitwise_and",
                        "bitwise_or", "remainder", "floor_divide", "atan2"})
    add(n, M::OneToOne, P::Broadcast, true, none(), F::PerOutput, 1);
  add("where", M::OneToOne, P::Broadcast, true, none(), F::PerOutput, 1);
  t.back().elementwise = ElementwiseRule{"bff", fixed("($0 ? $1 : $2)"), nullptr};
  add("masked_fill", M::OneToOne, P::Broadcast, true, none(), F::PerOutput, 1);
  t.back().elementwise = ElementwiseRule{"fbf", fixed("($1 ? $2 : $0)"), nullptr};
  // ---- One-to-One: data movement that keeps each element's identity ----
  add("cat", M::OneToOne, P::Injective, true, none(), F::None);
  add("slice", M::OneToOne, P::Injective, true, none(), F::None);
  add("select", M::OneToOne, P::Injective, true, none(), F::None);
  add("split", M::OneToOne, P::Injective, true, none(), F::None, 0, 0);
  add("split_with_sizes", M::OneToOne, P::Injective, true, none(), F::None, 0, 0);
  add("unbind", M::OneToOne, P::Injective, true, none(), F::None, 0, 0);
  add("constant_pad_nd", M::OneToOne, P::Injective, true, none(), F::None);
  add("as_strided", M::OneToOne, P::Injective, true, none(), F::None);
  // Sources: no tensor input; their values are known at compile time.
  for (const char* n : {"arange", "full", "scalar_tensor", "zeros", "ones"})
    add(n, M::OneToOne, P::ElemWise, true, none(), F::None);
  // ---- One-to-Many ----
  add("expand", M::OneToMany, P::Broadcast, true, none(), F::None);
  add("repeat", M::OneToMany, P::Injective, true, none(), F::None);
  add("embedding", M::OneToMany, P::Injective, true, none(), F::None);
  add("index_select", M::OneToMany, P::Injective, true, none(), F::None);
  add("gather", M::OneToMany, P::Injective, true, none(), F::None);
  // ---- Many-to-Many ----
  add("convolution", M::ManyToMany, P::OutEWiseFusable, false, linear(), F::Convolution);
  // NCHW[x]c convolution (csrc/target/cpu/layout): input [N][C/x][H][W][x], weight packed by the op below.
  add("conv2d_nchwc", M::ManyToMany, P::OutEWiseFusable, false, none(), F::ConvolutionBlocked);
  // A groups-1 conv2d_nchwc + activation + depthwise conv2d_nchwc in one kernel
  // (layout/fuse_expand_depthwise): inputs (x, first packed weight, first bias, depthwise packed
  // weight, depthwise bias); outputs y and, after layout/fuse_channel_mean, y's mean over H and W.
  add("conv2d_nchwc_expand_dw", M::ManyToMany, P::OutEWiseFusable, false, none(), F::ConvolutionBlocked, 0, 0);
  // The same followed by a 1x1 projection conv2d_nchwc over the depthwise output
  // (layout/fuse_depthwise_project): inputs as above, then the projection's packed weight and bias.
  add("conv2d_nchwc_expand_dw_project", M::ManyToMany, P::OutEWiseFusable, false, none(), F::ConvolutionBlocked);
  // A convolution with bias, residual add and ReLU/ReLU6 in one kernel generated for its weights
  // (csrc/target/cuda/graph/fuse_sparse_convs): inputs (x, weight, bias, residual), NCHW/KCRS.
  add("sparse_conv2d", M::ManyToMany, P::OutEWiseFusable, false, none(), F::Convolution);
  // Pooling on NCHW[x]c activations (csrc/target/cpu/layout), attributes as max_pool2d / avg_pool2d.
  add("max_pool2d_nchwc", M::ManyToMany, P::OutEWiseFusable, false, none(), F::Pool);
  add("avg_pool2d_nchwc", M::ManyToMany, P::OutEWiseFusable, false, none(), F::Pool);
  // KCRS -> packed weight of conv2d_nchwc; only ever sees compile-time operands (constant-folded).
  add("conv2d_nchwc_pack_weight", M::Shuffle, P::Opaque, false, none(), F::None);
  // conv2d_nchwc_pack_weight's output -> the AMX (bf16x6) packing of a conv
  // (csrc/target/cpu/layout/use_amx_convs); only sees compile-time operands.
  add("conv2d_nchwc_repack_bf16x6", M::Shuffle, P::Opaque, false, none(), F::None);
  // GEMM with a compile-time B packed by the op below (csrc/target/cpu/layout/pack_gemm_weights): inputs
  // (A [M, K], packed B, optional bias [N]), attributes n, nr, alpha, packing ("bf16x6" on AMX; absent:
  // fp32 panels of width nr).
  add("mm_packed", M::ManyToMany, P::OutEWiseFusable, false, none(), F::MatMul);
  // B [K, N] -> the micro-kernel's panels (kernels::sgemm_pack_b); only sees compile-time operands.
  add("gemm_pack_b", M::Shuffle, P::Opaque, false, none(), F::None);
  add("addmm", M::ManyToMany, P::OutEWiseFusable, false, linear(), F::MatMul);
  add("mm", M::ManyToMany, P::OutEWiseFusable, false, linear(), F::MatMul);
  add("bmm", M::ManyToMany, P::OutEWiseFusable, false, linear(), F::MatMul);
  add("baddbmm", M::ManyToMany, P::OutEWiseFusable, false, linear(), F::MatMul);
  add("_scaled_dot_product_flash_attention_for_cpu", M::ManyToMany, P::Opaque, false, none(), F::Attention, 0, 2);
  add("max_pool2d_with_indices", M::ManyToMany, P::OutEWiseFusable, false, none(), F::Pool, 0, 2);
  add("avg_pool2d", M::ManyToMany, P::OutEWiseFusable, false, reduce_sum(), F::Pool);
  add("_adaptive_avg_pool2d", M::ManyToMany, P::OutEWiseFusable, false, reduce_sum(), F::PerInput, 1);
  add("sum", M::ManyToMany, P::CommReduce, false, reduce_sum(), F::PerInput, 1);
  add("mean", M::ManyToMany, P::CommReduce, false, reduce_sum(), F::PerInput, 1);
  add("amax", M::ManyToMany, P::CommReduce, false, MathProps{true, true, {}, {}}, F::PerInput, 1);
  add("amin", M::ManyToMany, P::CommReduce, false, MathProps{true, true, {}, {}}, F::PerInput, 1);
  add("prod", M::ManyToMany, P::CommReduce, false, none(), F::PerInput, 1);
  add("var", M::ManyToMany, P::CommReduce, false, none(), F::PerInput, 3);
  add("argmax", M::ManyToMany, P::CommReduce, false, none(), F::PerInput, 1);
  add("argmin", M::ManyToMany, P::CommReduce, false, none(), F::PerInput, 1);
  add("cumsum", M::ManyToMany, P::Opaque, false, none(), F::PerInput, 1);
  add("_softmax", M::ManyToMany, P::Opaque, false, none(), F::PerInput, 5);
  add("_log_softmax", M::ManyToMany, P::Opaque, false, none(), F::PerInput, 5);
  add("native_layer_norm", M::ManyToMany, P::Opaque, false, none(), F::PerInput, 8, 3);
  add("native_group_norm", M::ManyToMany, P::Opaque, false, none(), F::PerInput, 8, 3);
  // ---- Reorganize ----
  for (const char* n : {"view", "_unsafe_view", "reshape", "squeeze", "unsqueeze", "flatten"})
    add(n, M::Reorganize, P::Injective, true, none(), F::None);
  // ---- Shuffle ----
  for (const char* n : {"permute", "transpose", "t"})
    add(n, M::Shuffle, P::Injective, true, none(), F::None);
  return t;
}

}  // namespace

const std::vector<OpInfo>& all_ops() {
  static const std::vector<OpInfo> table = build_table();
  return table;
}

const OpInfo* find_op(const std::string& name) {
  static const std::unordered_map<std::string, const OpInfo*> index = [] {
    std::unordered_map<std::string, const OpInfo*> m;
    for (const auto& op : all_ops()) m.emplace(op.name, &op);
    return m;
  }();
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

int64_t node_flops(const Graph& g, const Node& n) {
  const OpInfo* info = n.info ? n.info : find_op(n.op);
  if (!info) return 0;
  auto out_numel = [&]() { return n.outputs.empty() ? 0 : g.value(n.outputs[0]).numel(); };
  auto in_numel = [&]() { return n.inputs.empty() || n.inputs[0] < 0 ? 0 : g.value(n.inputs[0]).numel(); };
  switch (info->flop_model) {
    case FlopModel::None: return 0;
    case FlopModel::PerOutput: return static_cast<int64_t>(info->flops_per_element * static_cast<double>(out_numel()));
    case FlopModel::PerInput: return static_cast<int64_t>(info->flops_per_element * static_cast<double>(in_numel()));
    case FlopModel::ConvolutionBlocked: {
      int64_t per_out = 2;
      const auto w = n.attr_ints("weight_shape");  // the original [K, C/groups, R, S]
      for (size_t i = 1; i < w.size(); ++i) per_out *= w[i];
      int64_t flops = 0;
      if (n.has_attr("project_weight_shape")) {  // the output is the projection's: [N, Kb, OH, OW, b]
        const auto wp = n.attr_ints("project_weight_shape");
        const auto& y = g.value(n.outputs[0]).shape;
        const int64_t positions = y.at(0) * y.at(2) * y.at(3);
        flops = per_out * w.at(0) * positions + 2 * wp.at(0) * wp.at(1) * positions;
      } else {
        flops = per_out * out_numel();
      }
      if (n.has_attr("expand_weight_shape")) {  // the fused first conv, over its output positions
        const auto we = n.attr_ints("expand_weight_shape");
        const auto& x = g.value(n.inputs[0]).shape;  // [N, Cb, H, W, b]
        const auto st = n.attr_ints("expand_stride", {1}), pd = n.attr_ints("expand_padding", {0}),
                   dl = n.attr_ints("expand_dilation", {1});
        auto out = [&](size_t i) {
          return conv_out_size(x.at(2 + i), at_or(pd, i, 0), at_or(dl, i, 1), we.at(2 + i), at_or(st, i, 1));
        };
        flops += 2 * we.at(0) * we.at(1) * we.at(2) * we.at(3) * x.at(0) * out(0) * out(1);
      }
      return flops;
    }
    case FlopModel::Convolution: {
      const auto& w = g.value(n.inputs[1]).shape;  // [K, C/groups, R, S...]
      int64_t per_out = 2;
      for (size_t i = 1; i < w.size(); ++i) per_out *= w[i];
      return per_out * out_numel();
    }
    case FlopModel::MatMul: {
      // inner dimension: last dim of the first matrix operand
      int a = n.op == "addmm" || n.op == "baddbmm" ? n.inputs[1] : n.inputs[0];
      return 2 * g.value(a).shape.back() * out_numel();
    }
    case FlopModel::Attention: {
      const auto& q = g.value(n.inputs[0]).shape;  // [B, H, Lq, D]
      const auto& k = g.value(n.inputs[1]).shape;  // [B, H, Lk, D]
      return 4 * q[0] * q[1] * q[2] * k[2] * q[3];
    }
    case FlopModel::Pool: {
      auto ks = n.attr_ints("kernel_size");
      int64_t area = 1;
      for (auto k : ks) area *= k;
      if (ks.size() == 1) area *= ks[0];
      return area * out_numel();
    }
  }
  return 0;
}

int64_t node_irs_bytes(const Graph& g, const Node& n) {
  int64_t b = 0;
  for (int v : n.outputs) b += g.value(v).nbytes();
  return b;
}

}  // namespace dnnfusion::ecg
