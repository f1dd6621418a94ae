#include "target/cuda/graph/sparse_conv_chains.h"

#include <cmath>

#include "common/error.h"
#include "runtime/op_attrs.h"
#include "target/cuda/sparse_conv/conv_template.h"

namespace dnnfusion::cuda {

using ecg::Graph;
using ecg::Node;

namespace {

bool compile_time(const Graph& g, int v) { return v >= 0 && g.value(v).is_compile_time() && g.value(v).data; }

bool f32(const Graph& g, int v) { return v >= 0 && g.value(v).dtype == DType::Float32; }

std::optional<Activation> activation_of(const Node& n) {
  if (n.op == "relu") return Activation::relu;
  if (n.op == "hardtanh" && n.attr_float("min_val", -1.0) == 0.0 && n.attr_float("max_val", 1.0) == 6.0)
    return Activation::relu6;
  if (n.op == "clamp" && n.has_attr("min") && n.has_attr("max") && n.attr_float("min", -1.0) == 0.0 &&
      n.attr_float("max", 0.0) == 6.0)
    return Activation::relu6;
  return std::nullopt;
}

// The structural half of eligibility (no weight data read): what the kernel generator can express.
std::string structural_refusal(const Graph& g, const Node& n) {
  if (n.op != "convolution") return "not a convolution";
  if (n.attr_int("transposed", 0)) return "transposed convolution";
  if (n.inputs.size() < 2 || g.value(n.inputs[0]).shape.size() != 4) return "not a 2-D batched convolution";
  if (n.attr_int("groups", 1) != 1) return "grouped convolution (the sparse kernels need groups = 1)";
  if (!f32(g, n.inputs[0]) || !f32(g, n.inputs[1]) || !f32(g, n.outputs[0])) return "not float32";
  if (!compile_time(g, n.inputs[1])) return "weight not known at compile time";
  const int b = n.input_or_absent(2);
  if (b >= 0 && (!compile_time(g, b) || !f32(g, b))) return "bias not a compile-time float32 tensor";
  for (const char* a : {"output_padding"})
    for (int64_t v : n.attr_ints(a, {0}))
      if (v != 0) return "output_padding";
  try {
    conv_shape_of(g, n).validate();
  } catch (const InvalidInput& e) {
    return std::string("shape the kernel generator cannot serve: ") + e.what();
  }
  return "";
}

}  // namespace

ConvShape conv_shape_of(const Graph& g, const Node& n) {
  const kernels::Conv2dShape k = runtime::conv2d_shape(g, n);
  ConvShape s;
  s.n = k.N, s.c = k.C, s.h = k.H, s.w = k.W, s.k = k.K, s.r = k.R, s.s = k.S;
  s.stride_h = k.stride_h, s.stride_w = k.stride_w, s.pad_h = k.pad_h, s.pad_w = k.pad_w;
  s.dil_h = k.dil_h, s.dil_w = k.dil_w;
  return s;
}

double weight_density(const Graph& g, const Node& n) {
  const ecg::Value& w = g.value(n.inputs[1]);
  const float* p = static_cast<const float*>(w.data);
  const int64_t count = w.numel();
  int64_t nonzero = 0;
  for (int64_t i = 0; i < count; ++i) nonzero += p[i] != 0.0f;
  return count ? double(nonzero) / double(count) : 0.0;
}

std::string sparse_conv_refusal(const Graph& g, const Node& n, const CompileOptions& opts) {
  std::string why = structural_refusal(g, n);
  if (!why.empty()) return why;
  const ConvShape s = conv_shape_of(g, n);
  const int64_t fmas = s.weight_count() * default_tile(s).fmas_per_weight();
  const int64_t limit = std::min<int64_t>(opts.sparse_max_weights, kMaxTemplateFmas);
  if (fmas > limit)
    return "weights " + std::to_string(s.weight_count()) + " exceed the generated-kernel limit " +
           std::to_string(limit) + " (option sparse_max_weights; the template's compile time grows with it)";
  const double density = weight_density(g, n);
  if (1.0 - density < opts.sparse_threshold) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "dense: %.1f%% zeros, below sparse_threshold %.0f%%", 100 * (1 - density),
                  100 * opts.sparse_threshold);
    return buf;
  }
  return "";
}

std::optional<SparseChain> chain_of(const Graph& g, int v, const CompileOptions& opts, bool through_batchnorm) {
  if (v < 0 || g.value(v).producer < 0 || !f32(g, v)) return std::nullopt;
  const Node& n = g.node(g.value(v).producer);
  if (n.op == "convolution") {
    if (n.outputs[0] != v || !sparse_conv_refusal(g, n, opts).empty()) return std::nullopt;
    return SparseChain{n.id, -1, Activation::none, -1};
  }
  if (n.op == "_native_batch_norm_legit_no_training") {
    if (!through_batchnorm || n.outputs[0] != v) return std::nullopt;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= 0 && !compile_time(g, n.inputs[i])) return std::nullopt;
    auto c = chain_of(g, n.inputs[0], opts, true);
    if (!c || c->residual >= 0 || c->act != Activation::none || g.node(c->conv).outputs[0] != n.inputs[0])
      return std::nullopt;
    return SparseChain{c->conv, -1, Activation::none, n.inputs[0]};
  }
  if (n.op == "add") {
    if (n.inputs.size() != 2 || n.attr_float("alpha", 1.0) != 1.0) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const int a = n.inputs[side], r = n.inputs[1 - side];
      if (!f32(g, r) || g.value(r).shape != g.value(v).shape || g.value(a).shape != g.value(v).shape) continue;
      auto c = chain_of(g, a, opts, through_batchnorm);
      if (c && c->residual < 0 && c->act == Activation::none) return SparseChain{c->conv, r, Activation::none, a};
    }
    return std::nullopt;
  }
  if (auto act = activation_of(n)) {
    auto c = chain_of(g, n.inputs[0], opts, through_batchnorm);
    if (!c || c->act != Activation::none) return std::nullopt;
    return SparseChain{c->conv, c->residual, *act, n.inputs[0]};
  }
  return std::nullopt;
}

std::string chain_refusal(const Graph& g, const Node& n, const CompileOptions& opts) {
  if (n.op == "convolution") return sparse_conv_refusal(g, n, opts);
  if (n.outputs.empty()) return "no output";
  if (chain_of(g, n.outputs[0], opts, true)) return "";
  return "not after a sparse convolution (the cuda target runs sparse convolutions and their bias, batch norm, "
         "residual add and ReLU/ReLU6 epilogues; everything else stays on ATen)";
}

}  // namespace dnnfusion::cuda
