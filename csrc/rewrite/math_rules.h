// The table of math-property rewriting rules (DNNFusion §4.2, Table 4) that apply_math_rules
// runs. A rule is data: a name, the algebraic property that justifies it, the ops its pattern
// spans, a matcher rooted at one node and a builder that emits the replacement. Its #FLOPs
// effect is not written by hand: rule_effect() measures it from node_flops on the pattern nodes
// that die and the replacement nodes that survive constant folding, so it cannot drift from
// what the builder emits.
//
// Conventions every rule keeps:
// - "c" operands are compile-time: weights/constants or values computed only from them (the
//   builders emit weight-only nodes such as mul(c1, c2); fold_constants evaluates them later).
// - Arithmetic rules only touch float32 values and plain binary nodes (alpha 1, no rounding
//   mode, float32 compute dtype), so reassociation is exact up to fp32 rounding.
// - Broadcasting is associative and commutative on shapes, so regrouping elementwise operands
//   keeps the root's output shape; rules that move a constant into a weight or through a
//   reduction state the shape condition that makes this true.
// - Identities that hold only on part of the domain (sqrt(b)*sqrt(b) = b) require a proof that
//   the operand lies in it (a non-negative constant, or the result of relu/abs/exp/sqrt/...).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "rewrite/graph_edit.h"

namespace dnnfusion::rewrite {

enum class Property : int8_t { Associative, Distributive, Commutative };
const char* property_name(Property p);

// What a matcher captured.
struct Match {
  int root = -1;           // node whose output 0 the replacement takes over
  std::vector<int> nodes;  // every node of the pattern, root included (those left unused die)
  std::vector<int> v;      // captured source values, in the rule's own order
};

// What the matcher sees: the graph and which of its values are compile-time.
struct RuleContext {
  const ecg::Graph& g;
  std::vector<char> is_const;
  explicit RuleContext(const ecg::Graph& graph) : g(graph), is_const(compile_time_values(graph)) {}
};

struct MathRule {
  std::string name;
  Property property;
  std::string pattern;          // "(x*c1)*c2 -> x*(c1*c2)", for reports
  std::vector<std::string> ops; // every op a match may span; the root's op is among them
  std::function<bool(const RuleContext&, int node, Match*)> match;
  // Emits the replacement (operands mapped with rb.map) and returns the new value of root output 0.
  std::function<int(GraphRebuilder& rb, const Match&)> build;
  // Accepted without a FLOP or node reduction (it rewrites toward a cheaper instruction: x/c ->
  // x*(1/c)); no rule produces the rewritten form back, so the engine still terminates.
  bool canonical = false;
};

const std::vector<MathRule>& math_rules();

// Cost of applying `rule` at `m`, counted as the runtime will see it after constant folding
// (nodes whose operands are all compile-time cost nothing).
struct RuleEffect {
  int64_t flops_removed = 0;  // pattern nodes that die
  int64_t flops_added = 0;    // replacement nodes that are not weight-only
  int nodes_removed = 0;
  int nodes_added = 0;
  int reused_value = -1;      // the replacement is this existing source value (no new node), else -1
  int64_t flop_delta() const { return flops_removed - flops_added; }
};
RuleEffect rule_effect(const RuleContext& ctx, const MathRule& rule, const Match& m);

}  // namespace dnnfusion::rewrite
