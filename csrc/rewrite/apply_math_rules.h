// Math-property graph rewriting (DNNFusion §4.2): the engine that runs the rule table of
// math_rules.h. The ECG is split at ops that no rule can see through — ops with none of the
// associative / distributive / commutative properties and named by no rule: only the other nodes
// take part, and a match never leaves the partition (connected component) they form. Each round
// costs every match of every rule (rule_effect: #FLOPs of the nodes that die minus those of the
// replacement nodes that survive constant folding) and applies them greedily, the largest FLOP
// reduction first (ties: table order, then node order); a match whose neighbourhood (its nodes,
// their producers and consumers) an earlier match of the round touched waits for the next round,
// so the matches applied together do not interact (each stays valid, at the same cost, whatever
// the others do). Rounds repeat until no rule reduces FLOPs. A
// match that keeps the FLOPs is applied only if it removes nodes (transpose∘transpose), or if the
// rule is canonical and adds none (x/c -> x*(1/c)); each application strictly lowers
// (FLOPs, nodes, divisions by a constant) lexicographically, so the engine terminates, and at its
// fixpoint a second run applies nothing.
//
// Precondition: the graph verifies. Postcondition: the graph verifies, computes the same outputs
// within fp32 rounding (identities used hold exactly in real arithmetic, on the domain each rule
// checks), keeps its inputs and output order, and its runtime FLOPs did not grow. Replacements
// contain weight-only nodes (mul(c1, c2), W1+W2, ...): run fold_constants afterwards.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ecg/graph.h"

namespace dnnfusion::rewrite {

struct RuleStats {
  struct PerRule {
    int applied = 0;
    int64_t flops_saved = 0;
  };
  std::map<std::string, PerRule> rules;  // rules that applied at least once
  // Runtime FLOPs and nodes: those of nodes that do not fold (constant-only nodes cost nothing).
  int64_t flops_before = 0, flops_after = 0;
  int nodes_before = 0, nodes_after = 0;
  int rounds = 0;
  int applied() const {
    int n = 0;
    for (const auto& [name, r] : rules) n += r.applied;
    return n;
  }
};

// `only` (optional) restricts the engine to the named rules (unknown names throw). Returns the
// input unchanged (same node list) when no rule applies.
ecg::Graph apply_math_rules(const ecg::Graph& g, RuleStats* stats = nullptr, const std::vector<std::string>& only = {});

}  // namespace dnnfusion::rewrite
