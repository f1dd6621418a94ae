#include "target/cpu/layout/use_amx_convs.h"

#include "kernels/cpu/conv_bf16x6.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "rewrite/graph_edit.h"
#include "target/cpu/ops/nchwc_conv_shape.h"

namespace dnnfusion::layout {

using ecg::Graph;
using ecg::Node;

namespace {

bool eligible(const Graph& g, const std::vector<char>& is_const, const Node& n) {
  if (n.op != "conv2d_nchwc" || n.inputs.size() < 2 || n.input_or_absent(3) >= 0 || n.outputs.size() != 1) return false;
  if (n.attr_int("winograd", 0) != 0 || n.attr_int("amx", 0) != 0 || n.attr_int("groups", 1) != 1) return false;
  if (n.attr_ints("weight_shape", {}).size() != 4 || g.value(n.inputs[0]).shape.size() != 5) return false;
  const int W = n.inputs[1];
  if (!is_const[W] || g.value(W).dtype != DType::Float32) return false;
  const kernels::Conv2dShape s = target::cpu::nchwc_conv_shape(g, n, true);
  return amx_conv_pays_off(s) && kernels::conv_bf16x6_supported(s, static_cast<int>(n.attr_int("ic_bn", 0)),
                                                                 static_cast<int>(n.attr_int("oc_bn", 0)));
}

}  // namespace

bool amx_conv_pays_off(const kernels::Conv2dShape& s) {
  const int64_t rows = s.N * s.OH() * s.OW();
  const int64_t min_rows = s.K >= kAmxConvWideOutChannels ? kAmxConvMinRows / 2 : kAmxConvMinRows;
  return s.K >= kAmxConvMinOutChannels && rows >= min_rows && s.C >= kAmxConvMinChannels;
}

Graph use_amx_convs(const Graph& g, const AmxChoice& amx, AmxChoiceStats* stats) {
  if (stats) *stats = {};
  if (amx.mode == CompileOptions::Amx::Off || !kernels::bf16x6_available()) return g;
  const auto is_const = rewrite::compile_time_values(g);
  rewrite::GraphRebuilder rb(g);
  AmxChoiceStats st;
  for (const Node& n : g.nodes()) {
    if (!eligible(g, is_const, n)) {
      rb.copy_node(n.id);
      continue;
    }
    const kernels::Conv2dShape s = target::cpu::nchwc_conv_shape(g, n, true);
    auto measure = [&](const kernels::Parallel& par) { return measure_amx_conv(s, target::cpu::nchwc_knobs(n), par); };
    if (!take_amx(amx, measure, &st)) {
      rb.copy_node(n.id);
      continue;
    }
    ecg::AttrMap attrs = n.attrs;
    attrs["amx"] = int64_t{1};
    rb.origin = n.origin;
    const int wp = rb.add("conv2d_nchwc_repack_bf16x6", {rb.map(n.inputs[1])},
                          {kernels::conv_bf16x6_packed_weight_floats(s)}, DType::Float32, attrs);
    std::vector<int> ins{rb.map(n.inputs[0]), wp};
    if (n.input_or_absent(2) >= 0) ins.push_back(rb.map(n.inputs[2]));
    const int y = rb.add("conv2d_nchwc", ins, g.value(n.outputs[0]).shape, DType::Float32, attrs);
    rb.replace(n.outputs[0], y);
  }
  if (stats) *stats = st;
  return st.taken ? rb.finish() : g;
}

}  // namespace dnnfusion::layout
