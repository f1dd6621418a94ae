#include "codegen/expr_rules.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "common/error.h"

namespace dnnfusion::codegen {

namespace {

const std::set<std::string>& unary_ops() {
  static const std::set<std::string> s = {
      "relu", "hardtanh", "clamp", "sigmoid", "tanh", "exp", "sqrt", "floor", "ceil", "round", "sign", "erf",
      "leaky_relu", "hardswish", "hardsigmoid", "silu", "gelu", "log", "rsqrt", "reciprocal", "neg", "abs",
      "elu", "softplus", "mish", "sin", "cos", "square", "_to_copy"};
  return s;
}

const std::set<std::string>& binary_ops() {
  static const std::set<std::string> s = {"add", "sub", "rsub", "mul", "div", "maximum", "minimum", "pow"};
  return s;
}

bool f32(const ecg::Graph& g, int v) { return v >= 0 && g.value(v).dtype == DType::Float32; }

std::string call(const char* f, const std::string& a) { return std::string(f) + "(" + a + ")"; }

}  // namespace

std::string float_literal(double v) {
  if (std::isnan(v)) return "__builtin_nanf(\"\")";
  if (std::isinf(v)) return v > 0 ? "__builtin_inff()" : "(-__builtin_inff())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(v)));
  return std::string("(") + buf + ")";
}

std::string inline_op_support(const ecg::Graph& g, const ecg::Node& n) {
  if (n.outputs.empty() || !f32(g, n.outputs[0])) return "output is not float32";
  if (unary_ops().count(n.op)) {
    if (n.inputs.size() != 1 || !f32(g, n.inputs[0])) return "operand is not float32";
    if (n.op == "gelu" && n.has_attr("approximate") && n.attr_str("approximate") != "none" &&
        n.attr_str("approximate") != "tanh")
      return "gelu approximation";
    if (n.op == "elu" && (n.attr_float("scale", 1.0) != 1.0 || n.attr_float("input_scale", 1.0) != 1.0)) return "elu scale";
    if (n.op == "round" && n.attr_int("decimals", 0) != 0) return "round with decimals";
    return "";
  }
  if (binary_ops().count(n.op)) {
    if (n.inputs.size() != 2 || !f32(g, n.inputs[0]) || !f32(g, n.inputs[1])) return "operands are not float32";
    if (n.has_attr("compute_dtype") && n.attr_str("compute_dtype") != "float32") return "computes in another dtype";
    if (n.op == "div" && n.has_attr("rounding_mode")) return "div with rounding_mode";
    return "";
  }
  if (n.op == "where") {
    if (n.inputs.size() != 3 || n.inputs[0] < 0 || g.value(n.inputs[0]).dtype != DType::Bool || !f32(g, n.inputs[1]) ||
        !f32(g, n.inputs[2]))
      return "where needs a bool condition and float32 values";
    return "";
  }
  if (n.op == "masked_fill") {
    if (n.inputs.size() != 3 || !f32(g, n.inputs[0]) || n.inputs[1] < 0 || g.value(n.inputs[1]).dtype != DType::Bool ||
        !f32(g, n.inputs[2]))
      return "masked_fill needs float32 values and a bool mask";
    return "";
  }
  if (n.op == "_native_batch_norm_legit_no_training") {
    if (!f32(g, n.inputs[0]) || g.value(n.inputs[0]).shape.size() < 2) return "batch_norm input";
    for (size_t i = 1; i < 5; ++i)
      if (n.input_or_absent(i) >= 0 && (!f32(g, n.inputs[i]) || g.value(n.inputs[i]).shape.size() != 1)) return "batch_norm parameters";
    if (n.input_or_absent(3) < 0 || n.input_or_absent(4) < 0) return "batch_norm without running statistics";
    for (size_t s = 1; s < n.outputs.size(); ++s) {
      const auto& v = g.value(n.outputs[s]);
      if (!v.users.empty() || v.is_output) return "batch_norm statistics outputs are used";
    }
    return "";
  }
  return "no inline code-generation rule for " + n.op;
}

std::string emit_elementwise(const ecg::Graph& g, const ecg::Node& n, const std::vector<std::string>& in) {
  const std::string& op = n.op;
  const std::string x = in.empty() ? "" : in[0];
  const double inf = std::numeric_limits<double>::infinity();
  auto lit = [](double v) { return float_literal(v); };
  // Unary rules. Selects are written so that a NaN operand falls through to the result.
  if (op == "relu") return "(" + x + " < 0.f ? 0.f : " + x + ")";
  if (op == "hardtanh" || op == "clamp") {
    const double lo = op == "hardtanh" ? n.attr_float("min_val", -1.0) : n.attr_float("min", -inf);
    const double hi = op == "hardtanh" ? n.attr_float("max_val", 1.0) : n.attr_float("max", inf);
    std::string e = x;
    if (lo != -inf) e = "(" + e + " < " + lit(lo) + " ? " + lit(lo) + " : " + e + ")";
    if (hi != inf) e = "(" + e + " > " + lit(hi) + " ? " + lit(hi) + " : " + e + ")";
    return e;
  }
  // sigmoid and silu need exp(-x) only where it changes 1 + exp(-x): dnnf_exp_clamped skips most
  // of exp's range handling (silu 1.6x faster per element on AVX-512; results differ from torch's
  // only for x in (-88.8, -87), by less than 1e-36).
  if (op == "sigmoid") return "(1.f / (1.f + dnnf_exp_clamped(-" + x + ")))";
  if (op == "tanh") return call("dnnf_tanh", x);
  if (op == "exp") return call("dnnf_exp", x);
  if (op == "sqrt") return call("__builtin_sqrtf", x);
  if (op == "floor") return call("__builtin_floorf", x);
  if (op == "ceil") return call("__builtin_ceilf", x);
  if (op == "round") return call("__builtin_nearbyintf", x);
  if (op == "sign") return "(" + x + " > 0.f ? 1.f : (" + x + " < 0.f ? -1.f : " + x + "))";
  if (op == "erf") return call("dnnf_erf", x);
  if (op == "leaky_relu") return "(" + x + " > 0.f ? " + x + " : " + lit(n.attr_float("negative_slope", 0.01)) + " * " + x + ")";
  if (op == "hardswish") return "(" + x + " * dnnf_clamp06(" + x + " + 3.f) * (1.f / 6.f))";
  if (op == "hardsigmoid") return "(dnnf_clamp06(" + x + " + 3.f) * (1.f / 6.f))";
  if (op == "silu") return "(" + x + " / (1.f + dnnf_exp_clamped(-" + x + ")))";
  if (op == "gelu") {
    if (n.has_attr("approximate") && n.attr_str("approximate") == "tanh")
      return "(0.5f * " + x + " * (1.f + dnnf_tanh(0.7978845608028654f * (" + x + " + 0.044715f * " + x + " * " + x + " * " + x + "))))";
    return "(0.5f * " + x + " * (1.f + dnnf_erf(" + x + " * 0.7071067811865476f)))";
  }
  if (op == "log") return call("std::log", x);
  if (op == "rsqrt") return "(1.f / __builtin_sqrtf(" + x + "))";
  if (op == "reciprocal") return "(1.f / " + x + ")";
  if (op == "neg") return "(-" + x + ")";
  if (op == "abs") return call("__builtin_fabsf", x);
  if (op == "elu") return "(" + x + " > 0.f ? " + x + " : " + lit(n.attr_float("alpha", 1.0)) + " * std::expm1(" + x + "))";
  if (op == "softplus") {
    const std::string b = lit(n.attr_float("beta", 1.0)), t = lit(n.attr_float("threshold", 20.0));
    return "(" + x + " * " + b + " > " + t + " ? " + x + " : std::log1p(std::exp(" + b + " * " + x + ")) / " + b + ")";
  }
  if (op == "mish") return "(" + x + " * dnnf_tanh(std::log1p(std::exp(" + x + "))))";
  if (op == "sin") return call("std::sin", x);
  if (op == "cos") return call("std::cos", x);
  if (op == "square") return "(" + x + " * " + x + ")";
  if (op == "_to_copy") return x;
  // Binary rules (broadcasting is in the operands' index arithmetic, not here).
  const std::string y = in.size() > 1 ? in[1] : "";
  const double alpha = n.attr_float("alpha", 1.0);
  auto scaled = [&](const std::string& v) { return alpha == 1.0 ? v : "(" + lit(alpha) + " * " + v + ")"; };
  if (op == "add") return "(" + x + " + " + scaled(y) + ")";
  if (op == "sub") return "(" + x + " - " + scaled(y) + ")";
  if (op == "rsub") return "(" + y + " - " + scaled(x) + ")";
  if (op == "mul") return "(" + x + " * " + y + ")";
  if (op == "div") return "(" + x + " / " + y + ")";
  if (op == "maximum") return "((" + x + " > " + y + " || " + x + " != " + x + ") ? " + x + " : " + y + ")";
  if (op == "minimum") return "((" + x + " < " + y + " || " + x + " != " + x + ") ? " + x + " : " + y + ")";
  if (op == "pow") return "dnnf_pow(" + x + ", " + y + ")";
  if (op == "where") return "(" + in[0] + " ? " + in[1] + " : " + in[2] + ")";
  if (op == "masked_fill") return "(" + in[1] + " ? " + in[2] + " : " + in[0] + ")";
  if (op == "_native_batch_norm_legit_no_training") {
    // inputs: x, weight?, bias?, running_mean, running_var
    std::string e = "((" + x + " - " + in[3] + ") * (1.f / __builtin_sqrtf(" + in[4] + " + " + lit(n.attr_float("eps")) + ")))";
    if (!in[1].empty()) e = "(" + e + " * " + in[1] + ")";
    if (!in[2].empty()) e = "(" + e + " + " + in[2] + ")";
    return e;
  }
  DNNF_THROW("no inline code-generation rule for op ", op);
}

const std::string& generated_prelude() {
  static const std::string s = R"PRELUDE(// Generated by dnnfusion (csrc/codegen). One translation unit per compiled graph.
#include <cmath>
#include <cstdint>
#include <cstring>
extern "C" {
struct dnnf_parallel {
  void* pool;
  void (*parallel_for)(void* pool, int64_t n, int64_t grain,
                       void (*body)(const void* ctx, int64_t begin, int64_t end), const void* ctx);
};
}
namespace {
// exp by range reduction (x = k ln2 + r) and a degree-6 polynomial, for xc already in [-87, 88]:
// branch-free so loops that call it vectorize; ~1 ulp.
inline float dnnf_exp_poly(float xc) {
  const float k = __builtin_rintf(xc * 1.44269504088896341f);
  float r = xc - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
// exp: ~1 ulp on [-87, 88], exact 0 / inf beyond, NaN propagates.
inline float dnnf_exp(float x) {
  const float res = dnnf_exp_poly(x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x));
  return x > 88.72283f ? __builtin_inff() : (x < -103.9f ? 0.f : (x < -87.0f ? 0.f : res));
}
// exp for 1 / (1 + exp(.)): inf above 87 (so silu(-inf) stays NaN and silu(-200) -0, as in torch),
// the input clamped at -87 below (exp(-87) and exp(-inf) give the same 1 + exp), and NaN
// propagates; one select instead of dnnf_exp's range handling.
inline float dnnf_exp_clamped(float x) {
  const float res = dnnf_exp_poly(x > 87.0f ? 87.0f : (x < -87.0f ? -87.0f : x));
  return x > 87.0f ? __builtin_inff() : res;
}
inline float dnnf_tanh(float x) {
  const float ax = __builtin_fabsf(x);
  const float e = dnnf_exp(-2.f * ax);
  const float big = __builtin_copysignf((1.f - e) / (1.f + e), x);
  const float x2 = x * x;
  const float small = x * (1.f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  return ax < 0.0625f ? small : big;
}
// erf: Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7).
inline float dnnf_erf(float x) {
  const float ax = __builtin_fabsf(x);
  const float t = 1.f / (1.f + 0.3275911f * ax);
  const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  return __builtin_copysignf(1.f - poly * dnnf_exp(-ax * ax), x);
}
inline float dnnf_clamp06(float v) { return v < 0.f ? 0.f : (v > 6.f ? 6.f : v); }
// The exponents PyTorch's pow(tensor, scalar) special-cases, computed as it does (x*x*x, 1/x, ...):
// with a constant exponent the branches fold away, and the loop vectorizes instead of calling libm
// per element (GPT-2's tanh-GELU has x**3).
inline float dnnf_pow(float a, float b) {
  if (b == 2.f) return a * a;
  if (b == 3.f) return a * a * a;
  if (b == 0.5f) return __builtin_sqrtf(a);
  if (b == 1.f) return a;
  if (b == -1.f) return 1.f / a;
  if (b == -2.f) return 1.f / (a * a);
  if (b == -0.5f) return 1.f / __builtin_sqrtf(a);
  return std::pow(a, b);
}
}  // namespace
)PRELUDE";
  return s;
}

}  // namespace dnnfusion::codegen
