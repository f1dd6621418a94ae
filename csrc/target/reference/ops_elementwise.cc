// The reference target's elementwise ops — unary (with their attributes), binary (broadcasting,
// alpha, compute_dtype, div's rounding_mode), where and masked_fill — bound to
// reference::unary / binary / where, the same op set and semantics as the cpu target's binding.
// Precondition of run(): check() returned "" for the node; every operand and output is a
// contiguous buffer of the graph's shape and dtype. Postcondition: output 0 holds op(operands)
// converted to the output dtype, each element computed on its own; an operand broadcasts through
// zero strides (a size-1 dim, a missing leading dim, a 0-d scalar).
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "runtime/op_attrs.h"
#include "target/reference/reference_kernels.h"

namespace dnnfusion::target::reference {

using namespace runtime;  // the kernel contract (OpKernel, KernelCall) and its helpers
namespace ref = ::dnnfusion::reference;

using ecg::Graph;
using ecg::Node;
using kernels::BinaryOp;
using kernels::StridedArg;
using kernels::UnaryAttrs;
using kernels::UnaryOp;

namespace {


bool in_all_types(DType t) {
  for (DType a : kAllTypes)
    if (a == t) return true;
  return false;
}

// Strides of `in` broadcast over `out` (numpy rules, aligned right).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  const auto cs = contiguous_strides(in);
  std::vector<int64_t> s(out.size(), 0);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : cs[i];
  return s;
}

StridedArg arg(const KernelCall& c, size_t i) {
  const auto& v = c.g.value(c.n.inputs[i]);
  return StridedArg{c.in[i], v.dtype, broadcast_strides(v.shape, c.g.value(c.n.outputs[0]).shape)};
}

// Every operand broadcasts to output 0, and every dtype has a reference path.
std::string check_broadcast(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1) return n.op + " with " + std::to_string(n.outputs.size()) + " outputs (expected 1)";
  const auto& out = g.value(n.outputs[0]).shape;
  for (int v : n.inputs) {
    const auto& s = g.value(v).shape;
    if (s.size() > out.size()) return "operand rank exceeds the output rank";
    for (size_t i = 0; i < s.size(); ++i) {
      const int64_t o = out[out.size() - s.size() + i];
      if (s[i] != o && s[i] != 1) return "operand shape " + ecg::shape_str(s) + " does not broadcast to " + ecg::shape_str(out);
    }
  }
  return require_dtypes(g, n, kAllTypes);
}

std::string check_operands(const Node& n, size_t count) {
  if (n.inputs.size() != count) return n.op + " expects " + std::to_string(count) + " tensor operands";
  for (int v : n.inputs)
    if (v < 0) return n.op + " with an absent operand";
  return "";
}

// ---- unary ----
const std::unordered_map<std::string, UnaryOp>& unary_ops() {
  static const std::unordered_map<std::string, UnaryOp> m = {
      {"relu", UnaryOp::Relu},         {"hardtanh", UnaryOp::Hardtanh},       {"clamp", UnaryOp::Clamp},
      {"hardswish", UnaryOp::Hardswish}, {"hardsigmoid", UnaryOp::Hardsigmoid}, {"sigmoid", UnaryOp::Sigmoid},
      {"silu", UnaryOp::Silu},         {"gelu", UnaryOp::Gelu},               {"tanh", UnaryOp::Tanh},
      {"exp", UnaryOp::Exp},           {"log", UnaryOp::Log},                 {"sqrt", UnaryOp::Sqrt},
      {"rsqrt", UnaryOp::Rsqrt},       {"reciprocal", UnaryOp::Reciprocal},   {"neg", UnaryOp::Neg},
      {"abs", UnaryOp::Abs},           {"erf", UnaryOp::Erf},                 {"leaky_relu", UnaryOp::LeakyRelu},
      {"elu", UnaryOp::Elu},           {"softplus", UnaryOp::Softplus},       {"mish", UnaryOp::Mish},
      {"logical_not", UnaryOp::LogicalNot}, {"bitwise_not", UnaryOp::LogicalNot}, {"sign", UnaryOp::Sign},
      {"square", UnaryOp::Square},     {"sin", UnaryOp::Sin},                 {"cos", UnaryOp::Cos},
      {"floor", UnaryOp::Floor},       {"ceil", UnaryOp::Ceil},               {"round", UnaryOp::Round},
      {"_to_copy", UnaryOp::Identity}};
  return m;
}

// The op and its attributes, with ATen's defaults for absent ones.
UnaryOp unary_params(const Node& n, UnaryAttrs* at) {
  const double inf = std::numeric_limits<double>::infinity();
  const UnaryOp op = unary_ops().at(n.op);
  switch (op) {
    case UnaryOp::Hardtanh: *at = {n.attr_float("min_val", -1.0), n.attr_float("max_val", 1.0)}; break;
    case UnaryOp::Clamp: *at = {n.attr_float("min", -inf), n.attr_float("max", inf)}; break;
    case UnaryOp::LeakyRelu: at->a = n.attr_float("negative_slope", 0.01); break;
    case UnaryOp::Elu: at->a = n.attr_float("alpha", 1.0); break;
    case UnaryOp::Softplus: *at = {n.attr_float("beta", 1.0), n.attr_float("threshold", 20.0)}; break;
    case UnaryOp::Gelu:
      if (n.has_attr("approximate") && n.attr_str("approximate") == "tanh") return UnaryOp::GeluTanh;
      break;
    default: break;
  }
  return op;
}

// The ops that keep integral values integral; the rest are defined on floating inputs only.
bool takes_integral(const std::string& op) {
  for (const char* o : {"_to_copy", "logical_not", "bitwise_not", "relu", "neg", "abs", "sign", "clamp", "hardtanh"})
    if (op == o) return true;
  return false;
}

// Attributes the kernel has no parameter for must hold their no-op value.
std::string check_unary_attrs(const Node& n) {
  if (n.op == "gelu" && n.has_attr("approximate")) {
    const auto& a = n.attr_str("approximate");
    if (a != "none" && a != "tanh") return "gelu approximate='" + a + "' (supported: 'none', 'tanh')";
  }
  if (n.op == "elu" && (n.attr_float("scale", 1.0) != 1.0 || n.attr_float("input_scale", 1.0) != 1.0))
    return "elu with scale/input_scale != 1";
  if (n.op == "round" && n.attr_int("decimals", 0) != 0) return "round with decimals != 0";
  return "";
}

std::string check_unary(const Graph& g, const Node& n) {
  std::string why = check_operands(n, 1);
  if (why.empty()) why = check_unary_attrs(n);
  if (!why.empty()) return why;
  if (g.value(n.inputs[0]).shape != g.value(n.outputs[0]).shape) return "unary op changes the shape";
  const DType in = g.value(n.inputs[0]).dtype, out = g.value(n.outputs[0]).dtype;
  if (n.op == "bitwise_not" && in != DType::Bool) return "bitwise_not on non-bool dtype (supported: bool)";
  if (!takes_integral(n.op) && !is_floating(in)) return n.op + " on dtype " + dtype_name(in) + " (supported: floating dtypes)";
  if (n.has_attr("dtype") && n.attr_str("dtype") != dtype_name(out))
    return "dtype attribute " + n.attr_str("dtype") + " differs from the output dtype " + dtype_name(out);
  return check_broadcast(g, n);
}

void run_unary(KernelCall& c) {
  UnaryAttrs at;
  const UnaryOp op = unary_params(c.n, &at);
  const auto& out = c.g.value(c.n.outputs[0]);
  ref::unary(op, at, out.shape, arg(c, 0), c.out[0], out.dtype);
}

// ---- binary ----
const std::unordered_map<std::string, BinaryOp>& binary_ops() {
  static const std::unordered_map<std::string, BinaryOp> m = {
      {"add", BinaryOp::Add},       {"sub", BinaryOp::Sub},       {"rsub", BinaryOp::Sub},
      {"mul", BinaryOp::Mul},       {"div", BinaryOp::Div},       {"pow", BinaryOp::Pow},
      {"maximum", BinaryOp::Maximum}, {"minimum", BinaryOp::Minimum}, {"eq", BinaryOp::Eq},
      {"ne", BinaryOp::Ne},         {"lt", BinaryOp::Lt},         {"le", BinaryOp::Le},
      {"gt", BinaryOp::Gt},         {"ge", BinaryOp::Ge},         {"logical_and", BinaryOp::LogicalAnd},
      {"logical_or", BinaryOp::LogicalOr}, {"bitwise_and", BinaryOp::BitwiseAnd}, {"bitwise_or", BinaryOp::BitwiseOr},
      {"remainder", BinaryOp::Remainder}, {"floor_divide", BinaryOp::FloorDiv}, {"atan2", BinaryOp::Atan2}};
  return m;
}

BinaryOp binary_op(const Node& n) {
  return n.op == "div" && n.has_attr("rounding_mode") ? BinaryOp::FloorDiv : binary_ops().at(n.op);
}

// Without the attribute the cpu binding computes in the output dtype.
DType compute_dtype(const Graph& g, const Node& n) {
  return n.has_attr("compute_dtype") ? dtype_from_name(n.attr_str("compute_dtype")) : g.value(n.outputs[0]).dtype;
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le || op == BinaryOp::Gt ||
         op == BinaryOp::Ge;
}

// What the kernel would reject (or silently get wrong) for this compute dtype.
std::string check_compute_dtype(const Graph& g, const Node& n, BinaryOp op, DType t) {
  if (!in_all_types(t)) return n.op + " with compute_dtype " + dtype_name(t) + " (no reference path)";
  if ((op == BinaryOp::BitwiseAnd || op == BinaryOp::BitwiseOr) && is_floating(t))
    return n.op + " with a floating compute dtype";
  if (t == DType::Bool && (op == BinaryOp::Sub || op == BinaryOp::FloorDiv || op == BinaryOp::Remainder || op == BinaryOp::Pow))
    return n.op + " with a bool compute dtype";
  // A comparison computed in the bool output dtype would compare its operands as bools.
  if (!n.has_attr("compute_dtype") && is_comparison(op))
    for (int v : n.inputs)
      if (g.value(v).dtype != DType::Bool) return n.op + " without a compute_dtype attribute on non-bool operands";
  return "";
}

std::string check_binary_attrs(const Node& n) {
  if (n.op == "div" && n.has_attr("rounding_mode")) {
    const auto& m = n.attr_str("rounding_mode");
    if (m != "floor") return "div rounding_mode='" + m + "' (supported: None, 'floor')";
  }
  const bool takes_alpha = n.op == "add" || n.op == "sub" || n.op == "rsub";
  if (!takes_alpha && n.attr_float("alpha", 1.0) != 1.0) return n.op + " has no alpha, but alpha != 1 is set";
  return "";
}

std::string check_binary(const Graph& g, const Node& n) {
  std::string why = check_operands(n, 2);
  if (why.empty()) why = check_binary_attrs(n);
  if (why.empty()) why = check_compute_dtype(g, n, binary_op(n), compute_dtype(g, n));
  return why.empty() ? check_broadcast(g, n) : why;
}

void run_binary(KernelCall& c) {
  const auto& out = c.g.value(c.n.outputs[0]);
  const double alpha = c.n.attr_float("alpha", 1.0);
  const bool swap = c.n.op == "rsub";  // rsub(a, b, alpha) = b - alpha * a
  ref::binary(binary_op(c.n), alpha, out.shape, arg(c, swap ? 1 : 0), arg(c, swap ? 0 : 1), c.out[0],
                                 out.dtype, compute_dtype(c.g, c.n));
}

// ---- where / masked_fill ----
std::string check_ternary(const Graph& g, const Node& n) {
  const std::string why = check_operands(n, 3);
  return why.empty() ? check_broadcast(g, n) : why;
}

void run_where(KernelCall& c) {
  const auto& out = c.g.value(c.n.outputs[0]);
  ref::where(out.shape, arg(c, 0), arg(c, 1), arg(c, 2), c.out[0], out.dtype);
}

void run_masked_fill(KernelCall& c) {  // masked_fill(self, mask, value) = where(mask, value, self)
  const auto& out = c.g.value(c.n.outputs[0]);
  ref::where(out.shape, arg(c, 1), arg(c, 2), arg(c, 0), c.out[0], out.dtype);
}

}  // namespace

void register_elementwise_ops(KernelTable& t) {
  for (const auto& kv : unary_ops()) t.emplace_back(kv.first, OpKernel{check_unary, nullptr, run_unary, nullptr});
  for (const auto& kv : binary_ops()) t.emplace_back(kv.first, OpKernel{check_binary, nullptr, run_binary, nullptr});
  t.emplace_back("where", OpKernel{check_ternary, nullptr, run_where, nullptr});
  t.emplace_back("masked_fill", OpKernel{check_ternary, nullptr, run_masked_fill, nullptr});
}

}  // namespace dnnfusion::target::reference
