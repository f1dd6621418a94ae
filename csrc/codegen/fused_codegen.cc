#include "codegen/fused_codegen.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "codegen/expr_rules.h"
#include "codegen/kernel_templates.h"
#include "codegen/view_compose.h"
#include "common/error.h"
#include "ecg/op_registry.h"
#include "kernels/cpu/cpu_features.h"
#include "runtime/op_kernels.h"

namespace dnnfusion::codegen {

using ecg::Graph;
using ecg::MappingType;
using ecg::Node;

namespace {

struct Leaf {
  int value;
  StridedView view;
};

struct Expr {
  enum class Kind { Leaf, Literal, Op } kind = Kind::Op;
  int leaf = -1;
  double literal = 0;
  int node = -1;
  std::vector<int> kids;  // -1: absent optional operand
  bool is_bool = false;
};

// Thrown while building an expression when an in-block value has no index arithmetic to its
// consumer: the block then writes that value to memory and starts over.
struct NeedMaterialize {
  int value;
};

std::string view_key(const StridedView& v) {
  std::ostringstream os;
  os << v.offset << ':';
  for (size_t i = 0; i < v.shape.size(); ++i) os << v.shape[i] << '/' << v.strides[i] << ',';
  return os.str();
}

// The expression DAG of one stage, hash-consed so equal sub-trees exist once.
class ExprBuilder {
 public:
  ExprBuilder(const Graph& g, std::function<bool(int)> is_leaf) : g_(g), is_leaf_(std::move(is_leaf)) {}

  std::vector<Leaf> leaves;
  std::vector<Expr> exprs;

  int of_value(int v) {
    auto it = memo_.find(v);
    if (it != memo_.end()) return it->second;
    int e = is_leaf_(v) ? make_leaf(v) : expand(v);
    memo_[v] = e;
    return e;
  }

  // Rebuilds e with every leaf view replaced by f(view); nullopt from f aborts (returns -1).
  int map_leaves(int e, const std::function<std::optional<StridedView>(const StridedView&)>& f) {
    std::map<int, int> memo;
    return map_rec(e, f, memo);
  }

  // Leaves the expression rooted at e reads (the DAG also holds leaves of sub-expressions that
  // data movement replaced).
  std::vector<int> reachable_leaves(int e) const {
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

  bool references(int e, int value) const {
    std::set<int> seen;
    std::function<bool(int)> rec = [&](int x) -> bool {
      if (x < 0 || !seen.insert(x).second) return false;
      const Expr& ex = exprs[x];
      if (ex.kind == Expr::Kind::Leaf) return leaves[ex.leaf].value == value;
      for (int k : ex.kids)
        if (rec(k)) return true;
      return false;
    };
    return rec(e);
  }

 private:
  int intern(Expr ex, const std::string& key) {
    auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    exprs.push_back(std::move(ex));
    index_[key] = static_cast<int>(exprs.size()) - 1;
    return static_cast<int>(exprs.size()) - 1;
  }

  int leaf_expr(int value, const StridedView& view) {
    std::string key = "L" + std::to_string(value) + "@" + view_key(view);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    leaves.push_back(Leaf{value, view});
    Expr ex;
    ex.kind = Expr::Kind::Leaf;
    ex.leaf = static_cast<int>(leaves.size()) - 1;
    ex.is_bool = g_.value(value).dtype == DType::Bool;
    return intern(ex, key);
  }

  int make_leaf(int v) {
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

  int map_rec(int e, const std::function<std::optional<StridedView>(const StridedView&)>& f, std::map<int, int>& memo) {
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

  int op_expr(const Expr& ex) {
    std::string key = "O" + std::to_string(ex.node) + "(";
    for (int k : ex.kids) key += std::to_string(k) + ",";
    return intern(ex, key + ")");
  }

  // Expression of value v in v's own coordinates, from its producer.
  int expand(int v) {
    const ecg::Value& val = g_.value(v);
    const Node& n = g_.node(val.producer);
    if (is_index_op(n.op)) {
      const int in = n.inputs[0];
      int e = of_value(in);
      int r = map_leaves(e, [&](const StridedView& sv) { return compose_view(g_, n, sv); });
      if (r == -2) {
        if (is_leaf_(in)) DNNF_THROW("no index arithmetic for ", g_.describe_node(n.id));
        throw NeedMaterialize{in};
      }
      return r;
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
      const auto& in_shape = g_.value(in).shape;
      if (bn && i >= 1) {  // per-channel parameter [C] -> [C, 1, ..., 1] against [N, C, ...]
        std::vector<int64_t> s(out_shape.size() - 1, 1);
        s[0] = in_shape[0];
        e = map_leaves(e, [&](const StridedView& sv) { return reshape_view(sv, s); });
        if (e == -2) throw NeedMaterialize{in};
        e = map_leaves(e, [&](const StridedView& sv) { return std::optional<StridedView>(broadcast_view(sv, out_shape)); });
      } else if (in_shape != out_shape) {
        e = map_leaves(e, [&](const StridedView& sv) { return std::optional<StridedView>(broadcast_view(sv, out_shape)); });
      }
      ex.kids.push_back(e);
    }
    return op_expr(ex);
  }

  const Graph& g_;
  std::function<bool(int)> is_leaf_;
  std::map<int, int> memo_;
  std::map<std::string, int> index_;
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Names a generated function's text (written with the placeholder `FN`) by its content hash and
// records it: identical functions (same shapes, same ops: the layers of a transformer) are emitted
// once.
std::string add_named_function(const std::string& text, std::map<std::string, std::string>& functions) {
  char hname[32];
  std::snprintf(hname, sizeof hname, "dnnf_%016llx", static_cast<unsigned long long>(fnv1a(text)));
  std::string out;
  for (size_t pos = 0;;) {
    const size_t f = text.find("FN", pos);
    if (f == std::string::npos) {
      out += text.substr(pos);
      break;
    }
    out += text.substr(pos, f - pos) + hname;
    pos = f + 2;
  }
  functions.emplace(hname, out);
  return hname;
}

// Pointer-table positions of the values a generated function reads or writes.
struct ArgTable {
  std::vector<int> values;
  int index_of(int v) {
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] == v) return static_cast<int>(i);
    values.push_back(v);
    return static_cast<int>(values.size()) - 1;
  }
};

enum class StageKind { Loop, Epilogue, Prologue };

// The view lists its buffer's elements in row-major order of `shape` (strides of size-1 dims do
// not matter: a batch-1 transpose is the identity).
bool identity_view(const StridedView& v, const std::vector<int64_t>& shape) {
  return v.offset == 0 && v.shape == shape && v.is_contiguous();
}

struct Access {
  int arg;          // pointer-table index (-1: the hook's `data`)
  bool is_bool;
  std::vector<int64_t> strides;  // over the collapsed dims
  int64_t offset;
};

// Emits one generated function computing `roots` (all of shape `shape`) element by element. For a
// Loop the results go to `outs`; hooks read (epilogue) or write `data`. Returns the function's name.
std::string emit_function(StageKind kind, const Graph& g, const ExprBuilder& b, const std::vector<int>& roots,
                          const std::vector<int>& outs, const std::vector<int64_t>& shape, int self_value, ArgTable& args,
                          std::map<std::string, std::string>& functions) {
  // Accesses: leaves (distinct value+view) and the contiguous outputs.
  std::vector<int> leaf_order;
  std::vector<int> expr_order;
  std::set<int> seen;
  std::function<void(int)> visit = [&](int e) {
    if (e < 0 || !seen.insert(e).second) return;
    for (int k : b.exprs[e].kids) visit(k);
    expr_order.push_back(e);
    if (b.exprs[e].kind == Expr::Kind::Leaf) leaf_order.push_back(e);
  };
  for (int r : roots) visit(r);

  std::vector<int64_t> dims = shape;
  std::vector<std::vector<int64_t>> strides;  // per access, then outputs
  std::vector<int64_t> offsets;
  std::vector<Access> acc;
  for (int e : leaf_order) {
    const Leaf& l = b.leaves[b.exprs[e].leaf];
    int arg = l.value == self_value ? -1 : args.index_of(l.value);
    if (l.value == self_value)
      DNNF_CHECK(identity_view(l.view, shape), "epilogue reads its input at a non-identity index");
    acc.push_back(Access{arg, b.exprs[e].is_bool, l.view.strides, l.view.offset});
  }
  const StridedView cont = StridedView::contiguous(shape);
  std::vector<int> out_args;
  for (int o : outs) {
    out_args.push_back(args.index_of(o));
    acc.push_back(Access{out_args.back(), false, cont.strides, 0});
  }
  const size_t nouts = outs.size();
  const size_t nleaf = leaf_order.size();
  // Collapse: drop size-1 dims, merge neighbours every access walks contiguously.
  {
    std::vector<int64_t> nd;
    std::vector<std::vector<int64_t>> ns(acc.size());
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k] == 1) continue;
      nd.push_back(dims[k]);
      for (size_t a = 0; a < acc.size(); ++a) ns[a].push_back(acc[a].strides[k]);
    }
    if (nd.empty()) {
      nd.push_back(1);
      for (auto& s : ns) s.push_back(0);
    }
    std::vector<int64_t> md{nd[0]};
    std::vector<std::vector<int64_t>> ms(acc.size());
    for (size_t a = 0; a < acc.size(); ++a) ms[a].push_back(ns[a][0]);
    for (size_t k = 1; k < nd.size(); ++k) {
      bool merge = true;
      for (size_t a = 0; a < acc.size(); ++a)
        if (ms[a].back() != ns[a][k] * nd[k]) merge = false;
      if (merge) {
        md.back() *= nd[k];
        for (size_t a = 0; a < acc.size(); ++a) ms[a].back() = ns[a][k];
      } else {
        md.push_back(nd[k]);
        for (size_t a = 0; a < acc.size(); ++a) ms[a].push_back(ns[a][k]);
      }
    }
    dims = md;
    for (size_t a = 0; a < acc.size(); ++a) acc[a].strides = ms[a];
  }
  const size_t rank = dims.size();
  const int64_t inner = dims.back();
  int64_t rows = 1;
  for (size_t k = 0; k + 1 < rank; ++k) rows *= dims[k];
  // One long dimension: split it into chunks so the loop can run in parallel.
  const bool chunked = kind == StageKind::Loop && rank == 1 && inner > 16384;
  const int64_t chunk = 8192;

  std::ostringstream body;
  auto ptr_type = [](bool is_bool, bool out) { return std::string(out ? "float*" : (is_bool ? "const bool*" : "const float*")); };
  body << "  const void* const* p = static_cast<const void* const*>(ctx);\n";
  std::set<int> declared;
  for (size_t a = 0; a < acc.size(); ++a) {
    if (acc[a].arg < 0 || !declared.insert(acc[a].arg).second) continue;
    const bool out = a >= nleaf;
    body << "  " << ptr_type(acc[a].is_bool, out) << " __restrict A" << acc[a].arg << " = static_cast<"
         << ptr_type(acc[a].is_bool, out) << ">(" << (out ? "const_cast<void*>(p[" : "p[") << acc[a].arg
         << (out ? "])" : "]") << ");\n";
  }
  // Per row: the base pointer `prefix`<a> of every access; a row spans dims [0, ndims).
  auto row_bases = [&](const std::string& row, const std::string& indent, size_t ndims, const std::string& prefix) {
    std::ostringstream os;
    os << indent << "int64_t q_ = " << row << ";\n";
    for (int64_t k = static_cast<int64_t>(ndims) - 1; k >= 0; --k) {
      if (k > 0)
        os << indent << "const int64_t c" << k << " = q_ % " << dims[k] << "; q_ /= " << dims[k] << ";\n";
      else
        os << indent << "const int64_t c0 = q_;\n";
    }
    os << indent << "(void)q_;\n";
    for (size_t a = 0; a < acc.size(); ++a) {
      if (acc[a].arg < 0) continue;
      os << indent << "auto* __restrict " << prefix << a << " = A" << acc[a].arg << " + (" << acc[a].offset;
      for (size_t k = 0; k < ndims; ++k)
        if (acc[a].strides[k]) os << " + c" << k << " * " << acc[a].strides[k];
      os << ");\n";
    }
    return os.str();
  };
  // A short innermost dimension (a channel block of an NCHW[x]c transform) would pay the row
  // decomposition every few elements: the loop nest then walks the last two dims itself.
  // Rows of the outer dims times `splits` pieces of the second-to-last one, so that even a single
  // outer row gives the workers something to share.
  const bool two_d = kind == StageKind::Loop && !chunked && rank >= 2 && inner < 64;
  const int64_t d2 = rank >= 2 ? dims[rank - 2] : 1;
  const int64_t outer_rows = rank >= 2 ? rows / d2 : rows;
  const int64_t splits = two_d ? std::min<int64_t>(d2, std::max<int64_t>(1, (8 + outer_rows - 1) / outer_rows)) : 1;
  const int64_t piece = (d2 + splits - 1) / splits;
  auto elem = [&](size_t a) {
    const int64_t s = acc[a].strides.back();
    if (acc[a].arg < 0) return std::string("d_[j]");
    if (s == 0) return "B" + std::to_string(a) + "[0]";
    if (s == 1) return "B" + std::to_string(a) + "[j]";
    return "B" + std::to_string(a) + "[j * " + std::to_string(s) + "]";
  };
  // The element computation, shared by every stage kind.
  std::ostringstream inner_body;
  std::map<int, std::string> name;
  for (int e : expr_order) {
    const Expr& ex = b.exprs[e];
    std::string v = "v" + std::to_string(e);
    if (ex.kind == Expr::Kind::Literal) {
      name[e] = float_literal(ex.literal);
      continue;
    }
    if (ex.kind == Expr::Kind::Leaf) {
      size_t a = std::find(leaf_order.begin(), leaf_order.end(), e) - leaf_order.begin();
      inner_body << "      const " << (ex.is_bool ? "bool " : "float ") << v << " = " << elem(a) << ";\n";
    } else {
      std::vector<std::string> ops;
      for (int k : ex.kids) ops.push_back(k < 0 ? std::string() : name.at(k));
      inner_body << "      const float " << v << " = " << emit_elementwise(g, g.node(ex.node), ops) << ";\n";
    }
    name[e] = v;
  }
  std::ostringstream stores;
  if (kind == StageKind::Loop)
    for (size_t o = 0; o < nouts; ++o) stores << "      " << elem(nleaf + o) << " = " << name.at(roots[o]) << ";\n";
  else
    stores << "      d_[j] = " << name.at(roots[0]) << ";\n";

  std::ostringstream fn;
  if (kind == StageKind::Loop) {
    fn << "static void FN_body(const void* ctx, int64_t r0_, int64_t r1_) {\n" << body.str();
    fn << "  for (int64_t r_ = r0_; r_ < r1_; ++r_) {\n";
    if (chunked) {
      fn << "    const int64_t base_ = r_ * " << chunk << ";\n";
      fn << "    const int64_t n_ = " << inner << " - base_ < " << chunk << " ? " << inner << " - base_ : " << chunk << ";\n";
      for (size_t a = 0; a < acc.size(); ++a)
        fn << "    auto* __restrict B" << a << " = A" << acc[a].arg << " + (" << acc[a].offset << " + base_ * "
           << acc[a].strides[0] << ");\n";
    } else if (two_d) {
      fn << row_bases("r_ / " + std::to_string(splits), "    ", rank - 2, "R");
      fn << "    const int64_t n_ = " << inner << ";\n";
      fn << "    const int64_t i2b_ = (r_ % " << splits << ") * " << piece << ";\n";
      fn << "    const int64_t i2e_ = i2b_ + " << piece << " < " << d2 << " ? i2b_ + " << piece << " : " << d2 << ";\n";
      fn << "    for (int64_t i2_ = i2b_; i2_ < i2e_; ++i2_) {\n";
      for (size_t a = 0; a < acc.size(); ++a)
        if (acc[a].arg >= 0) fn << "    auto* __restrict B" << a << " = R" << a << " + i2_ * " << acc[a].strides[rank - 2] << ";\n";
    } else {
      fn << row_bases("r_", "    ", rank - 1, "B");
      fn << "    const int64_t n_ = " << inner << ";\n";
    }
    fn << "#pragma GCC ivdep\n    for (int64_t j = 0; j < n_; ++j) {\n" << inner_body.str() << stores.str() << "    }\n  }\n"
       << (two_d ? "  }\n" : "") << "}\n";
    const int64_t nrows = chunked ? (inner + chunk - 1) / chunk : two_d ? outer_rows * splits : rows;
    const int64_t per_row = chunked ? chunk : two_d ? inner * piece : inner;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(per_row, 1));
    fn << "extern \"C\" void FN(const void* const* args, const dnnf_parallel* par) {\n"
       << "  par->parallel_for(par->pool, " << nrows << ", " << grain << ", FN_body, args);\n}\n";
  } else {
    fn << "extern \"C\" void FN(const void* ctx, float* data, int64_t start, int64_t count) {\n" << body.str();
    fn << "  int64_t i_ = start;\n  const int64_t end_ = start + count;\n  while (i_ < end_) {\n";
    fn << "    const int64_t row_ = i_ / " << inner << ", j0_ = i_ - row_ * " << inner << ";\n";
    fn << "    const int64_t n_ = " << inner << " - j0_ < end_ - i_ ? " << inner << " - j0_ : end_ - i_;\n";
    fn << row_bases("row_", "    ", rank - 1, "B");
    for (size_t a = 0; a < acc.size(); ++a)
      if (acc[a].arg >= 0) fn << "    B" << a << " += j0_ * " << acc[a].strides.back() << ";\n";
    fn << "    float* __restrict d_ = data + (i_ - start);\n";
    fn << "#pragma GCC ivdep\n    for (int64_t j = 0; j < n_; ++j) {\n" << inner_body.str() << stores.str() << "    }\n";
    fn << "    i_ += n_;\n  }\n}\n";
  }
  return add_named_function(fn.str(), functions);
}

bool is_f32(const Graph& g, int v) { return v >= 0 && g.value(v).dtype == DType::Float32; }

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

}  // namespace

bool free_merge(const Graph& g, const std::vector<int>& block, int cand) {
  std::vector<int> merged = block;
  merged.push_back(cand);
  auto in_merged = [&](int n) { return std::find(merged.begin(), merged.end(), n) != merged.end(); };
  auto is_m2m = [&](int n) {
    const ecg::OpInfo* info = g.node(n).info ? g.node(n).info : ecg::find_op(g.node(n).op);
    return info && info->mapping == MappingType::ManyToMany;
  };
  auto is_reorganize = [&](int n) {
    const ecg::OpInfo* info = g.node(n).info ? g.node(n).info : ecg::find_op(g.node(n).op);
    return info && info->mapping == MappingType::Reorganize;
  };
  auto movable = [&](int n) {
    const Node& x = g.node(n);
    return is_index_op(x.op) && can_fuse(g, n) && x.outputs.size() == 1 && !x.inputs.empty() && x.inputs[0] >= 0;
  };
  // The candidate is data movement; or it is the kernel and the block so far is data movement.
  int d = -1;
  std::vector<int> movers;
  if (movable(cand)) {
    movers.push_back(cand);
    for (int n : block)
      if (is_m2m(n)) d = n;
  } else if (is_m2m(cand)) {
    d = cand;
    for (int n : block) {
      if (!movable(n)) return false;
      movers.push_back(n);
    }
  } else {
    return false;
  }
  const runtime::OpKernel* k = d >= 0 ? runtime::find_kernel(g.node(d).op) : nullptr;
  const int d_out = d >= 0 ? g.node(d).outputs[0] : -1;
  // Reaches the kernel through merged data movement only, and the kernel reads it strided.
  std::function<bool(int)> reaches_strided = [&](int v) {
    bool any = false;
    for (int u : g.value(v).users) {
      if (!in_merged(u)) continue;
      if (u == d) {
        if (m2m_input_fusible(g, d, v) != fusion::PlanHooks::kStrided) return false;
      } else if (movable(u)) {
        if (!reaches_strided(g.node(u).outputs[0])) return false;
      } else {
        return false;
      }
      any = true;
    }
    return any;
  };
  // Keeps the linear element order: a reshape, or a permute that only moves size-1 dims.
  auto order_preserving = [&](int m) {
    if (is_reorganize(m)) return true;
    const Node& x = g.node(m);
    const auto v = compose_view(g, x, StridedView::contiguous(g.value(x.inputs[0]).shape));
    return v && identity_view(*v, g.value(x.outputs[0]).shape);
  };
  for (int m : movers) {
    if (order_preserving(m)) continue;
    if (!k) return false;
    const int in = g.node(m).inputs[0];
    // A permute of the kernel's output, its only reader, that the kernel stores through strides.
    if (k->strided_output && in == d_out && g.value(d_out).users.size() == 1 && !g.value(d_out).is_output) continue;
    if (!reaches_strided(g.node(m).outputs[0])) return false;
  }
  return true;
}

namespace {

// A GEMM operand as the template takes it: pointer-table slot, element offset and strides.
struct GemmOperand {
  int arg;
  int64_t offset, batch_stride, rs, cs;
};

// Operand `slot` of GEMM node dn: its strided leaf from `views`, else the contiguous input.
GemmOperand gemm_operand(const Graph& g, const Node& dn, size_t slot, const std::vector<runtime::Step::InputView>& views,
                         ArgTable& args) {
  for (const auto& v : views)
    if (static_cast<size_t>(v.slot) == slot) {
      const size_t r = v.strides.size();
      return GemmOperand{args.index_of(v.value), v.offset, r == 3 ? v.strides[0] : 0, v.strides[r - 2], v.strides[r - 1]};
    }
  const auto& sh = g.value(dn.inputs[slot]).shape;
  const int64_t rows = sh[sh.size() - 2], cols = sh.back();
  return GemmOperand{args.index_of(dn.inputs[slot]), 0, rows * cols, cols, 1};
}

std::string ptr(const GemmOperand& o) {
  return "static_cast<const float*>(p[" + std::to_string(o.arg) + "]) + " + std::to_string(o.offset);
}

// The template's (bias, bias_mode) arguments: the per-column bias in pointer-table slot bias_arg,
// or none when bias_arg < 0.
std::string bias_args(int bias_arg) {
  if (bias_arg < 0) return "nullptr, dnnf_gemm::kNoBias";
  return "static_cast<const float*>(p[" + std::to_string(bias_arg) + "]), dnnf_gemm::kBiasPerCol";
}

// The text of a template GEMM function up to its call: the epilogue's body again, as an
// always-inlined static function (the micro-kernel's store loop must see it: an out-of-line call
// per tile row costs up to 10% on short-K GEMMs), its functor, and the function's head.
std::string gemm_epilogue_prefix(const std::string& epi_name, const std::map<std::string, std::string>& functions) {
  std::string epi_text = functions.at(epi_name);
  const std::string head = "extern \"C\" void " + epi_name + "(";
  const size_t at = epi_text.find(head);
  DNNF_CHECK(at != std::string::npos, "generated epilogue ", epi_name, " not found");
  epi_text.replace(at, head.size(), "static inline __attribute__((always_inline)) void FN_epi_body(");
  return epi_text + "namespace {\nstruct FN_epilogue {\n  const void* const* p;\n"
                    "  void operator()(float* v, int64_t start, int count) const { FN_epi_body(p, v, start, count); }\n};\n"
                    "}  // namespace\nextern \"C\" void FN(const void* const* p, const dnnf_parallel* par) {\n";
}

// emit_template_gemm for mm_packed: B is the compile-time packed weight (its panel width is the
// one compile() pins the template's ISA to).
std::string emit_template_packed_gemm(const Graph& g, const Node& dn, const std::vector<runtime::Step::InputView>& views,
                                      const std::string& epi_name, int target, ArgTable& args,
                                      std::map<std::string, std::string>& functions) {
  const auto& as = g.value(dn.inputs[0]).shape;
  const int64_t M = as[0], K = as[1], N = dn.attr_int("n");
  const GemmOperand A = gemm_operand(g, dn, 0, views, args);
  const int b_arg = args.index_of(dn.inputs[1]);
  const int bias = dn.input_or_absent(2);
  const int bias_arg = bias >= 0 ? args.index_of(bias) : -1;
  const int c_arg = args.index_of(target);
  std::ostringstream fn;
  fn << gemm_epilogue_prefix(epi_name, functions)
     << "  dnnf_gemm::gemm_packed_b(" << M << ", " << N << ", " << K << ", dnnf_gemm::Mat{" << ptr(A) << ", " << A.rs
     << ", " << A.cs << "},\n"
     << "                  static_cast<const float*>(p[" << b_arg << "]), static_cast<float*>(const_cast<void*>(p["
     << c_arg << "])), " << N << ",\n"
     << "                  " << bias_args(bias_arg) << ", " << float_literal(dn.attr_float("alpha", 1.0))
     << ", FN_epilogue{p}, par);\n}\n";
  return add_named_function(fn.str(), functions);
}

// Emits a function that runs GEMM node `dn` through the kernel template of
// kernels/cpu/gemm_template.h with the block's epilogue `epi_name` inlined into the micro-kernel's
// store (the epilogue reads its operands from the same pointer table `args`); `target` is the
// buffer the epilogue's results go to. Operands come from `views` (slot -> strided leaf) or are the
// node's contiguous inputs. Returns the function's name, or "" when the node's bias form is one the
// template does not cover (then the library kernel with the epilogue hook runs instead).
std::string emit_template_gemm(const Graph& g, const Node& dn, const std::vector<runtime::Step::InputView>& views,
                               const std::string& epi_name, int target, ArgTable& args,
                               std::map<std::string, std::string>& functions) {
  if (dn.op == "mm_packed") return emit_template_packed_gemm(g, dn, views, epi_name, target, args, functions);
  const bool has_bias = dn.op == "addmm" || dn.op == "baddbmm";
  if (!has_bias && dn.op != "mm" && dn.op != "bmm") return "";
  const size_t a = has_bias ? 1 : 0;
  const auto& as = g.value(dn.inputs[a]).shape;
  const auto& bs = g.value(dn.inputs[a + 1]).shape;
  const bool batched = as.size() == 3;
  const int64_t batch = batched ? as[0] : 1, M = as[as.size() - 2], K = as.back(), N = bs.back();
  const double alpha = has_bias ? dn.attr_float("alpha", 1.0) : 1.0;
  const double beta = has_bias ? dn.attr_float("beta", 1.0) : 0.0;
  int bias_arg = -1;
  if (has_bias && beta != 0.0) {
    const auto& b = g.value(dn.inputs[0]);
    if (beta != 1.0 || b.numel() != N || !(b.shape.size() == 1 || b.shape.back() == N)) return "";
    bias_arg = args.index_of(dn.inputs[0]);
  }
  const GemmOperand A = gemm_operand(g, dn, a, views, args), B = gemm_operand(g, dn, a + 1, views, args);
  const int c_arg = args.index_of(target);
  std::ostringstream fn;
  fn << gemm_epilogue_prefix(epi_name, functions)
     << "  dnnf_gemm::gemm(" << batch << ", " << M << ", " << N << ", " << K << ",\n"
     << "                  dnnf_gemm::Mat{" << ptr(A) << ", " << A.rs << ", " << A.cs << "}, " << A.batch_stride << ",\n"
     << "                  dnnf_gemm::Mat{" << ptr(B) << ", " << B.rs << ", " << B.cs << "}, " << B.batch_stride << ",\n"
     << "                  static_cast<float*>(const_cast<void*>(p[" << c_arg << "])), " << N << ", " << M * N << ",\n"
     << "                  " << bias_args(bias_arg) << ", " << float_literal(alpha) << ", 0.f, FN_epilogue{p}, par);\n}\n";
  return add_named_function(fn.str(), functions);
}

}  // namespace

bool can_fuse(const Graph& g, int id) {
  const Node& n = g.node(id);
  const ecg::OpInfo* info = n.info ? n.info : ecg::find_op(n.op);
  if (!info) return false;
  if (is_index_op(n.op)) {
    if (n.outputs.size() != 1 || !is_f32(g, n.outputs[0]) || !is_f32(g, n.inputs[0])) return false;
    return true;
  }
  if (info->mapping == MappingType::ManyToMany) {
    const runtime::OpKernel* k = runtime::find_kernel(n.op);
    if (!k || !runtime::check_node(g, n).empty()) return false;
    return is_f32(g, n.outputs[0]);
  }
  return inline_op_support(g, n).empty();
}

int CodegenUnit::add(const Graph& g, const fusion::Plan& plan) {
  results_.push_back(std::make_unique<CodegenResult>());
  CodegenResult& res = *results_.back();
  std::map<std::string, std::string>& functions = functions_;
  std::vector<std::function<void(const JitModule&)>>& resolvers = resolvers_;
  runtime::Program& prog = res.program;
  prog.blocks = static_cast<int>(plan.blocks.size());
  const size_t nv = g.values().size();

  for (size_t bi = 0; bi < plan.blocks.size(); ++bi) {
    const fusion::Block& blk = plan.blocks[bi];
    BlockReport rep;
    rep.block = static_cast<int>(bi);
    rep.nodes = blk.nodes;
    rep.type = ecg::mapping_type_name(blk.type);
    rep.dominant = blk.dominant;
    if (blk.nodes.size() == 1) {
      runtime::Step s;
      s.node = blk.nodes[0];
      s.block = static_cast<int>(bi);
      s.label = "block " + std::to_string(bi) + ": " + g.node(s.node).op;
      prog.steps.push_back(std::move(s));
      rep.steps.push_back("kernel");
      res.blocks.push_back(std::move(rep));
      continue;
    }
    std::vector<char> in_block(g.nodes().size(), 0);
    for (int n : blk.nodes) in_block[n] = 1;
    auto produced_in_block = [&](int v) { return v >= 0 && g.value(v).producer >= 0 && in_block[g.value(v).producer]; };
    std::set<int> mat;
    for (int n : blk.nodes)
      for (int v : g.node(n).outputs) {
        const auto& val = g.value(v);
        bool external = val.is_output;
        for (int u : val.users)
          if (!in_block[u]) external = true;
        if (external) mat.insert(v);
      }
    const int d = blk.dominant;
    const runtime::OpKernel* dk = d >= 0 ? runtime::find_kernel(g.node(d).op) : nullptr;
    std::vector<char> pre(g.nodes().size(), 0);  // in-block ancestors of the dominant op
    int prologue_value = -1;
    if (d >= 0) {
      std::vector<int> stack(g.node(d).inputs.begin(), g.node(d).inputs.end());
      while (!stack.empty()) {
        int v = stack.back();
        stack.pop_back();
        if (!produced_in_block(v) || pre[g.value(v).producer]) continue;
        pre[g.value(v).producer] = 1;
        for (int in : g.node(g.value(v).producer).inputs) stack.push_back(in);
      }
      const Node& dn = g.node(d);
      for (size_t i = 0; i < dn.inputs.size(); ++i) {
        int v = dn.inputs[i];
        if (!produced_in_block(v)) continue;
        if (i == 0 && dk->prologue_hook && is_f32(g, v) && !mat.count(v) &&
            std::count(dn.inputs.begin(), dn.inputs.end(), v) == 1)
          prologue_value = v;
        else if (!(dk->strided_inputs >> i & 1u))
          mat.insert(v);
        // else: read through index arithmetic if the value is a pure view (decided below)
      }
    }
    const int d_out = d >= 0 ? g.node(d).outputs[0] : -1;
    // In-block nodes that depend on the dominant op (it included); node ids are topological.
    std::vector<char> after_d(g.nodes().size(), 0);
    if (d >= 0) {
      std::vector<int> sorted(blk.nodes.begin(), blk.nodes.end());
      std::sort(sorted.begin(), sorted.end());
      for (int n : sorted) {
        if (n == d) after_d[n] = 1;
        for (int in : g.node(n).inputs)
          if (produced_in_block(in) && after_d[g.value(in).producer]) after_d[n] = 1;
      }
    }
    std::vector<runtime::Step> steps;
    std::vector<runtime::Alias> aliases;
    int epilogue_target = -1, store_target = -1;
    for (int attempt = 0;; ++attempt) {
      DNNF_CHECK(attempt <= static_cast<int>(nv), "code generation for block ", bi, " does not converge");
      steps.clear();
      aliases.clear();
      epilogue_target = -1;
      store_target = -1;
      const size_t step_base = prog.steps.size();
      try {
        std::vector<int> order(mat.begin(), mat.end());
        std::sort(order.begin(), order.end(), [&](int a, int b) {
          int pa = g.value(a).producer, pb = g.value(b).producer;
          return pa != pb ? pa < pb : a < b;
        });
        auto leaf_pred = [&](int top) {
          return [&, top](int v) {
            if (!produced_in_block(v)) return true;
            if (g.value(v).producer == d) return true;
            return v != top && mat.count(v) > 0;
          };
        };
        // Loop stage (or alias) for one materialized value.
        auto emit_value = [&](int v) {
          ExprBuilder b(g, leaf_pred(v));
          int e = b.of_value(v);
          const Expr& ex = b.exprs[e];
          if (ex.kind == Expr::Kind::Leaf && !g.value(v).is_output && b.leaves[ex.leaf].view.is_contiguous()) {
            const Leaf& l = b.leaves[ex.leaf];
            aliases.push_back(runtime::Alias{v, l.value, l.view.offset * static_cast<int64_t>(dtype_size(g.value(v).dtype)),
                                             static_cast<int>(step_base + steps.size()) - 1});
            rep.steps.push_back("alias");
            return;
          }
          ArgTable args;
          std::string fname = emit_function(StageKind::Loop, g, b, {e}, {v}, g.value(v).shape, -1, args, functions);
          runtime::Step s;
          s.kind = runtime::Step::Kind::Generated;
          s.args = args.values;
          s.reads.assign(args.values.begin(), args.values.end() - 1);
          s.writes = {v};
          s.block = static_cast<int>(bi);
          s.label = "block " + std::to_string(bi) + " loop " + fname;
          const size_t idx = steps.size();
          resolvers.push_back(nullptr);  // placeholder replaced below
          steps.push_back(std::move(s));
          rep.steps.push_back("loop");
          const std::string fn_name = fname;
          const size_t global = step_base + idx;
          resolvers.back() = [&prog, global, fn_name](const JitModule& m) {
            prog.steps[global].fn = reinterpret_cast<runtime::GeneratedFn>(m.symbol(fn_name));
          };
        };
        rep.steps.clear();
        const size_t resolver_base = resolvers.size();
        try {
          // 1. values before the dominant op: its in-block inputs, and values that do not depend
          // on it (e.g. a re-blocked residual) — its epilogue may read them
          for (int v : order)
            if (d >= 0 && (pre[g.value(v).producer] || !after_d[g.value(v).producer])) emit_value(v);
          // 2. the dominant op with its hooks
          if (d >= 0) {
            std::vector<int> post;
            for (int v : order)
              if (after_d[g.value(v).producer] && g.value(v).producer != d) post.push_back(v);
            if (dk->epilogue_hook && is_f32(g, d_out) && !mat.count(d_out)) {
              int candidates = 0, target = -1;
              bool ok = true;
              for (int v : post) {
                ExprBuilder b(g, leaf_pred(v));
                int e = b.of_value(v);
                if (!b.references(e, d_out)) continue;
                ++candidates;
                target = v;
                // In place: the target must list d_out's elements in d_out's own order (a reshape of
                // it at most), so element i of the kernel's output becomes element i of the target.
                if (g.value(v).numel() != g.value(d_out).numel() || g.value(v).dtype != DType::Float32) ok = false;
                for (int li : b.reachable_leaves(e)) {
                  const Leaf& l = b.leaves[li];
                  if (l.value == d_out && !identity_view(l.view, g.value(v).shape)) ok = false;
                }
              }
              if (candidates == 1 && ok) epilogue_target = target;
            }
            // A permute of the kernel's output (its only reader) becomes the kernel's store strides.
            std::vector<int64_t> out_strides;
            store_target = -1;
            if (epilogue_target < 0 && !mat.count(d_out) && dk->strided_output && is_f32(g, d_out) &&
                !g.value(d_out).is_output && g.value(d_out).users.size() == 1 && in_block[g.value(d_out).users[0]] &&
                is_index_op(g.node(g.value(d_out).users[0]).op)) {
              const int u = g.node(g.value(d_out).users[0]).outputs[0];
              ExprBuilder b(g, leaf_pred(u));
              const Expr& ex = b.exprs[b.of_value(u)];
              if (ex.kind == Expr::Kind::Leaf && b.leaves[ex.leaf].value == d_out && is_f32(g, u)) {
                out_strides = inverse_permutation_strides(b.leaves[ex.leaf].view, g.value(d_out).shape);
                if (!out_strides.empty()) {
                  if (!mat.count(u)) throw NeedMaterialize{u};
                  store_target = u;
                }
              }
            }
            if (epilogue_target < 0 && store_target < 0 && !mat.count(d_out)) throw NeedMaterialize{d_out};
            runtime::Step s;
            s.node = d;
            s.block = static_cast<int>(bi);
            s.label = "block " + std::to_string(bi) + ": " + g.node(d).op;
            ArgTable args;
            std::string pro_name, epi_name;
            if (prologue_value >= 0) {
              ExprBuilder b(g, leaf_pred(prologue_value));
              int e = b.of_value(prologue_value);
              pro_name = emit_function(StageKind::Prologue, g, b, {e}, {}, g.value(prologue_value).shape, -1, args, functions);
            }
            if (epilogue_target >= 0) {
              ExprBuilder b(g, leaf_pred(epilogue_target));
              int e = b.of_value(epilogue_target);
              epi_name = emit_function(StageKind::Epilogue, g, b, {e}, {}, g.value(epilogue_target).shape, d_out, args, functions);
            }
            s.args = args.values;
            s.out_strides = out_strides;
            // Operands that are data movement of a materialized value: the kernel reads them strided.
            const Node& dn = g.node(d);
            for (size_t i = 0; i < dn.inputs.size(); ++i) {
              const int v = dn.inputs[i];
              if (!produced_in_block(v) || v == prologue_value || mat.count(v)) continue;
              ExprBuilder b(g, leaf_pred(v));
              int e = b.of_value(v);
              const Expr& ex = b.exprs[e];
              if (ex.kind != Expr::Kind::Leaf) throw NeedMaterialize{v};
              const Leaf& l = b.leaves[ex.leaf];
              s.input_views.push_back(runtime::Step::InputView{static_cast<int>(i), l.value, l.view.strides, l.view.offset});
              s.reads.push_back(l.value);
            }
            for (int in : dn.inputs)
              if (in >= 0 && in != prologue_value && (!produced_in_block(in) || mat.count(in))) s.reads.push_back(in);
            for (int a : args.values) s.reads.push_back(a);
            // GEMMs with an epilogue instantiate the kernel template with the epilogue inlined.
            std::string gemm_name;
            if (epilogue_target >= 0 && prologue_value < 0 && std::getenv("DNNFUSION_NO_GEMM_TEMPLATE") == nullptr) {
              gemm_name = emit_template_gemm(g, dn, s.input_views, epi_name, epilogue_target, args, functions);
              if (!gemm_name.empty()) {
                s.kind = runtime::Step::Kind::Generated;
                s.args = args.values;
                s.input_views.clear();
                s.reads.clear();
                for (int v : args.values)
                  if (v != epilogue_target) s.reads.push_back(v);
                s.label = "block " + std::to_string(bi) + ": " + dn.op + "<epilogue> " + gemm_name;
                uses_gemm_template_ = true;
              }
            }
            const int out_target = epilogue_target >= 0 ? epilogue_target : store_target;
            if (!gemm_name.empty())
              s.writes = {epilogue_target};
            else
              for (size_t slot = 0; slot < g.node(d).outputs.size(); ++slot)
                s.writes.push_back(slot == 0 && out_target >= 0 ? out_target : g.node(d).outputs[slot]);
            const size_t global = step_base + steps.size();
            steps.push_back(std::move(s));
            if (out_target >= 0)
              aliases.push_back(runtime::Alias{d_out, out_target, 0, static_cast<int>(global)});
            rep.steps.push_back(!gemm_name.empty() ? "gemm template+inlined epilogue"
                                                   : std::string(prologue_value >= 0 ? "prologue+" : "") + "kernel" +
                                                         (epilogue_target >= 0 ? "+epilogue" : "") +
                                                         (store_target >= 0 ? "+strided store" : ""));
            if (!gemm_name.empty())
              resolvers.push_back([&prog, global, gemm_name](const JitModule& m) {
                prog.steps[global].fn = reinterpret_cast<runtime::GeneratedFn>(m.symbol(gemm_name));
              });
            else
              resolvers.push_back([&prog, global, pro_name, epi_name](const JitModule& m) {
                if (!pro_name.empty()) prog.steps[global].prologue = reinterpret_cast<runtime::HookFn>(m.symbol(pro_name));
                if (!epi_name.empty()) prog.steps[global].epilogue = reinterpret_cast<runtime::HookFn>(m.symbol(epi_name));
              });
            // 3. values after it
            for (int v : post)
              if (v != epilogue_target && v != store_target) emit_value(v);
          } else {
            for (int v : order) emit_value(v);
          }
        } catch (...) {
          resolvers.resize(resolver_base);
          throw;
        }
      } catch (const NeedMaterialize& m) {
        DNNF_CHECK(!mat.count(m.value), "code generation for block ", bi, " needs value ", m.value, " twice");
        mat.insert(m.value);
        continue;
      }
      break;
    }
    // Report: bytes the block writes for its own use, and how each in-block edge was realized.
    for (int v : mat) {
      bool internal = !g.value(v).is_output;
      for (int u : g.value(v).users)
        if (!in_block[u]) internal = false;
      if (internal) rep.internal_bytes += g.value(v).nbytes();
    }
    for (int n : blk.nodes)
      for (int in : g.node(n).inputs) {
        if (!produced_in_block(in)) continue;
        const Node& p = g.node(g.value(in).producer);
        const Node& c = g.node(n);
        std::string rule;
        if (in == d_out && epilogue_target >= 0) rule = "epilogue";
        else if (in == d_out && store_target >= 0) rule = "strided store";
        else if (mat.count(in) || in == d_out) rule = "materialized";
        else if (n == d) rule = in == prologue_value ? "prologue" : "strided operand";
        else if (is_index_op(c.op)) rule = "index arithmetic";
        else rule = "inline";
        res.edge_rules[std::string(ecg::mapping_type_name(p.info->mapping)) + " -> " + ecg::mapping_type_name(c.info->mapping) +
                       ": " + rule]++;
      }
    for (auto& s : steps) prog.steps.push_back(std::move(s));
    for (auto& a : aliases) prog.aliases.push_back(a);
    res.blocks.push_back(std::move(rep));
  }
  res.functions = static_cast<int>(functions.size());  // so far; compile() sets the unit's total
  return static_cast<int>(results_.size()) - 1;
}

void CodegenUnit::compile() {
  if (functions_.empty()) return;
  std::ostringstream src;
  src << generated_prelude();
  if (uses_gemm_template_) {
    // The template's micro-kernel must be the library's: mm_packed weights were packed for its
    // panel width, and DNNFUSION_ISA (tests forcing AVX2 / scalar) must reach generated GEMMs too.
    const int isa = kernels::active_isa() == kernels::Isa::Avx512 ? 2 : kernels::active_isa() == kernels::Isa::Avx2 ? 1 : 0;
    src << "#define DNNF_GEMM_ISA " << isa << "\n" << gemm_template_source();
  }
  for (const auto& [name, text] : functions_) src << "\n" << text;
  JitModule module = jit_compile(src.str());
  for (auto& r : resolvers_)
    if (r) r(module);
  resolvers_.clear();
  for (auto& r : results_) {
    r->source = src.str();
    r->module = module;
    r->functions = static_cast<int>(functions_.size());
    r->program.module = module.handle;
  }
}

int m2m_input_fusible(const Graph& g, int m2m, int v) {
  const Node& n = g.node(m2m);
  const runtime::OpKernel* k = runtime::find_kernel(n.op);
  if (!k || v < 0) return fusion::PlanHooks::kNo;
  bool all_strided = true, prologue = false;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] != v) continue;
    // A value something else reads too is written to memory anyway: computing it again inside the
    // kernel would gain nothing (so the planner should let its producer fuse elsewhere).
    if (i == 0 && k->prologue_hook && is_f32(g, v) && std::count(n.inputs.begin(), n.inputs.end(), v) == 1 &&
        g.value(v).users.size() == 1 && !g.value(v).is_output)
      prologue = true;
    if (!(k->strided_inputs >> i & 1u)) all_strided = false;
  }
  if (prologue) return fusion::PlanHooks::kPrologue;
  return all_strided ? fusion::PlanHooks::kStrided : fusion::PlanHooks::kNo;
}

CodegenResult generate_program(const Graph& g, const fusion::Plan& plan) {
  CodegenUnit unit;
  unit.add(g, plan);
  unit.compile();
  return std::move(unit.result(0));
}

}  // namespace dnnfusion::codegen
