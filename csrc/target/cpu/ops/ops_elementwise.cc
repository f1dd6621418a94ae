// Elementwise ops (unary, binary with broadcasting, where/masked_fill, casts) bound to
// kernels/cpu/elementwise. Operands are contiguous buffers; broadcasting becomes zero strides.
#include <cmath>
#include <limits>
#include <unordered_map>

#include "common/error.h"
#include "kernels/cpu/elementwise.h"
#include "runtime/op_attrs.h"
#include "runtime/op_kernels.h"
#include "target/cpu/cpu_kernels.h"

namespace dnnfusion::target::cpu {

using namespace runtime;  // the kernel contract (OpKernel, KernelCall) and its helpers

using ecg::Graph;
using ecg::Node;
using kernels::BinaryOp;
using kernels::StridedArg;
using kernels::UnaryAttrs;
using kernels::UnaryOp;

namespace {


// Strides of `in` broadcast over `out` (numpy rules, aligned right).
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  auto cs = contiguous_strides(in);
  std::vector<int64_t> s(out.size(), 0);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : cs[i];
  return s;
}

StridedArg arg(const Graph& g, const KernelCall& c, size_t i) {
  const auto& v = g.value(c.n.inputs[i]);
  return StridedArg{c.in[i], v.dtype, broadcast_strides(v.shape, g.value(c.n.outputs[0]).shape)};
}

std::string check_broadcast(const Graph& g, const Node& n) {
  const auto& out = g.value(n.outputs[0]).shape;
  for (int v : n.inputs) {
    if (v < 0) continue;
    const auto& s = g.value(v).shape;
    if (s.size() > out.size()) return "operand rank exceeds the output rank";
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t o = out[out.size() - s.size() + i];
      if (s[i] != o && s[i] != 1) return "operand shape " + ecg::shape_str(s) + " does not broadcast to " + ecg::shape_str(out);
    }
  }
  return require_dtypes(g, n, kAllTypes);
}

// ---- unary ----
const std::unordered_map<std::string, UnaryOp>& unary_ops() {
  static const std::unordered_map<std::string, UnaryOp> m = {
      {"relu", UnaryOp::Relu}, {"hardtanh", UnaryOp::Hardtanh}, {"clamp", UnaryOp::Clamp},
      {"hardswish", UnaryOp::Hardswish}, {"hardsigmoid", UnaryOp::Hardsigmoid}, {"sigmoid", UnaryOp::Sigmoid},
      {"silu", UnaryOp::Silu}, {"gelu", UnaryOp::Gelu}, {"tanh", UnaryOp::Tanh}, {"exp", UnaryOp::Exp},
      {"log", UnaryOp::Log}, {"sqrt", UnaryOp::Sqrt}, {"rsqrt", UnaryOp::Rsqrt}, {"reciprocal", UnaryOp::Reciprocal},
      {"neg", UnaryOp::Neg}, {"abs", UnaryOp::Abs}, {"erf", UnaryOp::Erf}, {"leaky_relu", UnaryOp::LeakyRelu},
      {"elu", UnaryOp::Elu}, {"softplus", UnaryOp::Softplus}, {"mish", UnaryOp::Mish},
      {"logical_not", UnaryOp::LogicalNot}, {"bitwise_not", UnaryOp::LogicalNot}, {"sign", UnaryOp::Sign}, {"square", UnaryOp::Square},
      {"sin", UnaryOp::Sin}, {"cos", UnaryOp::Cos}, {"floor", UnaryOp::Floor}, {"ceil", UnaryOp::Ceil},
      {"round", UnaryOp::Round}, {"_to_copy", UnaryOp::Identity}};
  return m;
}

UnaryOp unary_params(const Node& n, UnaryAttrs* at) {
  UnaryOp op = unary_ops().at(n.op);
  const double inf = std::numeric_limits<double>::infinity();
  switch (op) {
    case UnaryOp::Hardtanh: at->a = n.attr_float("min_val", -1.0); at->b = n.attr_float("max_val", 1.0); break;
    case UnaryOp::Clamp: at->a = n.attr_float("min", -inf); at->b = n.attr_float("max", inf); break;
    case UnaryOp::LeakyRelu: at->a = n.attr_float("negative_slope", 0.01); break;
    case UnaryOp::Elu: at->a = n.attr_float("alpha", 1.0); break;
    case UnaryOp::Softplus: at->a = n.attr_float("beta", 1.0); at->b = n.attr_float("threshold", 20.0); break;
    case UnaryOp::Gelu:
      if (n.has_attr("approximate") && n.attr_str("approximate") == "tanh") op = UnaryOp::GeluTanh;
      break;
    case UnaryOp::Round:
      break;
    default: break;
  }
  return op;
}

std::string check_unary(const Graph& g, const Node& n) {
  if (n.inputs.size() != 1 || n.inputs[0] < 0) return n.op + " expects one tensor operand";
  if (n.op == "gelu" && n.has_attr("approximate")) {
    const auto& a = n.attr_str("approximate");
    if (a != "none" && a != "tanh") return "gelu approximate='" + a + "' (supported: 'none', 'tanh')";
  }
  if (n.op == "elu" && (n.attr_float("scale", 1.0) != 1.0 || n.attr_float("input_scale", 1.0) != 1.0))
    return "elu with scale/input_scale != 1";
  if (n.op == "round" && n.attr_int("decimals", 0) != 0) return "round with decimals != 0";
  if (g.value(n.inputs[0]).shape != g.value(n.outputs[0]).shape) return "unary op changes the shape";
  const DType in = g.value(n.inputs[0]).dtype;
  if (n.op == "bitwise_not" && in != DType::Bool) return "bitwise_not on non-bool dtype (supported: bool)";
  if (n.op != "_to_copy" && n.op != "logical_not" && n.op != "bitwise_not" && n.op != "relu" && n.op != "neg" && n.op != "abs" && n.op != "sign" &&
      n.op != "clamp" && n.op != "hardtanh" && !is_floating(in))
    return n.op + " on dtype " + dtype_name(in) + " (supported: floating dtypes)";
  return require_dtypes(g, n, kAllTypes);
}

void run_unary(KernelCall& c) {
  UnaryAttrs at;
  UnaryOp op = unary_params(c.n, &at);
  const auto& out = c.g.value(c.n.outputs[0]);
  kernels::unary(op, at, out.shape, arg(c.g, c, 0), c.out[0], out.dtype, c.par);
}

// ---- binary ----
const std::unordered_map<std::string, BinaryOp>& binary_ops() {
  static const std::unordered_map<std::string, BinaryOp> m = {
      {"add", BinaryOp::Add}, {"sub", BinaryOp::Sub}, {"rsub", BinaryOp::Sub}, {"mul", BinaryOp::Mul},
      {"div", BinaryOp::Div}, {"pow", BinaryOp::Pow}, {"maximum", BinaryOp::Maximum}, {"minimum", BinaryOp::Minimum},
      {"eq", BinaryOp::Eq}, {"ne", BinaryOp::Ne}, {"lt", BinaryOp::Lt}, {"le", BinaryOp::Le}, {"gt", BinaryOp::Gt},
      {"ge", BinaryOp::Ge}, {"logical_and", BinaryOp::LogicalAnd}, {"logical_or", BinaryOp::LogicalOr},
      {"bitwise_and", BinaryOp::BitwiseAnd}, {"bitwise_or", BinaryOp::BitwiseOr}, {"remainder", BinaryOp::Remainder},
      {"floor_divide", BinaryOp::FloorDiv}, {"atan2", BinaryOp::Atan2}};
  return m;
}

std::string check_binary(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2 || n.inputs[0] < 0 || n.inputs[1] < 0) return n.op + " expects two tensor operands";
  if (n.op == "div" && n.has_attr("rounding_mode")) {
    const auto& m = n.attr_str("rounding_mode");
    if (m != "floor") return "div rounding_mode='" + m + "' (supported: None, 'floor')";
  }
  return check_broadcast(g, n);
}

void run_binary(KernelCall& c) {
  BinaryOp op = binary_ops().at(c.n.op);
  if (c.n.op == "div" && c.n.has_attr("rounding_mode")) op = BinaryOp::FloorDiv;
  const auto& out = c.g.value(c.n.outputs[0]);
  DType compute = c.n.has_attr("compute_dtype") ? dtype_from_name(c.n.attr_str("compute_dtype")) : out.dtype;
  double alpha = c.n.attr_float("alpha", 1.0);
  if (c.n.op == "rsub")  // rsub(a, b, alpha) = b - alpha * a
    kernels::binary(op, alpha, out.shape, arg(c.g, c, 1), arg(c.g, c, 0), c.out[0], out.dtype, compute, c.par);
  else
    kernels::binary(op, alpha, out.shape, arg(c.g, c, 0), arg(c.g, c, 1), c.out[0], out.dtype, compute, c.par);
}

// ---- where / masked_fill ----
std::string check_ternary(const Graph& g, const Node& n) {
  if (n.inputs.size() != 3) return n.op + " expects three tensor operands";
  for (int v : n.inputs)
    if (v < 0) return n.op + " with an absent operand";
  return check_broadcast(g, n);
}

void run_where(KernelCall& c) {
  const auto& out = c.g.value(c.n.outputs[0]);
  kernels::where(out.shape, arg(c.g, c, 0), arg(c.g, c, 1), arg(c.g, c, 2), c.out[0], out.dtype, c.par);
}

void run_masked_fill(KernelCall& c) {  // masked_fill(self, mask, value) = where(mask, value, self)
  const auto& out = c.g.value(c.n.outputs[0]);
  kernels::where(out.shape, arg(c.g, c, 1), arg(c.g, c, 2), arg(c.g, c, 0), c.out[0], out.dtype, c.par);
}

}  // namespace

void register_elementwise_ops(KernelTable& t) {
  for (const auto& [name, op] : unary_ops()) t.emplace_back(name, OpKernel{check_unary, nullptr, run_unary, nullptr});
  for (const auto& [name, op] : binary_ops()) t.emplace_back(name, OpKernel{check_binary, nullptr, run_binary, nullptr});
  t.emplace_back("where", OpKernel{check_ternary, nullptr, run_where, nullptr});
  t.emplace_back("masked_fill", OpKernel{check_ternary, nullptr, run_masked_fill, nullptr});
}

}  // namespace dnnfusion::target::cpu
