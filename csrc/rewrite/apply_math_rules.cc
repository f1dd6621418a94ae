#include "rewrite/apply_math_rules.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "common/error.h"
#include "ecg/op_registry.h"
#include "rewrite/graph_edit.h"
#include "rewrite/math_rules.h"

namespace dnnfusion::rewrite {

using ecg::Graph;
using ecg::Node;

namespace {

struct Candidate {
  size_t rule = 0;  // index into the active rules
  Match match;
  RuleEffect effect;
};

bool better(const Candidate& a, const Candidate& b) {
  if (a.effect.flop_delta() != b.effect.flop_delta()) return a.effect.flop_delta() > b.effect.flop_delta();
  return a.rule < b.rule;  // equal rules: the earlier node, found first, stays
}

void runtime_cost(const Graph& g, int64_t* flops, int* nodes) {
  auto c = compile_time_values(g);
  *flops = 0;
  *nodes = 0;
  for (const Node& n : g.nodes()) {
    if (!n.outputs.empty() && c[n.outputs[0]]) continue;
    *flops += ecg::node_flops(g, n);
    ++*nodes;
  }
}

bool has_property(const ecg::OpInfo& info) {
  return info.props.associative || info.props.commutative || !info.props.distributes_over.empty() ||
         !info.props.commutes_with.empty();
}

}  // namespace

Graph apply_math_rules(const Graph& g, RuleStats* stats, const std::vector<std::string>& only) {
  std::vector<const MathRule*> rules;
  for (const MathRule& r : math_rules())
    if (only.empty() || std::find(only.begin(), only.end(), r.name) != only.end()) rules.push_back(&r);
  for (const auto& name : only)
    DNNF_CHECK(std::any_of(rules.begin(), rules.end(), [&](const MathRule* r) { return r->name == name; }),
               "unknown math rule '", name, "'");
  std::unordered_map<std::string, std::vector<size_t>> by_op;  // op -> rules whose pattern may contain it
  for (size_t i = 0; i < rules.size(); ++i)
    for (const auto& op : rules[i]->ops) by_op[op].push_back(i);
  // The split: only these nodes take part; the components they form are the partitions.
  auto member = [&](const Node& n) { return (n.info && has_property(*n.info)) || by_op.count(n.op); };

  RuleStats local;
  RuleStats& st = stats ? *stats : local;
  st = RuleStats{};
  runtime_cost(g, &st.flops_before, &st.nodes_before);
  Graph cur = g;
  const size_t max_rounds = 16 * g.nodes().size() + 64;  // a safety net: every round lowers the measure
  for (;; ++st.rounds) {
    DNNF_CHECK(static_cast<size_t>(st.rounds) < max_rounds, "math rules did not reach a fixpoint");
    RuleContext ctx(cur);
    std::vector<Candidate> found;
    for (const Node& n : cur.nodes()) {
      if (!member(n) || (!n.outputs.empty() && ctx.is_const[n.outputs[0]])) continue;  // folds anyway
      auto it = by_op.find(n.op);
      if (it == by_op.end()) continue;
      for (size_t ri : it->second) {
        const MathRule& rule = *rules[ri];
        Candidate c{ri, {}, {}};
        if (!rule.match(ctx, n.id, &c.match)) continue;
        DNNF_CHECK(c.match.root == n.id, "math rule ", rule.name, " matched at node ", n.id, " but names root ", c.match.root);
        for (int id : c.match.nodes)  // so a match stays inside one partition
          DNNF_CHECK(std::find(rule.ops.begin(), rule.ops.end(), cur.node(id).op) != rule.ops.end(), "math rule ",
                     rule.name, " matched op '", cur.node(id).op, "' that it does not declare");
        c.effect = rule_effect(ctx, rule, c.match);
        const RuleEffect& e = c.effect;
        const bool accept = e.flop_delta() > 0 ||
                            (e.flop_delta() == 0 && (e.nodes_added < e.nodes_removed ||
                                                     (rule.canonical && e.nodes_added <= e.nodes_removed)));
        if (!accept) continue;
        // I6: a graph output may become an existing value only if that is a plain activation.
        if (e.reused_value >= 0 && cur.value(n.outputs[0]).is_output &&
            (cur.value(e.reused_value).producer < 0 || cur.value(e.reused_value).is_output))
          continue;
        found.push_back(std::move(c));
      }
    }
    if (found.empty()) break;
    // Best first. A match is applied in this round only if its neighbourhood (its nodes, their
    // producers and consumers) is untouched by the matches applied before it: such matches are
    // independent, so applying them together equals applying them one round at a time.
    std::stable_sort(found.begin(), found.end(), better);
    std::vector<char> touched(cur.nodes().size(), 0);
    std::set<int> claimed;  // existing values handed to a graph output this round
    std::map<int, const Candidate*> at_root;
    for (const Candidate& c : found) {
      std::vector<int> hood;
      for (int id : c.match.nodes) {
        hood.push_back(id);
        for (int in : cur.node(id).inputs)
          if (in >= 0 && cur.value(in).producer >= 0) hood.push_back(cur.value(in).producer);
        for (int o : cur.node(id).outputs)
          for (int u : cur.value(o).users) hood.push_back(u);
      }
      if (std::any_of(hood.begin(), hood.end(), [&](int id) { return touched[id]; })) continue;
      const int reused = c.effect.reused_value;
      if (reused >= 0 && cur.value(cur.node(c.match.root).outputs[0]).is_output && !claimed.insert(reused).second) continue;
      for (int id : hood) touched[id] = 1;
      at_root[c.match.root] = &c;
    }
    GraphRebuilder rb(cur);
    for (const Node& n : cur.nodes()) {
      auto it = at_root.find(n.id);
      if (it == at_root.end()) {
        rb.copy_node(n.id);
        continue;
      }
      const Candidate& c = *it->second;
      const MathRule& rule = *rules[c.rule];
      rb.origin = n.origin;
      const int nv = rule.build(rb, c.match);
      bool other_outputs_used = false;
      for (size_t s = 1; s < n.outputs.size(); ++s)
        other_outputs_used |= !cur.value(n.outputs[s]).users.empty() || cur.value(n.outputs[s]).is_output;
      if (other_outputs_used) rb.copy_node(n.id);
      rb.replace(n.outputs[0], nv);
      auto& pr = st.rules[rule.name];
      ++pr.applied;
      pr.flops_saved += c.effect.flop_delta();
    }
    cur = remove_dead_nodes(rb.finish());
  }
  runtime_cost(cur, &st.flops_after, &st.nodes_after);
  return cur;
}

}  // namespace dnnfusion::rewrite
