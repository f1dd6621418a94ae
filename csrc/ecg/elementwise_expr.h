// Element-wise expressions: how a One-to-One op computes one output element, as the op
// registry states it (OpInfo::elementwise), for any code generator to inline.
//
// An expression is C-family text over the operands $0, $1, $2 (one per tensor input, by
// position), float literals, the operators + - * / < > != || ?: and this vocabulary, which
// every emitter's prelude defines with the same semantics (NaN propagation, rounding):
//   dnnf_exp(x)          e^x, ~1 ulp, exact 0 / inf outside the float range
//   dnnf_exp_clamped(x)  e^x for use in 1 / (1 + e^x) only: inf above 87, clamped at -87 below
//   dnnf_exp_exact(x)    e^x as the C library computes it
//   dnnf_tanh dnnf_erf dnnf_log dnnf_log1p dnnf_expm1 dnnf_sin dnnf_cos dnnf_sqrt dnnf_abs
//   dnnf_floor dnnf_ceil dnnf_rint (round half to even) dnnf_clamp06(x) (clamp to [0, 6])
//   dnnf_pow(a, b)       with PyTorch's special cases for b in {±2, 3, ±0.5, ±1}
//   dnnf_inf() dnnf_nan()
// Operands and results are float except where a rule's operand list says 'b' (a bool operand).
#pragma once
#include <string>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::ecg {

// "" if node n can be computed inline, element by element, from its registry rule; else why not.
// (Index ops — view/permute/slice/expand... — are index arithmetic, not expressions.)
std::string elementwise_support(const Graph& g, const Node& n);

// The expression for output 0 of n with $i replaced by operands[i] (absent optional inputs as "").
// Precondition: elementwise_support(g, n) returned "".
std::string elementwise_expression(const Graph& g, const Node& n, const std::vector<std::string>& operands);

// A float literal that round-trips exactly (hex float; inf/nan spelled with the vocabulary).
std::string float_literal(double v);

}  // namespace dnnfusion::ecg
