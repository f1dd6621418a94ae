// The expression DAG of a fused block's stage (DNNFusion §4.4): a value of the block as a tree of
// its producers back to the stage's leaves, where One-to-One ops are operator nodes, data movement
// only changes the strided view at the leaves (view_compose), scalar float constants become
// literals, and equal sub-trees exist once (hash-consing). Any target's emitter walks it.
// Precondition: is_leaf(v) is true for every value produced outside the block (and for block
// values the stage reads from memory). Postcondition of of_value(): the expression computes v in
// v's own coordinates, or kNeedsMaterialize with need() naming the in-block value that no index
// arithmetic reaches (it must be written to memory first).
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/view_compose.h"
#include "ecg/graph.h"

namespace dnnfusion::codegen {

struct Leaf {
  int value;
  StridedView view;
};

struct Expr {
  enum class Kind { Leaf, Literal, Op } kind = Kind::Op;
  int leaf = -1;        // Leaf: index into ExprBuilder::leaves
  double literal = 0;   // Literal
  int node = -1;        // Op: the ECG node it computes
  std::vector<int> kids;  // Op: one per node input (-1: absent optional operand)
  bool is_bool = false;
};

class ExprBuilder {
 public:
  static constexpr int kNeedsMaterialize = -3;

  ExprBuilder(const ecg::Graph& g, std::function<bool(int)> is_leaf) : g_(g), is_leaf_(std::move(is_leaf)) {}

  std::vector<Leaf> leaves;
  std::vector<Expr> exprs;

  // The expression of value v (index into exprs), or kNeedsMaterialize (see need()).
  int of_value(int v);
  // After of_value returned kNeedsMaterialize: the value to write to memory before retrying.
  int need() const { return need_; }
  // Leaves the expression rooted at e reads (the DAG also holds leaves of sub-expressions that
  // data movement replaced).
  std::vector<int> reachable_leaves(int e) const;
  // Whether the expression rooted at e reads `value` at some leaf.
  bool references(int e, int value) const;

 private:
  using ViewMap = std::function<std::optional<StridedView>(const StridedView&)>;
  int map_leaves(int e, const ViewMap& f);  // -2 when f refuses a leaf
  int map_rec(int e, const ViewMap& f, std::map<int, int>& memo);
  int intern(Expr ex, const std::string& key);
  int leaf_expr(int value, const StridedView& view);
  int make_leaf(int v);
  int op_expr(const Expr& ex);
  int expand(int v);
  int needs(int v) {
    need_ = v;
    return kNeedsMaterialize;
  }

  const ecg::Graph& g_;
  std::function<bool(int)> is_leaf_;
  std::map<int, int> memo_;
  std::map<std::string, int> index_;
  int need_ = -1;
};

}  // namespace dnnfusion::codegen
