#include "target/cpu/ops/nchwc_conv_shape.h"

#include "common/conv_geometry.h"

namespace dnnfusion::target::cpu {

kernels::Conv2dShape nchwc_conv_shape(const ecg::Graph& g, const ecg::Node& n, bool with_input, const std::string& prefix) {
  const auto ws = n.attr_ints(prefix + "weight_shape");
  auto stride = n.attr_ints(prefix + "stride", {1}), pad = n.attr_ints(prefix + "padding", {0}),
       dil = n.attr_ints(prefix + "dilation", {1});
  kernels::Conv2dShape s{};
  s.C = n.attr_int(prefix + "in_channels");
  s.K = ws.at(0);
  s.R = ws.at(2);
  s.S = ws.at(3);
  s.stride_h = at_or(stride, 0, 1);
  s.stride_w = at_or(stride, 1, 1);
  s.pad_h = at_or(pad, 0, 0);
  s.pad_w = at_or(pad, 1, 0);
  s.dil_h = at_or(dil, 0, 1);
  s.dil_w = at_or(dil, 1, 1);
  s.groups = n.attr_int(prefix + "groups", 1);
  if (with_input) {
    const auto& x = g.value(n.inputs[0]).shape;
    s.N = x[0];
    s.H = x[2];
    s.W = x[3];
  } else {  // packing depends on channels and taps only: any input the kernel covers will do
    s.N = 1;
    s.H = (s.R - 1) * s.dil_h + 1;
    s.W = (s.S - 1) * s.dil_w + 1;
  }
  return s;
}

kernels::ConvNchwcKnobs nchwc_knobs(const ecg::Node& n) {
  kernels::ConvNchwcKnobs k;
  k.ic_bn = static_cast<int>(n.attr_int("ic_bn"));
  k.oc_bn = static_cast<int>(n.attr_int("oc_bn"));
  k.reg_n = static_cast<int>(n.attr_int("reg_n"));
  k.unroll_ker = n.attr_int("unroll_ker", 0) != 0;
  k.winograd = static_cast<int>(n.attr_int("winograd", 0));
  k.amx = n.attr_int("amx", 0) != 0;
  return k;
}

}  // namespace dnnfusion::target::cpu
