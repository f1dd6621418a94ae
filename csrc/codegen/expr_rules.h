// The element-wise code-generation rules: for every One-to-One op the code generator can inline,
// the C++ expression that computes one output element from its operands' elements, with the same
// semantics (NaN propagation, attributes) as the library kernels in csrc/kernels/cpu/elementwise.
// Also the prelude every generated translation unit starts with: the runtime ABI and branch-free
// float math (exp, erf, tanh) the compiler can vectorize, unlike libm calls.
// Precondition of emit_elementwise: inline_op_support(g, n) returned "".
#pragma once
#include <string>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::codegen {

// "" if node n can be computed inline, element by element, in generated code; else why not.
// (Index ops — view/permute/slice/expand... — are handled by view_compose, not here.)
std::string inline_op_support(const ecg::Graph& g, const ecg::Node& n);

// The expression for output 0 of n; operand expressions are given per tensor input (absent
// optional inputs as ""). Operands and result are float, except where/masked_fill conditions (bool).
std::string emit_elementwise(const ecg::Graph& g, const ecg::Node& n, const std::vector<std::string>& operands);

// A float literal that round-trips exactly (hex float; inf/nan spelled with builtins).
std::string float_literal(double v);

const std::string& generated_prelude();

}  // namespace dnnfusion::codegen
