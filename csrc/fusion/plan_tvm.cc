// TVM's dominator-tree operator fusion (Relay's FuseOps), re-implemented on the ECG as the OurB+
// baseline of DNNFusion's evaluation.
// Precondition: a well-formed ECG. Postcondition: a Plan meeting fusion_plan.h's contract whose
// groups are the ones TVM's algorithm forms, except where our extra constraints refuse a merge
// (recorded in plan.log): at most hooks.tvm_max_group ops per group, never two Many-to-Many nodes in
// one group, no merge that would make the group DAG cyclic; nodes hooks.fusible rejects are kOpaque.
//
// The algorithm, as TVM states it:
//  * An indexed forward graph: one entry per op in topological order, each with its pattern kind
//    (OpInfo::pattern) and its out-edges; an edge carries the consumer's pattern, except that a
//    kBroadcast consumer whose operand already has the result's shape makes that edge kElemWise.
//    A node whose value leaves the function (a graph output) is "extern_ref": it may be the sink
//    others fuse into but has no post-dominator itself, so it never fuses into a later node.
//  * Relay feeds concatenate through a Tuple node. The ECG's cat takes its operands directly, so we
//    insert a virtual kTuple entry before each cat (edges into it are kInjective, as TVM makes
//    them); this reproduces TVM's deferred fusion of injective producers into concatenate (phase 2).
//    Virtual entries are dropped from the plan and do not count toward the group size cap.
//  * A post-dominator tree built in reverse topological order: a node's immediate post-dominator is
//    the least common ancestor (in the tree built so far) of all its consumers; the tree also
//    records the strongest edge pattern on the way there.
//  * Union-find groups and three passes over the nodes in topological order, each trying to fuse a
//    node's group into its immediate post-dominator's group when every path between them passes a
//    pattern test: phase 0 lets kOutEWiseFusable (conv, dense, pooling) fuse into an elementwise
//    post-dominator path of <= kBroadcast ops, phase 0/1 let <= kBroadcast ops fuse into an
//    injective or reduction post-dominator, phase 1 lets injective ops fuse along injective paths,
//    phase 2 lets injective ops fuse into a tuple that already fused into injective consumers.
#include <algorithm>
#include <functional>
#include <unordered_set>

#include "common/error.h"
#include "fusion/fusion_plan.h"
#include "fusion/plan_util.h"

namespace dnnfusion::fusion {

namespace {

using ecg::PatternKind;
using P = PatternKind;

// The larger kind wins, as in TVM's dominator tree.
PatternKind combine(PatternKind a, PatternKind b) { return a > b ? a : b; }

class TvmPlanner {
 public:
  TvmPlanner(const ecg::Graph& g, const PlanHooks& hooks)
      : g_(g), hooks_(hooks), adj_(detail::build_adjacency(g)), dag_(adj_), n_real_(static_cast<int>(g.nodes().size())) {}

  Plan run() {
    build_forward_graph();
    build_post_dominator_tree();
    init_groups();
    for (int phase = 0; phase < 3; ++phase) run_fuse(phase);
    std::vector<int> group_of(static_cast<size_t>(n_real_));
    for (int n = 0; n < n_real_; ++n) group_of[static_cast<size_t>(n)] = find(entry_of_[static_cast<size_t>(n)]);
    return detail::finish_plan(g_, group_of, std::move(log_));
  }

 private:
  struct Edge {
    int to;
    PatternKind pattern;
  };
  struct Entry {
    int node = -1;  // ECG node id, -1 for a virtual tuple
    PatternKind pattern = P::Opaque;
    bool extern_ref = false;
    std::vector<Edge> outputs;
  };
  struct Group {
    int parent = -1;  // union-find parent entry, -1 at a root
    PatternKind pattern = P::Opaque;
    int master = -1;  // the kOutEWiseFusable entry the group is built around, if any
    std::vector<int> members;  // entries; valid at a root
  };

  // ---------------- indexed forward graph ----------------
  void build_forward_graph() {
    entry_of_.assign(static_cast<size_t>(n_real_), -1);
    std::vector<int> tuple_of(static_cast<size_t>(n_real_), -1);
    for (int n = 0; n < n_real_; ++n) {
      const ecg::Node& node = g_.node(n);
      if (node.op == "cat") {
        tuple_of[static_cast<size_t>(n)] = static_cast<int>(entries_.size());
        Entry t;
        t.pattern = P::Tuple;
        entries_.push_back(t);
      }
      Entry e;
      e.node = n;
      e.pattern = fusible(n) ? detail::op_info(g_, n).pattern : P::Opaque;
      for (int v : node.outputs)
        if (g_.value(v).is_output) e.extern_ref = true;
      entry_of_[static_cast<size_t>(n)] = static_cast<int>(entries_.size());
      entries_.push_back(e);
      if (tuple_of[static_cast<size_t>(n)] >= 0)
        entries_[static_cast<size_t>(tuple_of[static_cast<size_t>(n)])].outputs.push_back({entry_of_[static_cast<size_t>(n)], P::Injective});
    }
    for (int n = 0; n < n_real_; ++n) {
      const ecg::Node& node = g_.node(n);
      const int consumer = entry_of_[static_cast<size_t>(n)];
      const PatternKind cp = entries_[static_cast<size_t>(consumer)].pattern;
      for (int v : node.inputs) {
        if (v < 0) continue;
        const ecg::Value& val = g_.value(v);
        if (val.producer < 0) continue;  // weights, constants and graph inputs are not fusion candidates
        Entry& prod = entries_[static_cast<size_t>(entry_of_[static_cast<size_t>(val.producer)])];
        if (tuple_of[static_cast<size_t>(n)] >= 0) {
          prod.outputs.push_back({tuple_of[static_cast<size_t>(n)], P::Injective});
          continue;
        }
        PatternKind ep = cp;
        if (ep == P::Broadcast && !node.outputs.empty() && g_.value(node.outputs[0]).shape == val.shape) ep = P::ElemWise;
        prod.outputs.push_back({consumer, ep});
      }
    }
  }

  bool fusible(int n) const { return !hooks_.fusible || hooks_.fusible(g_, n); }

  // ---------------- post-dominator tree ----------------
  int lca(int a, int b, PatternKind* edge_pattern) const {
    while (a != b) {
      if (a < 0 || b < 0) return -1;
      if (depth_[static_cast<size_t>(a)] < depth_[static_cast<size_t>(b)]) {
        *edge_pattern = combine(*edge_pattern, dom_pattern_[static_cast<size_t>(b)]);
        b = dom_parent_[static_cast<size_t>(b)];
      } else if (depth_[static_cast<size_t>(b)] < depth_[static_cast<size_t>(a)]) {
        *edge_pattern = combine(*edge_pattern, dom_pattern_[static_cast<size_t>(a)]);
        a = dom_parent_[static_cast<size_t>(a)];
      } else {
        *edge_pattern = combine(*edge_pattern, dom_pattern_[static_cast<size_t>(a)]);
        *edge_pattern = combine(*edge_pattern, dom_pattern_[static_cast<size_t>(b)]);
        a = dom_parent_[static_cast<size_t>(a)];
        b = dom_parent_[static_cast<size_t>(b)];
      }
    }
    return a;
  }

  void build_post_dominator_tree() {
    const size_t m = entries_.size();
    dom_parent_.assign(m, -1);
    depth_.assign(m, 1);
    dom_pattern_.assign(m, P::Opaque);
    // Consumers come later in the order, so walking backwards finds their tree nodes ready.
    for (size_t i = m; i-- > 0;) {
      const Entry& e = entries_[i];
      if (e.extern_ref) continue;  // a root: parent -1, depth 1, kOpaque
      PatternKind pat = P::ElemWise;
      int parent = -1;
      for (size_t k = 0; k < e.outputs.size(); ++k) {
        const Edge& edge = e.outputs[k];
        parent = k == 0 ? edge.to : lca(parent, edge.to, &pat);
        pat = combine(pat, edge.pattern);
      }
      dom_parent_[i] = parent;
      depth_[i] = parent >= 0 ? depth_[static_cast<size_t>(parent)] + 1 : 1;
      dom_pattern_[i] = pat;
    }
  }

  // ---------------- union-find groups ----------------
  void init_groups() {
    groups_.resize(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) {
      Group& gr = groups_[i];
      gr.pattern = entries_[i].pattern;
      if (gr.pattern == P::OutEWiseFusable) gr.master = static_cast<int>(i);
      gr.members = {static_cast<int>(i)};
    }
  }

  int find(int i) {
    int root = i;
    while (groups_[static_cast<size_t>(root)].parent >= 0) root = groups_[static_cast<size_t>(root)].parent;
    while (groups_[static_cast<size_t>(i)].parent >= 0) {
      const int next = groups_[static_cast<size_t>(i)].parent;
      groups_[static_cast<size_t>(i)].parent = root;
      i = next;
    }
    return root;
  }

  void merge_from_to(int child, int parent) {
    child = find(child);
    parent = find(parent);
    if (child == parent) return;
    Group& c = groups_[static_cast<size_t>(child)];
    Group& p = groups_[static_cast<size_t>(parent)];
    c.parent = parent;
    p.members.insert(p.members.end(), c.members.begin(), c.members.end());
    c.members.clear();
    if (c.master >= 0) {
      // TVM asserts here that the parent has no master; our Many-to-Many guard keeps that true.
      p.master = c.master;
      p.pattern = combine(c.pattern, p.pattern);
    }
  }

  // ---------------- path checks and commits ----------------
  // Every entry on a path from src (excluded) to sink (included) must pass cond(root pattern,
  // is_sink). sink post-dominates src, so every path ends there.
  template <typename Cond>
  bool check_path(int src, int sink, Cond cond) {
    new_visit();
    for (const Edge& e : entries_[static_cast<size_t>(src)].outputs)
      if (!check_path_from(e.to, sink, cond)) return false;
    return true;
  }
  template <typename Cond>
  bool check_path_from(int i, int sink, Cond cond) {
    if (seen(i)) return true;
    if (!cond(groups_[static_cast<size_t>(find(i))].pattern, i == sink)) return false;
    if (i == sink) return true;
    for (const Edge& e : entries_[static_cast<size_t>(i)].outputs)
      if (!check_path_from(e.to, sink, cond)) return false;
    return true;
  }

  // Entries from src up to (not including) sink, as TVM's CommitFuse walks them.
  void collect_path(int i, int sink, std::vector<int>* out) {
    if (i == sink || seen(i)) return;
    out->push_back(i);
    for (const Edge& e : entries_[static_cast<size_t>(i)].outputs) collect_path(e.to, sink, out);
  }

  // Fuses every group on a path src -> sink into sink's group, unless one of our constraints
  // forbids the resulting group.
  void commit_fuse(int src, int sink) {
    std::vector<int> path;
    new_visit();
    collect_path(src, sink, &path);
    // The group that would result: the whole groups of the path entries and of the sink.
    std::vector<int> roots;
    for (int i : path) roots.push_back(find(i));
    roots.push_back(find(sink));
    std::sort(roots.begin(), roots.end());
    roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
    std::vector<int> members;  // ECG node ids
    int m2m = 0;
    for (int r : roots) {
      for (int i : groups_[static_cast<size_t>(r)].members) {
        const int n = entries_[static_cast<size_t>(i)].node;
        if (n < 0) continue;
        members.push_back(n);
        if (detail::is_many_to_many(g_, n)) ++m2m;
      }
    }
    std::sort(members.begin(), members.end());
    auto what = [&] {
      return "tvm: fuse " + detail::node_label(g_, real_or_cat(src)) + " into " + detail::node_label(g_, real_or_cat(sink)) +
             " (group " + detail::node_list(g_, members) + ")";
    };
    if (static_cast<int>(members.size()) > hooks_.tvm_max_group) {
      note(what() + ": refused, more than tvm_max_group=" + std::to_string(hooks_.tvm_max_group) + " ops");
      return;
    }
    if (m2m > 1) {
      note(what() + ": refused, two Many-to-Many nodes in one group");
      return;
    }
    // Same code generator as the other modes: a Many-to-Many kernel must take the inputs its group
    // computes without writing them to memory.
    if (const char* why = detail::m2m_input_violation(g_, hooks_, members)) {
      note(what() + ": refused, " + why);
      return;
    }
    std::vector<int> units;
    for (int n : members) units.push_back(dag_.unit(n));
    std::sort(units.begin(), units.end());
    units.erase(std::unique(units.begin(), units.end()), units.end());
    if (units.size() > 1 && dag_.merge_creates_cycle(units)) {
      note(what() + ": refused, a path would leave the group and re-enter it (cycle)");
      return;
    }
    if (units.size() > 1) dag_.merge(units);
    for (int i : path) merge_from_to(i, sink);
  }

  // A virtual tuple is reported as the cat it feeds.
  int real_or_cat(int entry) const {
    for (size_t i = static_cast<size_t>(entry); i < entries_.size(); ++i)
      if (entries_[i].node >= 0) return entries_[i].node;
    return 0;
  }

  void run_fuse(int phase) {
    for (size_t idx = 0; idx < entries_.size(); ++idx) {
      const int i = static_cast<int>(idx);
      // TVM reads the pattern of the node's own group record, not its root's.
      const PatternKind own = groups_[idx].pattern;
      if (own == P::Opaque) continue;
      const int dom = dom_parent_[idx];
      if (dom < 0) continue;
      const PatternKind dom_edge = dom_pattern_[idx];

      if (phase == 2) {
        // Injective ops fuse into a tuple that already went into its injective consumer.
        if (own > P::Injective) continue;
        const int dom_root = find(dom);
        if (groups_[static_cast<size_t>(dom_root)].pattern == P::Tuple) continue;
        if (groups_[static_cast<size_t>(dom)].pattern == P::Tuple &&
            groups_[static_cast<size_t>(dom_root)].pattern <= P::Injective) {
          if (check_path(i, dom, [](PatternKind k, bool) { return k <= P::Injective; })) commit_fuse(i, dom);
        }
        continue;
      }
      if (find(i) == find(dom)) continue;
      // Tuple fields wait for phase 2.
      if (groups_[static_cast<size_t>(dom)].pattern == P::Tuple) continue;
      if (own == P::OutEWiseFusable) {
        if (phase != 0) continue;
        if (dom_edge == P::ElemWise &&
            check_path(i, dom, [](PatternKind k, bool) { return k <= P::Broadcast; }))
          commit_fuse(i, dom);
      } else if (own <= P::Broadcast) {
        if (dom_edge <= P::Injective || dom_edge == P::CommReduce) {
          auto cond = [](PatternKind k, bool is_sink) {
            if (!is_sink) return k <= P::Injective;
            return k <= P::Broadcast || k == P::CommReduce || k == P::Injective || k == P::OutEWiseFusable;
          };
          if (check_path(i, dom, cond)) commit_fuse(i, dom);
        }
      } else if (own == P::Injective || own == P::Tuple) {
        // Deferred to phase 1 so that conv groups finish first.
        if (phase != 1) continue;
        if (check_path(i, dom, [](PatternKind k, bool) { return k <= P::Injective; })) commit_fuse(i, dom);
      }
      // kCommReduce never starts a fusion; it can only be a sink.
    }
  }

  // Visited marks by generation, so a path walk costs what it visits, not the whole graph.
  void new_visit() {
    visited_.resize(entries_.size(), 0);
    ++visit_gen_;
  }
  bool seen(int i) {
    if (visited_[static_cast<size_t>(i)] == visit_gen_) return true;
    visited_[static_cast<size_t>(i)] = visit_gen_;
    return false;
  }

  void note(const std::string& line) {
    if (logged_.insert(line).second) log_.push_back(line);
  }

  const ecg::Graph& g_;
  const PlanHooks& hooks_;
  const detail::Adjacency adj_;
  detail::UnitDag dag_;            // the groups' real nodes, kept in step with the union-find
  const int n_real_;
  std::vector<Entry> entries_;     // topological order, virtual tuples just before their cat
  std::vector<int> entry_of_;      // ECG node id -> entry
  std::vector<int> dom_parent_;    // immediate post-dominator entry, -1 if none
  std::vector<int> depth_;
  std::vector<PatternKind> dom_pattern_;  // strongest edge pattern on the way to dom_parent_
  std::vector<Group> groups_;
  std::vector<unsigned> visited_;
  unsigned visit_gen_ = 0;
  std::vector<std::string> log_;
  std::unordered_set<std::string> logged_;
};

}  // namespace

Plan plan_tvm(const ecg::Graph& g, const PlanHooks& hooks) { return TvmPlanner(g, hooks).run(); }

}  // namespace dnnfusion::fusion
