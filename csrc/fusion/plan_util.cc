#include "fusion/plan_util.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_map>
#include <cstdint>

#include "common/error.h"

namespace dnnfusion::fusion::detail {

const ecg::OpInfo& op_info(const ecg::Graph& g, int n) {
  const ecg::Node& node = g.node(n);
  const ecg::OpInfo* info = node.info ? node.info : ecg::find_op(node.op);
  if (!info) DNNF_THROW("fusion: node ", n, " has op '", node.op, "' which is not in the op registry");
  return *info;
}

ecg::MappingType node_mapping(const ecg::Graph& g, int n) { return op_info(g, n).mapping; }

bool is_many_to_many(const ecg::Graph& g, int n) { return node_mapping(g, n) == ecg::MappingType::ManyToMany; }

Adjacency build_adjacency(const ecg::Graph& g) {
  const size_t n_nodes = g.nodes().size();
  Adjacency adj;
  adj.succ.resize(n_nodes);
  adj.pred.resize(n_nodes);
  for (size_t n = 0; n < n_nodes; ++n) {
    for (int v : g.node(static_cast<int>(n)).inputs) {
      if (v < 0) continue;
      const int p = g.value(v).producer;
      if (p < 0) continue;
      adj.pred[n].push_back(p);
      adj.succ[static_cast<size_t>(p)].push_back(static_cast<int>(n));
    }
  }
  for (auto* lists : {&adj.succ, &adj.pred}) {
    for (auto& l : *lists) {
      std::sort(l.begin(), l.end());
      l.erase(std::unique(l.begin(), l.end()), l.end());
    }
  }
  return adj;
}

UnitDag::UnitDag(const Adjacency& adj) : adj_(adj) {
  const size_t n = adj.succ.size();
  unit_of_.resize(n);
  members_.resize(n);
  label_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    unit_of_[i] = static_cast<int>(i);
    members_[i] = {static_cast<int>(i)};
    label_[i] = static_cast<int64_t>(i);
  }
  max_label_ = static_cast<int64_t>(n);
  mark_.assign(n, 0);
  seen_.assign(n, 0);
}

bool UnitDag::merge_creates_cycle(const std::vector<int>& units) const {
  ++gen_;
  int64_t top = 0;
  for (int u : units) {
    mark_[static_cast<size_t>(u)] = gen_;
    top = std::max(top, label_[static_cast<size_t>(u)]);
  }
  // Walk forward from everything the merged set feeds. A unit labelled >= top can reach no member
  // (labels rise along every path and no member is labelled above top), so the walk skips it.
  std::vector<int> stack;
  auto expand = [&](int u) {
    for (int n : members_[static_cast<size_t>(u)]) {
      for (int s : adj_.succ[static_cast<size_t>(n)]) {
        const int w = unit_of_[static_cast<size_t>(s)];
        if (mark_[static_cast<size_t>(w)] == gen_) return true;  // back into the merged set
        if (label_[static_cast<size_t>(w)] >= top || seen_[static_cast<size_t>(w)] == gen_) continue;
        seen_[static_cast<size_t>(w)] = gen_;
        stack.push_back(w);
      }
    }
    return false;
  };
  for (int u : units) {
    // Edges from a member straight into another member are the merge itself, not a cycle.
    for (int n : members_[static_cast<size_t>(u)]) {
      for (int s : adj_.succ[static_cast<size_t>(n)]) {
        const int w = unit_of_[static_cast<size_t>(s)];
        if (mark_[static_cast<size_t>(w)] == gen_ || label_[static_cast<size_t>(w)] >= top ||
            seen_[static_cast<size_t>(w)] == gen_)
          continue;
        seen_[static_cast<size_t>(w)] = gen_;
        stack.push_back(w);
      }
    }
  }
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    if (expand(u)) return true;
  }
  return false;
}

int UnitDag::merge(const std::vector<int>& units) {
  // Keep the largest unit's id so that the fewest nodes move.
  int keep = units.front();
  for (int u : units)
    if (members_[static_cast<size_t>(u)].size() > members_[static_cast<size_t>(keep)].size()) keep = u;
  int64_t label = 0;
  for (int u : units) label = std::max(label, label_[static_cast<size_t>(u)]);
  for (int u : units) {
    if (u == keep) continue;
    auto& from = members_[static_cast<size_t>(u)];
    for (int n : from) unit_of_[static_cast<size_t>(n)] = keep;
    auto& to = members_[static_cast<size_t>(keep)];
    to.insert(to.end(), from.begin(), from.end());
    from.clear();
    from.shrink_to_fit();
  }
  label_[static_cast<size_t>(keep)] = label;
  // Predecessors of any merged unit were below its label, hence below the maximum. Successors of
  // a lower-labelled unit may now sit at or below it: push them (and what follows) up.
  // In a DAG no label climbs more than one step per unit above the highest label so far; getting
  // past that means the precondition was broken and the walk would go round a cycle forever.
  const int64_t limit = max_label_ + static_cast<int64_t>(members_.size()) + 1;
  std::vector<int> work = {keep};
  while (!work.empty()) {
    const int u = work.back();
    work.pop_back();
    for (int n : members_[static_cast<size_t>(u)]) {
      for (int s : adj_.succ[static_cast<size_t>(n)]) {
        const int w = unit_of_[static_cast<size_t>(s)];
        if (w == u || label_[static_cast<size_t>(w)] > label_[static_cast<size_t>(u)]) continue;
        label_[static_cast<size_t>(w)] = label_[static_cast<size_t>(u)] + 1;
        if (label_[static_cast<size_t>(w)] > limit) DNNF_THROW("fusion: merging units created a cycle in the block graph");
        max_label_ = std::max(max_label_, label_[static_cast<size_t>(w)]);
        work.push_back(w);
      }
    }
  }
  return keep;
}

ecg::MappingType fold_block_type(const ecg::Graph& g, const std::vector<int>& nodes) {
  ecg::MappingType t = node_mapping(g, nodes.front());
  for (size_t i = 1; i < nodes.size(); ++i) t = table3(t, node_mapping(g, nodes[i])).result;
  return t;
}

Plan finish_plan(const ecg::Graph& g, const std::vector<int>& group_of, std::vector<std::string> log) {
  const int n_nodes = static_cast<int>(g.nodes().size());
  // Provisional block numbers in order of each group's smallest node.
  std::unordered_map<int, int> index;
  std::vector<std::vector<int>> members;
  std::vector<int> prov(static_cast<size_t>(n_nodes));
  for (int n = 0; n < n_nodes; ++n) {
    auto it = index.emplace(group_of[static_cast<size_t>(n)], static_cast<int>(members.size())).first;
    if (it->second == static_cast<int>(members.size())) members.emplace_back();
    members[static_cast<size_t>(it->second)].push_back(n);
    prov[static_cast<size_t>(n)] = it->second;
  }
  const size_t n_blocks = members.size();
  std::vector<std::vector<int>> out_edges(n_blocks);
  std::vector<int> indeg(n_blocks, 0);
  for (int n = 0; n < n_nodes; ++n) {
    for (int v : g.node(n).inputs) {
      if (v < 0 || g.value(v).producer < 0) continue;
      const int a = prov[static_cast<size_t>(g.value(v).producer)], b = prov[static_cast<size_t>(n)];
      if (a != b) out_edges[static_cast<size_t>(a)].push_back(b);
    }
  }
  for (auto& e : out_edges) {
    std::sort(e.begin(), e.end());
    e.erase(std::unique(e.begin(), e.end()), e.end());
    for (int b : e) ++indeg[static_cast<size_t>(b)];
  }
  // Kahn's algorithm; provisional numbers follow the smallest node id, so taking the smallest ready
  // number keeps the block order close to the graph's own order and makes plans reproducible.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t b = 0; b < n_blocks; ++b)
    if (indeg[b] == 0) ready.push(static_cast<int>(b));
  Plan plan;
  plan.block_of.assign(static_cast<size_t>(n_nodes), -1);
  while (!ready.empty()) {
    const int b = ready.top();
    ready.pop();
    Block blk;
    blk.nodes = members[static_cast<size_t>(b)];
    blk.type = fold_block_type(g, blk.nodes);
    for (int n : blk.nodes) {
      plan.block_of[static_cast<size_t>(n)] = static_cast<int>(plan.blocks.size());
      if (is_many_to_many(g, n) && blk.dominant < 0) blk.dominant = n;
    }
    plan.blocks.push_back(std::move(blk));
    for (int c : out_edges[static_cast<size_t>(b)])
      if (--indeg[static_cast<size_t>(c)] == 0) ready.push(c);
  }
  if (plan.blocks.size() != n_blocks)
    DNNF_THROW("fusion plan: the blocks form a cycle (", n_blocks - plan.blocks.size(), " blocks on or after it)");
  plan.log = std::move(log);
  return plan;
}

std::string node_label(const ecg::Graph& g, int n) { return std::to_string(n) + ":" + g.node(n).op; }

std::string node_list(const ecg::Graph& g, const std::vector<int>& nodes) {
  // Long groups are cut short: a log line should stay readable.
  constexpr size_t kShown = 8;
  std::string s = "{";
  for (size_t i = 0; i < nodes.size() && i < kShown; ++i) s += (i ? ", " : "") + node_label(g, nodes[i]);
  if (nodes.size() > kShown) s += ", ... " + std::to_string(nodes.size()) + " nodes";
  return s + "}";
}

const char* m2m_input_violation(const ecg::Graph& g, const PlanHooks& hooks, const std::vector<int>& members) {
  if (!hooks.m2m_input_fusible) return nullptr;
  auto inside = [&](int v) {
    return v >= 0 && g.value(v).producer >= 0 && std::binary_search(members.begin(), members.end(), g.value(v).producer);
  };
  for (int d : members) {
    if (!is_many_to_many(g, d)) continue;
    for (int v : g.node(d).inputs) {
      if (!inside(v)) continue;
      const int how = hooks.m2m_input_fusible(g, d, v);
      if (how == PlanHooks::kNo) return "the Many-to-Many kernel cannot take this input unmaterialized";
      if (how == PlanHooks::kStrided) {
        // Only data movement between the kernel and the block's boundary.
        for (int u = v; inside(u); u = g.node(g.value(u).producer).inputs[0])
          if (!hooks.is_index_op || !hooks.is_index_op(g, g.value(u).producer))
            return "the Many-to-Many kernel reads this input strided, but the block computes it";
      }
    }
  }
  return nullptr;
}

}  // namespace dnnfusion::fusion::detail
