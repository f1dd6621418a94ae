#include "runtime/op_attrs.h"

namespace dnnfusion::runtime {

bool cat_skips_operand(const std::vector<int64_t>& operand, const std::vector<int64_t>& out) {
  return operand.size() == 1 && operand[0] == 0 && out.size() != 1;
}

kernels::Conv2dShape conv2d_shape(const ecg::Graph& g, const ecg::Node& n) {
  const auto& x = g.value(n.inputs[0]).shape;
  const auto& w = g.value(n.inputs[1]).shape;
  const bool is1d = x.size() == 3;
  const auto stride = n.attr_ints("stride", {1}), pad = n.attr_ints("padding", {0}), dil = n.attr_ints("dilation", {1});
  kernels::Conv2dShape s{};
  s.N = x[0];
  s.C = x[1];
  s.H = is1d ? 1 : x[2];
  s.W = is1d ? x[2] : x[3];
  s.K = w[0];
  s.R = is1d ? 1 : w[2];
  s.S = is1d ? w[2] : w[3];
  s.stride_h = is1d ? 1 : at_or(stride, 0, 1);
  s.stride_w = is1d ? at_or(stride, 0, 1) : at_or(stride, 1, 1);
  s.pad_h = is1d ? 0 : at_or(pad, 0, 0);
  s.pad_w = is1d ? at_or(pad, 0, 0) : at_or(pad, 1, 0);
  s.dil_h = is1d ? 1 : at_or(dil, 0, 1);
  s.dil_w = is1d ? at_or(dil, 0, 1) : at_or(dil, 1, 1);
  s.groups = n.attr_int("groups", 1);
  return s;
}

namespace {

bool broadcasts_to(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  if (in.size() > out.size()) return false;
  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t a = in[in.size() - 1 - i], b = out[out.size() - 1 - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

}  // namespace

std::string sdpa_unsupported(const ecg::Graph& g, const ecg::Node& n) {
  if (n.inputs.size() < 3 || n.inputs.size() > 4 || n.outputs.empty() || n.outputs.size() > 2)
    return "attention with an unexpected number of operands or results";
  for (int i = 0; i < 3; ++i)
    if (n.inputs[i] < 0 || g.value(n.inputs[i]).dtype != DType::Float32) return "attention on non-float32 inputs";
  for (int o : n.outputs)
    if (g.value(o).dtype != DType::Float32) return "attention with a non-float32 output";
  if (n.attr_float("dropout_p", 0.0) != 0.0) return "attention with dropout_p != 0";
  const auto &q = g.value(n.inputs[0]).shape, &k = g.value(n.inputs[1]).shape, &v = g.value(n.inputs[2]).shape;
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return "attention expects rank-4 query/key/value";
  if (k[0] != q[0] || v[0] != q[0]) return "attention with differing batch sizes";
  // Grouped-query attention (enable_gqa): fewer key/value heads than query heads.
  if (k[1] != q[1] || v[1] != q[1])
    return "attention with " + std::to_string(k[1]) + " key/value heads for " + std::to_string(q[1]) +
           " query heads (grouped-query attention) is not implemented";
  if (k[3] != q[3] || v[2] != k[2]) return "attention key/value shapes do not match the query";
  if (g.value(n.outputs[0]).shape != std::vector<int64_t>{q[0], q[1], q[2], v[3]})
    return "attention output is not [B, H, Lq, Dv]";
  if (n.outputs.size() > 1) {
    const int64_t lse = g.value(n.outputs[1]).numel();
    if (lse != 0 && lse != q[0] * q[1] * q[2]) return "attention logsumexp output is neither empty nor [B, H, Lq]";
  }
  const int m = n.input_or_absent(3);
  if (m >= 0) {
    if (g.value(m).dtype != DType::Float32 && g.value(m).dtype != DType::Bool)
      return "attention mask dtype must be float32 or bool";
    if (!broadcasts_to(g.value(m).shape, {q[0], q[1], q[2], k[2]})) return "attention mask does not broadcast to [B, H, Lq, Lk]";
  }
  return "";
}

}  // namespace dnnfusion::runtime
