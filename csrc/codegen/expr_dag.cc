#include "codegen/expr_dag.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "common/error.h"

namespace dnnfusion::codegen {

namespace {
std::string view_key(const StridedView& v) {
  std::ostringstream os;
  os << v.offset << ':';
  for (size_t i = 0; i < v.shape.size(); ++i) os << v.shape[i] << '/' << v.strides[i] << ',';
  return os.str();
}
}  // namespace

int ExprBuilder::of_value(int v) {
  auto it = memo_.find(v);
  if (it != memo_.end()) return it->second;
  const int e = is_leaf_(v) ? make_leaf(v) : expand(v);
  if (e != kNeedsMaterialize) memo_[v] = e;
  return e;
}

std::vector<int> ExprBuilder::reachable_leaves(int e) const {
  std::vector<int> out;
  std::set<int> seen;
  std::function<void(int)> rec = [&](int x) {
    if (x < 0 || !seen.insert(x).second) return;
    if (exprs[x].kind == Expr::Kind::Leaf) out.push_back(exprs[x].leaf);
    for (int k : exprs[x].kids) rec(k);
  };
  rec(e);
  return out;
}

bool ExprBuilder::references(int e, int value) const {
  for (int li : reachable_leaves(e))
    if (leaves[li].value == value) return true;
  return false;
}

int ExprBuilder::map_leaves(int e, const ViewMap& f) {
  std::map<int, int> memo;
  return map_rec(e, f, memo);
}

int ExprBuilder::intern(Expr ex, const std::string& key) {
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  exprs.push_back(std::move(ex));
  index_[key] = static_cast<int>(exprs.size()) - 1;
  return static_cast<int>(exprs.size()) - 1;
}

int ExprBuilder::leaf_expr(int value, const StridedView& view) {
  const std::string key = "L" + std::to_string(value) + "@" + view_key(view);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  leaves.push_back(Leaf{value, view});
  Expr ex;
  ex.kind = Expr::Kind::Leaf;
  ex.leaf = static_cast<int>(leaves.size()) - 1;
  ex.is_bool = g_.value(value).dtype == DType::Bool;
  return intern(ex, key);
}

int ExprBuilder::make_leaf(int v) {
  const ecg::Value& val = g_.value(v);
  if (val.kind == ecg::ValueKind::Constant && val.numel() == 1 && val.dtype == DType::Float32 && val.data) {
    float f;
    std::memcpy(&f, val.data, sizeof f);
    Expr ex;
    ex.kind = Expr::Kind::Literal;
    ex.literal = f;
    char key[64];
    std::snprintf(key, sizeof key, "C%a", static_cast<double>(f));
    return intern(ex, key);
  }
  return leaf_expr(v, StridedView::contiguous(val.shape));
}

int ExprBuilder::map_rec(int e, const ViewMap& f, std::map<int, int>& memo) {
  if (e < 0) return e;
  auto it = memo.find(e);
  if (it != memo.end()) return it->second;
  const Expr ex = exprs[e];
  int r = e;
  if (ex.kind == Expr::Kind::Leaf) {
    auto nv = f(leaves[ex.leaf].view);
    if (!nv) return -2;
    r = leaf_expr(leaves[ex.leaf].value, *nv);
  } else if (ex.kind == Expr::Kind::Op) {
    Expr ne = ex;
    for (auto& k : ne.kids) {
      k = map_rec(k, f, memo);
      if (k == -2) return -2;
    }
    r = op_expr(ne);
  }
  memo[e] = r;
  return r;
}

int ExprBuilder::op_expr(const Expr& ex) {
  std::string key = "O" + std::to_string(ex.node) + "(";
  for (int k : ex.kids) key += std::to_string(k) + ",";
  return intern(ex, key + ")");
}

// Expression of value v in v's own coordinates, from its producer.
int ExprBuilder::expand(int v) {
  const ecg::Value& val = g_.value(v);
  const ecg::Node& n = g_.node(val.producer);
  if (is_index_op(n.op)) {
    const int in = n.inputs[0];
    const int e = of_value(in);
    if (e == kNeedsMaterialize) return e;
    const int r = map_leaves(e, [&](const StridedView& sv) { return compose_view(g_, n, sv); });
    if (r != -2) return r;
    if (is_leaf_(in)) DNNF_THROW("no index arithmetic for ", g_.describe_node(n.id));
    return needs(in);  // materialized, the view composes with a contiguous buffer
  }
  const auto& out_shape = val.shape;
  Expr ex;
  ex.node = n.id;
  const bool bn = n.op == "_native_batch_norm_legit_no_training";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const int in = n.inputs[i];
    if (in < 0) {
      ex.kids.push_back(-1);
      continue;
    }
    int e = of_value(in);
    if (e == kNeedsMaterialize) return e;
    const auto& in_shape = g_.value(in).shape;
    auto broadcast = [&](const StridedView& sv) { return std::optional<StridedView>(broadcast_view(sv, out_shape)); };
    if (bn && i >= 1) {  // per-channel parameter [C] -> [C, 1, ..., 1] against [N, C, ...]
      std::vector<int64_t> s(out_shape.size() - 1, 1);
      s[0] = in_shape[0];
      e = map_leaves(e, [&](const StridedView& sv) { return reshape_view(sv, s); });
      if (e == -2) return needs(in);
      e = map_leaves(e, broadcast);
    } else if (in_shape != out_shape) {
      e = map_leaves(e, broadcast);
    }
    ex.kids.push_back(e);
  }
  return op_expr(ex);
}

}  // namespace dnnfusion::codegen
