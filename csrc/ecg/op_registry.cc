#include "ecg/op_registry.h"

#include <unordered_map>

#include "common/error.h"
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

std::vector<OpInfo> build_table() {
  std::vector<OpInfo> t;
  auto add = [&](const char* name, M m, P p, bool removable, MathProps props, F fm, double fpe = 0, int nout = 1) {
    t.push_back(OpInfo{name, m, p, removable, std::move(props), fm, fpe, nout});
  };
  // ---- One-to-One: elementwise unary ----
  for (const char* n : {"relu", "hardtanh", "clamp", "sigmoid", "tanh", "exp", "sqrt", "floor", "ceil", "round",
                        "sign", "erf", "leaky_relu"})
    add(n, M::OneToOne, P::ElemWise, true, monotone(), F::PerOutput, 1);
  for (const char* n : {"hardswish", "hardsigmoid", "silu", "gelu", "log", "rsqrt", "reciprocal", "neg", "abs",
                        "elu", "softplus", "mish", "logical_not", "bitwise_not", "sin", "cos", "square"})
    add(n, M::OneToOne, P::ElemWise, true, none(), F::PerOutput, 4);
  add("_to_copy", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("clone", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("alias", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("lift_fresh_copy", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("contiguous", M::OneToOne, P::ElemWise, true, none(), F::None);
  add("_native_batch_norm_legit_no_training", M::OneToOne, P::Broadcast, true,
      MathProps{false, false, {}, {"convolution", "addmm"}}, F::PerOutput, 2, 3);
  // ---- One-to-One: elementwise binary/ternary (broadcast against weights keeps the type) ----
  add("add", M::OneToOne, P::Broadcast, true, assoc_comm(), F::PerOutput, 1);
  add("mul", M::OneToOne, P::Broadcast, true, assoc_comm({"add", "sub"}), F::PerOutput, 1);
  add("sub", M::OneToOne, P::Broadcast, true, none(), F::PerOutput, 1);
  add("rsub", M::OneToOne, P::Broadcast, true, none(), F::PerOutput, 1);
  add("div", M::OneToOne, P::Broadcast, true, MathProps{false, false, {"add", "sub"}, {}}, F::PerOutput, 1);
  add("maximum", M::OneToOne, P::Broadcast, true, assoc_comm(), F::PerOutput, 1);
  add("minimum", M::OneToOne, P::Broadcast, true, assoc_comm(), F::PerOutput, 1);
  for (const char* n : {"pow", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "bitwise_and",
                        "bitwise_or", "remainder", "floor_divide", "atan2", "where", "masked_fill"})
    add(n, M::OneToOne, P::Broadcast, true, none(), F::PerOutput, 1);
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
  // 1x1 conv2d_nchwc + activation + depthwise conv2d_nchwc in one kernel (layout/fuse_expand_depthwise):
  // inputs (x, expand packed weight, expand bias, depthwise packed weight, depthwise bias).
  add("conv2d_nchwc_expand_dw", M::ManyToMany, P::OutEWiseFusable, false, none(), F::ConvolutionBlocked);
  // Pooling on NCHW[x]c activations (csrc/target/cpu/layout), attributes as max_pool2d / avg_pool2d.
  add("max_pool2d_nchwc", M::ManyToMany, P::OutEWiseFusable, false, none(), F::Pool);
  add("avg_pool2d_nchwc", M::ManyToMany, P::OutEWiseFusable, false, none(), F::Pool);
  // KCRS -> packed weight of conv2d_nchwc; only ever sees compile-time operands (constant-folded).
  add("conv2d_nchwc_pack_weight", M::Shuffle, P::Opaque, false, none(), F::None);
  // GEMM with a compile-time B packed by the op below (csrc/target/cpu/layout/pack_gemm_weights): inputs
  // (A [M, K], packed B, optional bias [N]), attributes n, nr, alpha.
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
      int64_t flops = per_out * out_numel();
      if (n.has_attr("expand_weight_shape")) {  // the fused 1x1 expand, over the input's positions
        const auto we = n.attr_ints("expand_weight_shape");
        const auto& x = g.value(n.inputs[0]).shape;  // [N, Cb, H, W, b]
        flops += 2 * we.at(0) * we.at(1) * x.at(0) * x.at(2) * x.at(3);
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
