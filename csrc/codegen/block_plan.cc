#include "codegen/block_plan.h"

#include <algorithm>
#include <set>

#include "codegen/expr_dag.h"
#include "common/error.h"
#include "ecg/op_registry.h"

namespace dnnfusion::codegen {

using ecg::Graph;
using ecg::Node;

bool is_f32(const Graph& g, int v) { return v >= 0 && g.value(v).dtype == DType::Float32; }

bool identity_view(const StridedView& v, const std::vector<int64_t>& shape) {
  return v.offset == 0 && v.shape == shape && v.is_contiguous();
}

bool BlockPlan::is_materialized(int v) const { return std::binary_search(materialized.begin(), materialized.end(), v); }

bool BlockPlan::produced_inside(const Graph& g, int v) const {
  return v >= 0 && g.value(v).producer >= 0 && std::binary_search(nodes.begin(), nodes.end(), g.value(v).producer);
}

std::function<bool(int)> BlockPlan::leaves_of(const Graph& g, int top) const {
  return [this, &g, top](int v) {
    if (!produced_inside(g, v)) return true;
    if (g.value(v).producer == dominant) return true;
    return v != top && is_materialized(v);
  };
}

namespace {

// If `view` (a view of a contiguous tensor of shape `base`) only permutes its dimensions, the
// strides (over `base`'s shape) at which `base`'s elements sit in a contiguous tensor of the
// view's shape; empty otherwise.
std::vector<int64_t> inverse_permutation_strides(const StridedView& view, const std::vector<int64_t>& base) {
  if (view.offset != 0) return {};
  const std::vector<int64_t> cb = StridedView::contiguous(base).strides;
  const std::vector<int64_t> cv = StridedView::contiguous(view.shape).strides;
  std::vector<int64_t> out(base.size(), 0);
  std::vector<char> used(base.size(), 0);
  for (size_t j = 0; j < view.shape.size(); ++j) {
    if (view.shape[j] == 1) continue;
    bool found = false;
    for (size_t i = 0; i < base.size() && !found; ++i)
      if (!used[i] && base[i] == view.shape[j] && cb[i] == view.strides[j]) {
        used[i] = 1;
        out[i] = cv[j];
        found = true;
      }
    if (!found) return {};
  }
  for (size_t i = 0; i < base.size(); ++i)
    if (base[i] != 1 && !used[i]) return {};
  return out;
}

// Plans one multi-node block: grows the materialized set until every stage has index arithmetic.
class BlockPlanner {
 public:
  BlockPlanner(const Graph& g, const fusion::Block& blk, const runtime::OpKernel* kernel, BlockPlan& p)
      : g_(g), dk_(kernel), p_(p), d_(blk.dominant), d_out_(d_ >= 0 ? g.node(d_).outputs[0] : -1) {}

  void run() {
    initial_materialized();
    if (d_ >= 0) mark_around_dominant();
    for (size_t attempt = 0;; ++attempt) {
      DNNF_CHECK(attempt <= g_.values().size(), "block plan for block ", p_.block, " does not converge");
      p_.materialized.assign(mat_.begin(), mat_.end());
      const int need = attempt_plan();
      if (need < 0) break;
      DNNF_CHECK(!mat_.count(need), "block plan for block ", p_.block, " needs value ", need, " twice");
      mat_.insert(need);
    }
    report();
  }

 private:
  bool inside(int v) const { return p_.produced_inside(g_, v); }
  int producer(int v) const { return g_.value(v).producer; }

  // Values leaving the block: graph outputs and values read by other blocks.
  void initial_materialized() {
    for (int n : p_.nodes)
      for (int v : g_.node(n).outputs) {
        const auto& val = g_.value(v);
        bool external = val.is_output;
        for (int u : val.users)
          if (!std::binary_search(p_.nodes.begin(), p_.nodes.end(), u)) external = true;
        if (external) mat_.insert(v);
      }
  }

  // The dominant op's in-block ancestors (pre_), its descendants (after_d_), its prologue input,
  // and the inputs its kernel can take neither as a prologue nor through strides.
  void mark_around_dominant() {
    pre_.assign(g_.nodes().size(), 0);
    after_d_.assign(g_.nodes().size(), 0);
    std::vector<int> stack(g_.node(d_).inputs.begin(), g_.node(d_).inputs.end());
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      if (!inside(v) || pre_[producer(v)]) continue;
      pre_[producer(v)] = 1;
      for (int in : g_.node(producer(v)).inputs) stack.push_back(in);
    }
    const Node& dn = g_.node(d_);
    for (size_t i = 0; i < dn.inputs.size(); ++i) {
      const int v = dn.inputs[i];
      if (!inside(v)) continue;
      if (i == 0 && dk_->prologue_hook && is_f32(g_, v) && !mat_.count(v) &&
          std::count(dn.inputs.begin(), dn.inputs.end(), v) == 1)
        p_.prologue_value = v;
      else if (!(dk_->strided_inputs >> i & 1u))
        mat_.insert(v);
      // else: read through index arithmetic if the value is a pure view (decided per attempt)
    }
    for (int n : p_.nodes) {  // ascending = topological
      if (n == d_) after_d_[n] = 1;
      for (int in : g_.node(n).inputs)
        if (inside(in) && after_d_[producer(in)]) after_d_[n] = 1;
    }
  }

  // One stage: an alias when the value is a contiguous view of one buffer, else a loop.
  int stage(int v, std::vector<BlockPlan::Stage>& into) {
    ExprBuilder b(g_, p_.leaves_of(g_, v));
    const int e = b.of_value(v);
    if (e == ExprBuilder::kNeedsMaterialize) return b.need();
    BlockPlan::Stage st;
    st.value = v;
    const Expr& ex = b.exprs[e];
    if (ex.kind == Expr::Kind::Leaf && !g_.value(v).is_output && b.leaves[ex.leaf].view.is_contiguous()) {
      st.alias = true;
      st.alias_of = b.leaves[ex.leaf].value;
      st.elem_offset = b.leaves[ex.leaf].view.offset;
    }
    into.push_back(st);
    return -1;
  }

  // The value the kernel's epilogue can write in place of its output: the only value after it that
  // reads the output, listing the output's elements in their own order (a reshape at most).
  int choose_epilogue(const std::vector<int>& post, int& need) {
    if (!dk_->epilogue_hook || !is_f32(g_, d_out_) || mat_.count(d_out_)) return -1;
    int candidates = 0, target = -1;
    bool ok = true;
    for (int v : post) {
      ExprBuilder b(g_, p_.leaves_of(g_, v));
      const int e = b.of_value(v);
      if (e == ExprBuilder::kNeedsMaterialize) return need = b.need(), -1;
      if (!b.references(e, d_out_)) continue;
      ++candidates;
      target = v;
      if (g_.value(v).numel() != g_.value(d_out_).numel() || g_.value(v).dtype != DType::Float32) ok = false;
      for (int li : b.reachable_leaves(e)) {
        const Leaf& l = b.leaves[li];
        if (l.value == d_out_ && !identity_view(l.view, g_.value(v).shape)) ok = false;
      }
    }
    return candidates == 1 && ok ? target : -1;
  }

  // A permute of the kernel's output (its only reader) becomes the kernel's store strides.
  int choose_store(int& need) {
    if (p_.epilogue_target >= 0 || mat_.count(d_out_) || !dk_->strided_output || !is_f32(g_, d_out_) ||
        g_.value(d_out_).is_output || g_.value(d_out_).users.size() != 1)
      return -1;
    const int user = g_.value(d_out_).users[0];
    if (!std::binary_search(p_.nodes.begin(), p_.nodes.end(), user) || !is_index_op(g_.node(user).op)) return -1;
    const int u = g_.node(user).outputs[0];
    ExprBuilder b(g_, p_.leaves_of(g_, u));
    const int e = b.of_value(u);
    if (e == ExprBuilder::kNeedsMaterialize) return need = b.need(), -1;
    const Expr& ex = b.exprs[e];
    if (ex.kind != Expr::Kind::Leaf || b.leaves[ex.leaf].value != d_out_ || !is_f32(g_, u)) return -1;
    p_.store_strides = inverse_permutation_strides(b.leaves[ex.leaf].view, g_.value(d_out_).shape);
    const auto& out_shape = g_.value(d_out_).shape;
    // Kernels store whole rows (runtime::OpKernel::strided_output): the innermost dim stays put.
    if (p_.store_strides.empty() || (p_.store_strides.back() != 1 && !out_shape.empty() && out_shape.back() > 1)) {
      p_.store_strides.clear();
      return -1;
    }
    if (!mat_.count(u)) return need = u, -1;  // the permuted tensor is what gets written
    return u;
  }

  // Operands that are data movement of a materialized value: the kernel reads them strided.
  int strided_operands() {
    const Node& dn = g_.node(d_);
    for (size_t i = 0; i < dn.inputs.size(); ++i) {
      const int v = dn.inputs[i];
      if (!inside(v) || v == p_.prologue_value || mat_.count(v)) continue;
      ExprBuilder b(g_, p_.leaves_of(g_, v));
      const int e = b.of_value(v);
      if (e == ExprBuilder::kNeedsMaterialize) return b.need();
      if (b.exprs[e].kind != Expr::Kind::Leaf) return v;
      const Leaf& l = b.leaves[b.exprs[e].leaf];
      p_.strided_operands.push_back({static_cast<int>(i), l.value, l.view.strides, l.view.offset});
    }
    return -1;
  }

  // Fills the plan for the current materialized set; returns -1, or a value to materialize first.
  int attempt_plan() {
    p_.before.clear();
    p_.after.clear();
    p_.strided_operands.clear();
    p_.store_strides.clear();
    p_.epilogue_target = p_.store_target = -1;
    std::vector<int> order(mat_.begin(), mat_.end());
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return producer(a) != producer(b) ? producer(a) < producer(b) : a < b;
    });
    if (d_ < 0) {
      for (int v : order)
        if (int need = stage(v, p_.before); need >= 0) return need;
      return -1;
    }
    // Values the dominant op reads, and values that do not depend on it (its epilogue may read them).
    for (int v : order)
      if (pre_[producer(v)] || !after_d_[producer(v)])
        if (int need = stage(v, p_.before); need >= 0) return need;
    std::vector<int> post;
    for (int v : order)
      if (after_d_[producer(v)] && producer(v) != d_) post.push_back(v);
    int need = -1;
    p_.epilogue_target = choose_epilogue(post, need);
    if (need >= 0) return need;
    p_.store_target = choose_store(need);
    if (need >= 0) return need;
    if (p_.store_target < 0) p_.store_strides.clear();
    if (p_.epilogue_target < 0 && p_.store_target < 0 && !mat_.count(d_out_)) return d_out_;
    if (p_.prologue_value >= 0) {
      ExprBuilder b(g_, p_.leaves_of(g_, p_.prologue_value));
      if (b.of_value(p_.prologue_value) == ExprBuilder::kNeedsMaterialize) return b.need();
    }
    if ((need = strided_operands()) >= 0) return need;
    for (int v : post)
      if (v != p_.epilogue_target && v != p_.store_target)
        if ((need = stage(v, p_.after)) >= 0) return need;
    return -1;
  }

  // Bytes the block writes for its own use, and how each in-block edge was realized.
  void report() {
    for (int v : mat_) {
      bool internal = !g_.value(v).is_output;
      for (int u : g_.value(v).users)
        if (!std::binary_search(p_.nodes.begin(), p_.nodes.end(), u)) internal = false;
      if (internal) p_.internal_bytes += g_.value(v).nbytes();
    }
    for (int n : p_.nodes)
      for (int in : g_.node(n).inputs) {
        if (!inside(in)) continue;
        const Node& pn = g_.node(producer(in));
        const Node& c = g_.node(n);
        std::string rule;
        if (in == d_out_ && p_.epilogue_target >= 0) rule = "epilogue";
        else if (in == d_out_ && p_.store_target >= 0) rule = "strided store";
        else if (mat_.count(in) || in == d_out_) rule = "materialized";
        else if (n == d_) rule = in == p_.prologue_value ? "prologue" : "strided operand";
        else if (is_index_op(c.op)) rule = "index arithmetic";
        else rule = "inline";
        p_.edge_rules[std::string(ecg::mapping_type_name(pn.info->mapping)) + " -> " +
                      ecg::mapping_type_name(c.info->mapping) + ": " + rule]++;
      }
  }

  const Graph& g_;
  const runtime::OpKernel* dk_;
  BlockPlan& p_;
  const int d_, d_out_;
  std::set<int> mat_;
  std::vector<char> pre_, after_d_;
};

}  // namespace

BlockPlan plan_block(const Graph& g, const fusion::Plan& plan, int index, const runtime::OpKernel* kernel) {
  const fusion::Block& blk = plan.blocks.at(static_cast<size_t>(index));
  BlockPlan p;
  p.block = index;
  p.nodes = blk.nodes;
  std::sort(p.nodes.begin(), p.nodes.end());
  p.dominant = blk.dominant;
  if (p.nodes.size() == 1) return p;
  DNNF_CHECK(p.dominant < 0 || kernel != nullptr, "block ", index, ": no kernel for its dominant op ",
             g.node(p.dominant).op);
  BlockPlanner(g, blk, kernel, p).run();
  return p;
}

}  // namespace dnnfusion::codegen
