#include "runtime/op_attrs.h"

namespace dnnfusion::runtime {

int64_t at_or(const std::vector<int64_t>& v, size_t i, int64_t dflt) {
  if (v.empty()) return dflt;
  return i < v.size() ? v[i] : v[0];
}

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

}  // namespace dnnfusion::runtime
