// DNNFusion's fusion-plan exploration (PLDI'21 §4.3, Listing 1).
// Precondition: a well-formed ECG (csrc/ecg/README.md). Postcondition: a Plan meeting fusion_plan.h's
// contract, where additionally every block respects hooks.max_block_ops / max_block_inputs (a
// singleton may exceed the input budget: it has to run somewhere) and was grown only through
// green cells and yellow cells the profiler approved.
//
// Growth follows Listing 1: seed = the unfused One-to-One node with the smallest IRS; first the
// successors, recursively (each merged node's successors are tried next); then the predecessors of
// every node of the block, recursively (a merged predecessor's own predecessors are tried next).
// Listing 1 only names the seed's predecessors; trying those of the successor-phase nodes too lets
// e.g. a residual add reached as a successor take in the branch producing its other operand, which
// would otherwise be left to a later seed that can no longer join the add's (finished) block.
// Nodes already in a block are final (Listing 1 removes each block from unfused_ops), so later
// seeds never steal them.
#include <algorithm>
#include <tuple>
#include <unordered_set>

#include "common/error.h"
#include "fusion/fusion_plan.h"
#include "fusion/plan_util.h"

namespace dnnfusion::fusion {

namespace {

using ecg::MappingType;

class DnnFusionPlanner {
 public:
  DnnFusionPlanner(const ecg::Graph& g, const PlanHooks& hooks)
      : g_(g), hooks_(hooks), adj_(detail::build_adjacency(g)), dag_(adj_), n_(static_cast<int>(g.nodes().size())) {
    fused_.assign(static_cast<size_t>(n_), 0);
    in_block_.assign(static_cast<size_t>(n_), 0);
  }

  Plan run() {
    for (int seed : seeds_by_irs()) {
      if (fused_[static_cast<size_t>(seed)]) continue;
      grow(seed);
    }
    // Everything no seed reached is still a unit of its own: a singleton block.
    std::vector<int> group_of(static_cast<size_t>(n_));
    for (int n = 0; n < n_; ++n) group_of[static_cast<size_t>(n)] = dag_.unit(n);
    return detail::finish_plan(g_, group_of, std::move(log_));
  }

 private:
  enum class Dir { Successor, Predecessor };

  // One-to-One nodes by IRS (Listing 1), then — our extension — data-movement nodes, then
  // Many-to-Many nodes, each by IRS, so that the nodes no One-to-One block reached still get their
  // green and profiled yellow neighbours (data movement first: it can become a strided operand of
  // the kernel it feeds; but data movement right after a Many-to-Many node comes last, so that its
  // producer's block can take it as a strided store, e.g. attention's head-merging permute).
  std::vector<int> seeds_by_irs() const {
    std::vector<std::tuple<int, int64_t, int>> cand;
    for (int n = 0; n < n_; ++n) {
      const MappingType t = detail::node_mapping(g_, n);
      int tier = t == MappingType::OneToOne ? 0 : t == MappingType::ManyToMany ? 2 : 1;
      if (tier == 1) {
        const int in = g_.node(n).inputs.empty() ? -1 : g_.node(n).inputs[0];
        const int p = in >= 0 ? g_.value(in).producer : -1;
        if (p >= 0 && detail::is_many_to_many(g_, p)) tier = 3;
      }
      cand.emplace_back(tier, ecg::node_irs_bytes(g_, g_.node(n)), n);
    }
    std::sort(cand.begin(), cand.end());  // ties: the earlier node first, for reproducible plans
    std::vector<int> out;
    for (const auto& c : cand) out.push_back(std::get<2>(c));
    return out;
  }

  bool fusible(int n) const { return !hooks_.fusible || hooks_.fusible(g_, n); }

  void grow(int seed) {
    seed_ = seed;
    block_.assign(1, seed);
    type_ = detail::node_mapping(g_, seed);
    m2m_ = detail::is_many_to_many(g_, seed) ? 1 : 0;
    mark(seed);
    if (!fusible(seed)) {
      note("seed " + detail::node_label(g_, seed) + " is not fusible: it stays alone");
      finish_block();
      return;
    }
    for (int s : adj_.succ[static_cast<size_t>(seed)]) try_successor(s);
    // Predecessor phase over every block node, in the order they joined; merged predecessors are
    // appended and so get their own predecessors tried (Listing 1's recursion).
    for (size_t i = 0; i < block_.size(); ++i) {
      const int member = block_[i];
      for (int p : adj_.pred[static_cast<size_t>(member)]) try_merge(p, Dir::Predecessor);
    }
    finish_block();
  }

  void try_successor(int cand) {
    if (!try_merge(cand, Dir::Successor)) return;
    for (int s : adj_.succ[static_cast<size_t>(cand)]) try_successor(s);
  }

  bool try_merge(int cand, Dir dir) {
    if (fused_[static_cast<size_t>(cand)]) return false;  // in this block or a finished one
    const MappingType ct = detail::node_mapping(g_, cand);
    // Table 3's row is the op that runs first: the block for a successor, the candidate for a
    // predecessor.
    const FuseRule rule = dir == Dir::Successor ? table3(type_, ct) : table3(ct, type_);
    const MappingType first = dir == Dir::Successor ? type_ : ct, second = dir == Dir::Successor ? ct : type_;
    const std::string what = block_desc() + " + " + detail::node_label(g_, cand) + " (" +
                             (dir == Dir::Successor ? "successor" : "predecessor") + ", " +
                             ecg::mapping_type_name(first) + " then " + ecg::mapping_type_name(second) + ", " +
                             cell_name(rule.cell) + ")";
    if (rule.cell == Cell::Red) {
      note(what + ": fuse_break");
      return false;
    }
    if (const char* why = constraint_violation(cand)) {
      note(what + ": refused, " + why);
      return false;
    }
    // A free merge of data movement keeps the block's type: index arithmetic does not change what
    // the block's kernel computes, so e.g. a reshape between a GEMM and its activation does not
    // turn the pair into a (yellow) Many-to-Many + Reorganize question.
    const bool free = hooks_.free_merge && hooks_.free_merge(g_, block_, cand);
    const bool keeps_type = free && ct != MappingType::ManyToMany;
    if (dir == Dir::Successor && !free && is_data_movement(ct) && feeds_from_materialized_value(cand)) {
      // E.g. relu -> (next conv, re-blocking permute): the relu's output is written for the conv
      // anyway and the permute walks another index space, so the block would run two loops, the
      // same as apart, while the relu could no longer be its producer's epilogue.
      note(what + ": refused, its input is materialized for other consumers, fusing saves no loop");
      return false;
    }
    if (rule.cell == Cell::Yellow && free) {
      note(what + ": data movement absorbed as index arithmetic, fused without measuring");
    } else if (rule.cell == Cell::Yellow) {
      if (!hooks_.yellow_is_faster) {
        note(what + ": no profile information (profiling off), kept apart");
        return false;
      }
      std::vector<int> sorted = block_;
      std::sort(sorted.begin(), sorted.end());
      const bool faster = hooks_.yellow_is_faster(g_, sorted, cand);
      note(what + ": profile says " + (faster ? "fusing is not slower, fused" : "fusing is slower, kept apart"));
      if (!faster) return false;
    }
    block_.push_back(cand);
    if (!keeps_type) type_ = rule.result;
    if (ct == MappingType::ManyToMany) ++m2m_;
    mark(cand);
    return true;
  }

  static bool is_data_movement(MappingType t) {
    return t == MappingType::Reorganize || t == MappingType::Shuffle;
  }

  // True if a block value cand depends on (directly or through other block nodes) must be written
  // out anyway: a graph output, or read by a node outside the block other than cand.
  bool feeds_from_materialized_value(int cand) {
    for (int m : block_) in_block_[static_cast<size_t>(m)] = 1;
    bool any = false;
    std::vector<int> stack(g_.node(cand).inputs.begin(), g_.node(cand).inputs.end());
    std::unordered_set<int> seen;
    while (!stack.empty() && !any) {
      const int v = stack.back();
      stack.pop_back();
      if (v < 0 || !seen.insert(v).second) continue;
      const ecg::Value& val = g_.value(v);
      if (val.producer < 0 || !in_block_[static_cast<size_t>(val.producer)]) continue;
      if (val.is_output) any = true;
      for (int u : val.users)
        if (u != cand && !in_block_[static_cast<size_t>(u)]) any = true;
      for (int in : g_.node(val.producer).inputs) stack.push_back(in);
    }
    for (int m : block_) in_block_[static_cast<size_t>(m)] = 0;
    return any;
  }

  // The refusal reason, or nullptr if block_ + cand passes every constraint.
  const char* constraint_violation(int cand) {
    if (!fusible(cand)) return "the code generator cannot fuse it";
    if (detail::is_many_to_many(g_, cand) && m2m_ > 0) return "the block already has a Many-to-Many node";
    if (static_cast<int>(block_.size()) + 1 > hooks_.max_block_ops) return "max_block_ops reached";
    if (const char* why = m2m_input_violation(cand)) return why;
    std::vector<int> members = block_;
    members.push_back(cand);
    if (outside_inputs(members) > hooks_.max_block_inputs) return "too many distinct activation inputs (max_block_inputs)";
    if (dag_.merge_creates_cycle({dag_.unit(seed_), dag_.unit(cand)}))
      return "a path would leave the block and re-enter it (cycle)";
    return nullptr;
  }

  // A Many-to-Many node must be able to consume every input the block computes for it in place.
  const char* m2m_input_violation(int cand) const {
    std::vector<int> members = block_;
    members.push_back(cand);
    std::sort(members.begin(), members.end());
    return detail::m2m_input_violation(g_, hooks_, members);
  }

  int outside_inputs(const std::vector<int>& members) {
    for (int m : members) in_block_[static_cast<size_t>(m)] = 1;
    std::vector<int> vals;
    for (int m : members) {
      for (int v : g_.node(m).inputs) {
        if (v < 0) continue;
        const ecg::Value& val = g_.value(v);
        if (val.is_compile_time()) continue;
        if (val.producer >= 0 && in_block_[static_cast<size_t>(val.producer)]) continue;
        vals.push_back(v);
      }
    }
    for (int m : members) in_block_[static_cast<size_t>(m)] = 0;
    std::sort(vals.begin(), vals.end());
    return static_cast<int>(std::unique(vals.begin(), vals.end()) - vals.begin());
  }

  void mark(int n) {
    fused_[static_cast<size_t>(n)] = 1;
    if (n != seed_) dag_.merge({dag_.unit(seed_), dag_.unit(n)});
  }

  void finish_block() { block_.clear(); }

  std::string block_desc() const {
    return "block of seed " + detail::node_label(g_, seed_) + " [" + std::to_string(block_.size()) + " node(s), " +
           ecg::mapping_type_name(type_) + "]";
  }

  void note(const std::string& line) {
    // The same refusal can be met along several paths; one line explains it.
    if (logged_.insert(line).second) log_.push_back(line);
  }

  const ecg::Graph& g_;
  const PlanHooks& hooks_;
  const detail::Adjacency adj_;
  detail::UnitDag dag_;         // finished blocks, the growing block, and unfused nodes alone
  const int n_;
  std::vector<char> fused_;     // in some block (the growing one included)
  std::vector<char> in_block_;  // scratch for outside_inputs
  int seed_ = -1;
  std::vector<int> block_;      // the growing block, in join order
  MappingType type_ = MappingType::OneToOne;
  int m2m_ = 0;
  std::vector<std::string> log_;
  std::unordered_set<std::string> logged_;
};

}  // namespace

Plan plan_dnnfusion(const ecg::Graph& g, const PlanHooks& hooks) { return DnnFusionPlanner(g, hooks).run(); }

}  // namespace dnnfusion::fusion
