#include "ecg/elementwise_expr.h"

#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "ecg/op_registry.h"

namespace dnnfusion::ecg {

namespace {

bool has_dtype(const Graph& g, int v, char want) {
  if (v < 0) return false;
  return g.value(v).dtype == (want == 'b' ? DType::Bool : DType::Float32);
}

// The operand list of a rule: 'f' float32, 'b' bool, '?' an optional float32.
std::string check_operands(const Graph& g, const Node& n, const std::string& want) {
  if (n.inputs.size() != want.size()) return "expects " + std::to_string(want.size()) + " operands";
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == '?' && n.inputs[i] < 0) continue;
    if (!has_dtype(g, n.inputs[i], want[i] == 'b' ? 'b' : 'f'))
      return "operand " + std::to_string(i) + (want[i] == 'b' ? " is not bool" : " is not float32");
  }
  return "";
}

}  // namespace

std::string float_literal(double v) {
  if (std::isnan(v)) return "dnnf_nan()";
  if (std::isinf(v)) return v > 0 ? "dnnf_inf()" : "(-dnnf_inf())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(v)));
  return std::string("(") + buf + ")";
}

std::string elementwise_support(const Graph& g, const Node& n) {
  const OpInfo* info = n.info ? n.info : find_op(n.op);
  if (!info || !info->elementwise.text) return "no element-wise expression for " + n.op;
  const ElementwiseRule& r = info->elementwise;
  if (n.outputs.empty() || !has_dtype(g, n.outputs[0], 'f')) return "output is not float32";
  std::string why = check_operands(g, n, r.operands);
  if (!why.empty()) return n.op + ": " + why;
  if (n.has_attr("compute_dtype") && n.attr_str("compute_dtype") != "float32") return "computes in another dtype";
  return r.refuse ? r.refuse(g, n) : "";
}

std::string elementwise_expression(const Graph&, const Node& n, const std::vector<std::string>& operands) {
  const OpInfo* info = n.info ? n.info : find_op(n.op);
  DNNF_CHECK(info && info->elementwise.text, "no element-wise expression for op ", n.op);
  const std::string text = info->elementwise.text(n);
  std::string out;
  out.reserve(text.size() * 2);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '9') {
      const size_t k = static_cast<size_t>(text[++i] - '0');
      DNNF_CHECK(k < operands.size(), "expression of ", n.op, " reads operand ", k, " of ", operands.size());
      out += operands[k];
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace dnnfusion::ecg
