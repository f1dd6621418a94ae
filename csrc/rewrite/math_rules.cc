#include "rewrite/math_rules.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "common/error.h"
#include "ecg/op_registry.h"

namespace dnnfusion::rewrite {

using ecg::AttrMap;
using ecg::Graph;
using ecg::Node;
using ecg::Value;

const char* property_name(Property p) {
  switch (p) {
    case Property::Associative: return "associative";
    case Property::Distributive: return "distributive";
    case Property::Commutative: return "commutative";
  }
  return "?";
}

namespace {

constexpr DType F32 = DType::Float32;
using MatchFn = std::function<bool(const RuleContext&, int, Match*)>;
using BuildFn = std::function<int(GraphRebuilder&, const Match&)>;

// Matcher vocabulary bound to one context.
struct Pat {
  const RuleContext& c;
  const Graph& g;
  explicit Pat(const RuleContext& ctx) : c(ctx), g(ctx.g) {}

  bool cst(int v) const { return v >= 0 && c.is_const[v]; }
  bool once(int v) const { return g.value(v).users.size() == 1 && !g.value(v).is_output; }
  bool f32(int v) const { return v >= 0 && g.value(v).dtype == F32; }
  const std::vector<int64_t>& shape(int v) const { return g.value(v).shape; }

  // Node n when its op is `op` (or any of `ops`).
  const Node* op(int n, const char* name) const { return g.node(n).op == name ? &g.node(n) : nullptr; }
  const Node* op_in(int n, std::initializer_list<const char*> names) const {
    for (const char* name : names)
      if (g.node(n).op == name) return &g.node(n);
    return nullptr;
  }
  // Producer of v when v is output 0 of a node.
  const Node* def(int v) const {
    if (v < 0 || g.value(v).producer < 0 || g.value(v).producer_slot != 0) return nullptr;
    return &g.node(g.value(v).producer);
  }

  // A plain binary node: float32 operands and result, alpha 1, no rounding mode, float32 compute.
  const Node* bin(int n, const char* name) const {
    const Node* x = op(n, name);
    if (!x || x->inputs.size() != 2 || x->outputs.size() != 1) return nullptr;
    if (!f32(x->inputs[0]) || !f32(x->inputs[1]) || !f32(x->outputs[0])) return nullptr;
    if (x->has_attr("alpha") && x->attr_float("alpha") != 1.0) return nullptr;
    if (x->has_attr("rounding_mode")) return nullptr;
    if (x->has_attr("compute_dtype") && x->attr_str("compute_dtype") != "float32") return nullptr;
    return x;
  }
  const Node* bin_of(int v, const char* name) const {
    const Node* p = def(v);
    return p ? bin(p->id, name) : nullptr;
  }
  // A float32 elementwise unary node (one operand, same shape).
  const Node* un(int n, const char* name) const {
    const Node* x = op(n, name);
    if (!x || x->inputs.size() != 1 || x->outputs.size() != 1 || x->inputs[0] < 0) return nullptr;
    if (!f32(x->inputs[0]) || !f32(x->outputs[0]) || shape(x->inputs[0]) != shape(x->outputs[0])) return nullptr;
    return x;
  }
  const Node* un_of(int v, const char* name) const {
    const Node* p = def(v);
    return p ? un(p->id, name) : nullptr;
  }
  // A float32 node with every tensor operand and result float32.
  bool all_f32(const Node& n) const {
    for (int v : n.inputs)
      if (v >= 0 && !f32(v)) return false;
    for (int v : n.outputs)
      if (!f32(v)) return false;
    return true;
  }
};

// Proof that a float value is never a negative number (NaN allowed: it propagates either way).
bool non_negative(const RuleContext& ctx, int v) {
  if (v < 0) return false;
  const Value& val = ctx.g.value(v);
  if (val.dtype != F32) return false;
  if (val.is_compile_time()) {
    const float* d = static_cast<const float*>(val.data);
    for (int64_t i = 0; i < val.numel(); ++i)
      if (!(d[i] >= 0.f)) return false;
    return true;
  }
  if (val.producer < 0) return false;
  const Node& p = ctx.g.node(val.producer);
  static const std::set<std::string> ops = {"relu", "abs", "exp", "sigmoid", "sqrt", "square", "softplus", "hardsigmoid"};
  if (ops.count(p.op)) return true;
  return p.op == "mul" && p.inputs.size() == 2 && p.inputs[0] == p.inputs[1];
}

// Calls f(a, b) on the operands of binary node n: both orders when the op commutes.
template <class F>
bool either(const Node& n, F&& f) {
  if (f(n.inputs[0], n.inputs[1])) return true;
  return (n.op == "add" || n.op == "mul") && f(n.inputs[1], n.inputs[0]);
}

std::vector<int> mapped(GraphRebuilder& rb, const Match& m) {
  std::vector<int> r;
  for (int v : m.v) r.push_back(rb.map(v));
  return r;
}

// ---------------------------------------------------------------- shared pattern shapes

// root = outer(p, c2), p = inner(x, c1) with p used once: a chain of two constant operations.
// Captures {x, c1, c2}.
MatchFn const_chain(const char* outer, const char* inner) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.bin(n, outer);
    return r && either(*r, [&](int pv, int c2) {
      const Node* p = P.bin_of(pv, inner);
      if (!p || !P.once(pv) || !P.cst(c2)) return false;
      return either(*p, [&](int x, int c1) {
        if (!P.cst(c1) || P.cst(x)) return false;
        *m = Match{n, {n, p->id}, {x, c1, c2}};
        return true;
      });
    });
  };
}

// root = outer(c1, p), p = inner(...) with a constant on the left of a non-commuting op.
// Captures {x, c1, c2} where c2 is p's constant.
MatchFn const_left_chain(const char* outer, const char* inner, bool x_first) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.bin(n, outer);
    if (!r || !P.cst(r->inputs[0])) return false;
    const Node* p = P.bin_of(r->inputs[1], inner);
    if (!p || !P.once(r->inputs[1])) return false;
    auto take = [&](int x, int c2) {
      if (!P.cst(c2) || P.cst(x)) return false;
      *m = Match{n, {n, p->id}, {x, r->inputs[0], c2}};
      return true;
    };
    return x_first ? either(*p, take) : take(p->inputs[1], p->inputs[0]);
  };
}

// root = op(f(a), g(b)) for unary f, g: captures {a, b}.
MatchFn unary_pair(const char* root, const char* f, const char* g) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.bin(n, root);
    if (!r) return false;
    const Node* p = P.un_of(r->inputs[0], f);
    const Node* q = P.un_of(r->inputs[1], g);
    if (!p || !q || p == q) return false;
    *m = Match{n, {n, p->id, q->id}, {p->inputs[0], q->inputs[0]}};
    return true;
  };
}

// root = f(g(x)) for unary f, g: captures {x}; optionally x must be non-negative.
MatchFn unary_chain(const char* f, const char* g, bool needs_non_negative = false) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.un(n, f);
    if (!r) return false;
    const Node* p = P.un_of(r->inputs[0], g);
    if (!p || !P.once(r->inputs[0])) return false;
    if (needs_non_negative && !non_negative(ctx, p->inputs[0])) return false;
    *m = Match{n, {n, p->id}, {p->inputs[0]}};
    return true;
  };
}

BuildFn reuse_first() {
  return [](GraphRebuilder& rb, const Match& m) { return rb.map(m.v[0]); };
}

// root = add/sub(p, q) with p = mul(A, B), q = mul(A, C) sharing an operand A: captures {A, B, C}.
MatchFn common_factor(const char* root, const char* inner) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.bin(n, root);
    if (!r) return false;
    const Node* p = P.bin_of(r->inputs[0], inner);
    const Node* q = P.bin_of(r->inputs[1], inner);
    if (!p || !q || p == q || !P.once(r->inputs[0]) || !P.once(r->inputs[1])) return false;
    if (std::string(inner) == "div") {  // A/C ± B/C: the shared operand is the divisor
      if (p->inputs[1] != q->inputs[1]) return false;
      *m = Match{n, {n, p->id, q->id}, {p->inputs[1], p->inputs[0], q->inputs[0]}};
      return true;
    }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        if (p->inputs[i] == q->inputs[j]) {
          *m = Match{n, {n, p->id, q->id}, {p->inputs[i], p->inputs[1 - i], q->inputs[1 - j]}};
          return true;
        }
    return false;
  };
}

// ---------------------------------------------------------------- linear ops (conv, mm)

// A convolution the rules may regroup: not transposed, float32, compile-time weight.
const Node* plain_conv(const Pat& P, int v) {
  const Node* c = P.def(v);
  if (!c || c->op != "convolution" || c->attr_int("transposed", 0) != 0 || !P.all_f32(*c)) return nullptr;
  if (!P.cst(c->inputs[1]) || (c->input_or_absent(2) >= 0 && !P.cst(c->inputs[2]))) return nullptr;
  return c;
}

// mm(X, W) or addmm(b, X, W) on float32 rank-2 operands; *x / *w get the operand positions.
const Node* gemm_of(const Pat& P, int v, int* x, int* w) {
  const Node* c = P.def(v);
  if (!c || (c->op != "mm" && c->op != "addmm") || !P.all_f32(*c)) return nullptr;
  *x = c->op == "addmm" ? 1 : 0;
  *w = *x + 1;
  if (P.shape(c->inputs[*x]).size() != 2 || P.shape(c->inputs[*w]).size() != 2) return nullptr;
  return c;
}

// A constant s that scales/shifts a rank-R conv output per output channel: aligned to R dims it
// is 1 everywhere except dim 1 (K or 1). *k1 gets that channel extent.
bool per_channel(const Pat& P, int s, int64_t out_rank, const std::vector<int64_t>& out, int64_t* k1) {
  if (!P.cst(s) || !P.f32(s) || static_cast<int64_t>(P.shape(s).size()) > out_rank || !broadcasts_to(P.shape(s), out))
    return false;
  auto a = align_shape(P.shape(s), static_cast<size_t>(out_rank));
  for (int64_t i = 0; i < out_rank; ++i)
    if (i != 1 && a[i] != 1) return false;
  *k1 = a[1];
  return true;
}

std::vector<int64_t> channel_shape(int64_t k1, size_t rank, size_t channel_dim) {
  std::vector<int64_t> s(rank, 1);
  s[channel_dim] = k1;
  return s;
}

// conv(X, W, b) op s for a per-output-channel constant s (mul/div scale weights and bias).
MatchFn conv_channel(const char* root) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.bin(n, root);
    return r && either(*r, [&](int pv, int s) {
      const Node* c = plain_conv(P, pv);
      int64_t k1 = 0;
      if (!c || !P.once(pv) || !per_channel(P, s, static_cast<int64_t>(P.shape(pv).size()), P.shape(pv), &k1)) return false;
      *m = Match{n, {n, c->id}, {pv, s}};
      return true;
    });
  };
}

// New bias `b op t` for a conv (absent b counts as zeros of K channels).
int conv_bias(GraphRebuilder& rb, const char* op, int b, int t, int64_t K) {
  int tv = rb.view(t, {rb.out().value(t).numel()});
  if (b >= 0) return rb.binary(op, b, tv);
  if (std::string(op) == "sub") tv = rb.unary("neg", tv);
  return rb.shape(tv)[0] == K ? tv : rb.expand(tv, {K});
}

// conv(X, W1, b1) op conv(X, W2, b2) -> conv(X, W1 op W2, b1 op b2).
MatchFn conv_pair(const char* root) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.bin(n, root);
    if (!r) return false;
    const Node* p = plain_conv(P, r->inputs[0]);
    const Node* q = plain_conv(P, r->inputs[1]);
    if (!p || !q || p == q || !P.once(r->inputs[0]) || !P.once(r->inputs[1])) return false;
    if (p->inputs[0] != q->inputs[0] || p->attrs != q->attrs || P.shape(p->inputs[1]) != P.shape(q->inputs[1])) return false;
    *m = Match{n, {n, p->id, q->id}, {p->outputs[0], q->outputs[0]}};
    return true;
  };
}

BuildFn conv_pair_build(const char* op) {
  return [=](GraphRebuilder& rb, const Match& m) {
    const Node& p = rb.src().node(rb.src().value(m.v[0]).producer);
    const Node& q = rb.src().node(rb.src().value(m.v[1]).producer);
    int w = rb.binary(op, rb.map(p.inputs[1]), rb.map(q.inputs[1]));
    int b1 = rb.map(p.input_or_absent(2)), b2 = rb.map(q.input_or_absent(2));
    int b = b1 >= 0 && b2 >= 0 ? rb.binary(op, b1, b2) : b1 >= 0 ? b1 : b2 < 0 ? -1 : std::string(op) == "sub" ? rb.unary("neg", b2) : b2;
    return rb.emit_like(p, {rb.map(p.inputs[0]), w, b})[0];
  };
}

// mm(X, W1) op mm(X, W2) / addmm(b1, X, W1) op addmm(b2, X, W2) with equal attributes.
MatchFn gemm_pair(const char* root, const char* gemm) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.bin(n, root);
    if (!r) return false;
    int x = 0, w = 0;
    const Node* p = gemm_of(P, r->inputs[0], &x, &w);
    const Node* q = gemm_of(P, r->inputs[1], &x, &w);
    if (!p || !q || p == q || p->op != gemm || q->op != gemm || !P.once(r->inputs[0]) || !P.once(r->inputs[1])) return false;
    if (p->inputs[x] != q->inputs[x] || p->attrs != q->attrs || !P.cst(p->inputs[w]) || !P.cst(q->inputs[w]) ||
        P.shape(p->inputs[w]) != P.shape(q->inputs[w]))
      return false;
    *m = Match{n, {n, p->id, q->id}, {p->outputs[0], q->outputs[0]}};
    return true;
  };
}

BuildFn gemm_pair_build(const char* op) {
  return [=](GraphRebuilder& rb, const Match& m) {
    const Node& p = rb.src().node(rb.src().value(m.v[0]).producer);
    const Node& q = rb.src().node(rb.src().value(m.v[1]).producer);
    const size_t x = p.op == "addmm" ? 1 : 0;
    std::vector<int> ins;
    if (x == 1) ins.push_back(rb.binary(op, rb.map(p.inputs[0]), rb.map(q.inputs[0])));
    ins.push_back(rb.map(p.inputs[x]));
    ins.push_back(rb.binary(op, rb.map(p.inputs[x + 1]), rb.map(q.inputs[x + 1])));
    return rb.emit_like(p, ins)[0];
  };
}

// ---------------------------------------------------------------- reductions

bool plain_reduce(const Pat& P, const Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1 || !P.all_f32(n)) return false;
  return !n.has_attr("dtype") || n.attr_str("dtype") == "float32";
}

// Which dims of a rank-r input node n reduces (no/empty "dim": all); empty if invalid.
std::vector<char> reduced_dims(const Node& n, size_t r) {
  std::vector<int64_t> dims = n.has_attr("dim") ? n.attr_ints("dim") : std::vector<int64_t>{};
  std::vector<char> red(r, dims.empty() ? 1 : 0);
  for (int64_t d : dims) {
    if (d < 0) d += static_cast<int64_t>(r);
    if (d < 0 || d >= static_cast<int64_t>(r)) return {};
    red[static_cast<size_t>(d)] = 1;
  }
  return red;
}

// The shape constant c takes after the reduction when it broadcasts over A without growing it
// and is constant along every reduced dim (then it factors out of the reduction).
bool through_reduction(const std::vector<int64_t>& a, const std::vector<int64_t>& c, const std::vector<char>& red, bool keepdim,
                       std::vector<int64_t>* out) {
  if (!broadcasts_to(c, a) || red.size() != a.size()) return false;
  auto ca = align_shape(c, a.size());
  out->clear();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!red[i]) out->push_back(ca[i]);
    else if (ca[i] != 1) return false;
    else if (keepdim) out->push_back(1);
  }
  return true;
}

// reduce(A inner c) -> reduce(A) inner c' for reduce in {sum, mean}: captures {A, c}.
MatchFn reduce_of(const char* reduce, const char* inner) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.op(n, reduce);
    if (!r || !plain_reduce(P, *r)) return false;
    const Node* p = P.bin_of(r->inputs[0], inner);
    if (!p || !P.once(r->inputs[0])) return false;
    return either(*p, [&](int a, int c) {
      std::vector<int64_t> cs;
      if (!P.cst(c) || P.shape(a) != P.shape(r->inputs[0])) return false;
      auto red = reduced_dims(*r, P.shape(a).size());
      if (!through_reduction(P.shape(a), P.shape(c), red, r->attr_int("keepdim", 0) != 0, &cs)) return false;
      *m = Match{n, {n, p->id}, {a, c}};
      return true;
    });
  };
}

// Emits reduce(A) (like the root) and the constant viewed to its place after the reduction.
std::pair<int, int> reduce_and_constant(GraphRebuilder& rb, const Match& m) {
  const Node& r = rb.src().node(m.root);
  const auto& a = rb.src().value(m.v[0]).shape;
  std::vector<int64_t> cs;
  through_reduction(a, rb.src().value(m.v[1]).shape, reduced_dims(r, a.size()), r.attr_int("keepdim", 0) != 0, &cs);
  int red = rb.emit_like(r, {rb.map(m.v[0])})[0];
  return {red, rb.view(rb.map(m.v[1]), cs)};
}

BuildFn reduce_of_build(const char* op) {
  return [=](GraphRebuilder& rb, const Match& m) {
    auto [red, c] = reduce_and_constant(rb, m);
    return rb.binary(op, red, c);
  };
}

// reduce(f(A)) -> f(reduce(A)) for a reduction and a unary op that commute.
MatchFn reduce_of_unary(const char* reduce, const std::vector<std::string>& fs) {
  return [=](const RuleContext& ctx, int n, Match* m) {
    Pat P(ctx);
    const Node* r = P.op(n, reduce);
    if (!r || !plain_reduce(P, *r) || !P.once(r->inputs[0])) return false;
    const Node* p = P.def(r->inputs[0]);
    if (!p || std::find(fs.begin(), fs.end(), p->op) == fs.end() || !P.un(p->id, p->op.c_str())) return false;
    *m = Match{n, {n, p->id}, {p->inputs[0]}};
    return true;
  };
}

BuildFn unary_after_root() {
  return [](GraphRebuilder& rb, const Match& m) {
    const Node& r = rb.src().node(m.root);
    const Node& f = rb.src().node(rb.src().value(r.inputs[0]).producer);
    int y = rb.emit_like(r, {rb.map(m.v[0])})[0];
    return rb.unary(f.op, y, f.attrs);
  };
}

// Nondecreasing unary ops defined on all of R: f(max(S)) = max(f(S)), likewise for min. (sqrt
// and log are monotone too but not total: a window holding a negative value would differ.)
bool monotone_total(const Node& f) {
  static const std::set<std::string> ops = {"relu",  "hardtanh", "clamp", "sigmoid", "tanh",       "exp",       "erf",
                                            "floor", "ceil",     "round", "sign",    "hardsigmoid", "leaky_relu"};
  if (!ops.count(f.op)) return false;
  if (f.op == "leaky_relu" && f.attr_float("negative_slope", 0.01) < 0) return false;
  return f.op != "round" || f.attr_int("decimals", 0) == 0;
}

// ---------------------------------------------------------------- data movement

// The permutation a shuffle node applies (out dim i = in dim perm[i]); empty if not a shuffle.
std::vector<int64_t> shuffle_perm(const Node& n, size_t rank) {
  std::vector<int64_t> p(rank);
  for (size_t i = 0; i < rank; ++i) p[i] = static_cast<int64_t>(i);
  auto norm = [&](int64_t d) { return d < 0 ? d + static_cast<int64_t>(rank) : d; };
  if (n.op == "permute") {
    auto dims = n.attr_ints("dims");
    if (dims.size() != rank) return {};
    for (size_t i = 0; i < rank; ++i) p[i] = norm(dims[i]);
  } else if (n.op == "transpose") {
    if (rank == 0) return p;
    std::swap(p[static_cast<size_t>(norm(n.attr_int("dim0")))], p[static_cast<size_t>(norm(n.attr_int("dim1")))]);
  } else if (n.op == "t") {
    std::reverse(p.begin(), p.end());
  } else {
    return {};
  }
  return p;
}

const std::vector<std::string> kShuffles = {"permute", "transpose", "t"};
const std::vector<std::string> kReshapes = {"view", "_unsafe_view", "reshape", "flatten", "squeeze", "unsqueeze"};
bool in(const std::vector<std::string>& ops, const std::string& op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); }

// Unary elementwise ops that compute (FLOP count per output element); used where any such op
// may move through a data-movement op.
bool computing_unary(const Node& n) {
  const ecg::OpInfo* info = n.info;
  return info && info->mapping == ecg::MappingType::OneToOne && info->pattern == ecg::PatternKind::ElemWise &&
         info->flop_model == ecg::FlopModel::PerOutput && n.inputs.size() == 1 && n.outputs.size() == 1;
}

std::vector<std::string> computing_unary_ops() {
  std::vector<std::string> r;
  for (const auto& op : ecg::all_ops())
    if (op.mapping == ecg::MappingType::OneToOne && op.pattern == ecg::PatternKind::ElemWise &&
        op.flop_model == ecg::FlopModel::PerOutput && op.num_outputs == 1)
      r.push_back(op.name);
  return r;
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---------------------------------------------------------------- the table

std::vector<MathRule> build_table() {
  std::vector<MathRule> t;
  auto rule = [&](const char* name, Property p, const char* pattern, std::vector<std::string> ops, MatchFn mf,
                  BuildFn bf, bool canonical = false) {
    t.push_back(MathRule{name, p, pattern, std::move(ops), std::move(mf), std::move(bf), canonical});
  };
  using P = Property;
  auto bin2 = [](const char* outer, const char* inner) {  // x outer (c1 inner c2)
    return [=](GraphRebuilder& rb, const Match& m) {
      auto v = mapped(rb, m);
      return rb.binary(outer, v[0], rb.binary(inner, v[1], v[2]));
    };
  };
  auto bin2_swap = [](const char* outer, const char* inner) {  // x outer (c2 inner c1)
    return [=](GraphRebuilder& rb, const Match& m) {
      auto v = mapped(rb, m);
      return rb.binary(outer, v[0], rb.binary(inner, v[2], v[1]));
    };
  };

  // ======== associative: regroup chains so constants meet (and fold), or inverses cancel ========
  rule("mul_const_chain", P::Associative, "(x*c1)*c2 -> x*(c1*c2)", {"mul"}, const_chain("mul", "mul"), bin2("mul", "mul"));
  rule("add_const_chain", P::Associative, "(x+c1)+c2 -> x+(c1+c2)", {"add"}, const_chain("add", "add"), bin2("add", "add"));
  rule("sub_const_chain", P::Associative, "(x-c1)-c2 -> x-(c1+c2)", {"sub"}, const_chain("sub", "sub"), bin2("sub", "add"));
  rule("add_then_sub_const", P::Associative, "(x+c1)-c2 -> x+(c1-c2)", {"sub", "add"}, const_chain("sub", "add"),
       bin2("add", "sub"));
  rule("sub_then_add_const", P::Associative, "(x-c1)+c2 -> x+(c2-c1)", {"add", "sub"}, const_chain("add", "sub"),
       bin2_swap("add", "sub"));
  rule("div_const_chain", P::Associative, "(x/c1)/c2 -> x/(c1*c2)", {"div"}, const_chain("div", "div"), bin2("div", "mul"));
  rule("mul_then_div_const", P::Associative, "(x*c1)/c2 -> x*(c1/c2)", {"div", "mul"}, const_chain("div", "mul"),
       bin2("mul", "div"));
  rule("div_then_mul_const", P::Associative, "(x/c1)*c2 -> x*(c2/c1)", {"mul", "div"}, const_chain("mul", "div"),
       bin2_swap("mul", "div"));
  rule("const_minus_add_const", P::Associative, "c1-(x+c2) -> (c1-c2)-x", {"sub", "add"},
       const_left_chain("sub", "add", true), [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("sub", rb.binary("sub", v[1], v[2]), v[0]);
       });
  rule("const_minus_sub_const", P::Associative, "c1-(c2-x) -> x+(c1-c2)", {"sub"}, const_left_chain("sub", "sub", false),
       bin2("add", "sub"));
  rule("const_minus_sub_from", P::Associative, "c1-(x-c2) -> (c1+c2)-x", {"sub"}, const_left_chain("sub", "sub", true),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("sub", rb.binary("add", v[1], v[2]), v[0]);
       });
  rule("const_div_mul_const", P::Associative, "c1/(x*c2) -> (c1/c2)/x", {"div", "mul"},
       const_left_chain("div", "mul", true), [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("div", rb.binary("div", v[1], v[2]), v[0]);
       });
  rule("div_by_const", P::Associative, "x/c -> x*(1/c)", {"div"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "div");
         if (!r || !P.cst(r->inputs[1]) || P.cst(r->inputs[0])) return false;
         *m = Match{n, {n}, {r->inputs[0], r->inputs[1]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], rb.unary("reciprocal", v[1]));
       },
       /*canonical=*/true);
  rule("recip_product", P::Associative, "recip(A)*recip(A*B) -> recip((A*A)*B)", {"mul", "reciprocal"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "mul");
         return r && either(*r, [&](int pv, int qv) {
           const Node* p = P.un_of(pv, "reciprocal");
           const Node* q = P.un_of(qv, "reciprocal");
           if (!p || !q || p == q || !P.once(qv)) return false;
           const Node* s = P.bin_of(q->inputs[0], "mul");
           if (!s || !P.once(q->inputs[0])) return false;
           return either(*s, [&](int a, int b) {
             if (a != p->inputs[0]) return false;
             *m = Match{n, {n, p->id, q->id, s->id}, {a, b}};
             return true;
           });
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.unary("reciprocal", rb.binary("mul", rb.binary("mul", v[0], v[0]), v[1]));
       });
  rule("sqrt_pair_product", P::Associative, "(A*sqrt(B))*(sqrt(B)*C) -> (A*B)*C, B >= 0", {"mul", "sqrt"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "mul");
         if (!r) return false;
         const Node* p = P.bin_of(r->inputs[0], "mul");
         const Node* q = P.bin_of(r->inputs[1], "mul");
         if (!p || !q || p == q || !P.once(r->inputs[0]) || !P.once(r->inputs[1])) return false;
         return either(*p, [&](int a, int s1) {
           const Node* r1 = P.un_of(s1, "sqrt");
           return r1 && either(*q, [&](int s2, int c) {
             const Node* r2 = P.un_of(s2, "sqrt");
             if (!r2 || r2->inputs[0] != r1->inputs[0] || !non_negative(ctx, r1->inputs[0])) return false;
             *m = Match{n, {n, p->id, q->id, r1->id, r2->id}, {a, r1->inputs[0], c}};
             return true;
           });
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", rb.binary("mul", v[0], v[1]), v[2]);
       });
  rule("sqrt_times_sqrt", P::Associative, "sqrt(B)*sqrt(B) -> B, B >= 0", {"mul", "sqrt"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "mul");
         if (!r) return false;
         const Node* p = P.un_of(r->inputs[0], "sqrt");
         const Node* q = P.un_of(r->inputs[1], "sqrt");
         if (!p || !q || p->inputs[0] != q->inputs[0] || !non_negative(ctx, p->inputs[0])) return false;
         *m = Match{n, p == q ? std::vector<int>{n, p->id} : std::vector<int>{n, p->id, q->id}, {p->inputs[0]}};
         return true;
       },
       reuse_first());
  rule("recip_times_recip", P::Associative, "recip(a)*recip(b) -> recip(a*b)", {"mul", "reciprocal"},
       unary_pair("mul", "reciprocal", "reciprocal"), [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.unary("reciprocal", rb.binary("mul", v[0], v[1]));
       });
  rule("mul_by_recip", P::Associative, "x*recip(y) -> x/y", {"mul", "reciprocal"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "mul");
         return r && either(*r, [&](int x, int qv) {
           const Node* q = P.un_of(qv, "reciprocal");
           if (!q || !P.once(qv)) return false;
           *m = Match{n, {n, q->id}, {x, q->inputs[0]}};
           return true;
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("div", v[0], v[1]);
       });
  rule("div_by_recip", P::Associative, "x/recip(y) -> x*y", {"div", "reciprocal"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "div");
         if (!r) return false;
         const Node* q = P.un_of(r->inputs[1], "reciprocal");
         if (!q || !P.once(r->inputs[1])) return false;
         *m = Match{n, {n, q->id}, {r->inputs[0], q->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], v[1]);
       });
  rule("neg_neg", P::Associative, "neg(neg(x)) -> x", {"neg"}, unary_chain("neg", "neg"), reuse_first());
  rule("recip_recip", P::Associative, "recip(recip(x)) -> x", {"reciprocal"}, unary_chain("reciprocal", "reciprocal"),
       reuse_first());
  rule("shuffle_shuffle", P::Associative, "permute(permute(x, p1), p2) -> permute(x, p1[p2]) (or x)", kShuffles,
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node& r = ctx.g.node(n);
         if (!in(kShuffles, r.op)) return false;
         const Node* p = P.def(r.inputs[0]);
         if (!p || !in(kShuffles, p->op) || !P.once(r.inputs[0])) return false;
         const size_t rank = P.shape(r.inputs[0]).size();
         if (shuffle_perm(r, rank).empty() || shuffle_perm(*p, rank).size() != rank) return false;
         *m = Match{n, {n, p->id}, {p->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         const Node& p = rb.src().node(rb.src().value(r.inputs[0]).producer);
         const size_t rank = rb.src().value(m.v[0]).shape.size();
         auto p1 = shuffle_perm(p, rank), p2 = shuffle_perm(r, rank);
         std::vector<int64_t> perm(rank);
         bool identity = true;
         for (size_t i = 0; i < rank; ++i) {
           perm[i] = p1[static_cast<size_t>(p2[i])];
           identity = identity && perm[i] == static_cast<int64_t>(i);
         }
         int x = rb.map(m.v[0]);
         if (identity) return x;
         return rb.add("permute", {x}, rb.src().value(r.outputs[0]).shape, rb.dtype(x), {{"dims", perm}});
       });
  rule("reshape_reshape", P::Associative, "view(view(x, s1), s2) -> view(x, s2) (or x)", kReshapes,
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node& r = ctx.g.node(n);
         if (!in(kReshapes, r.op)) return false;
         const Node* p = P.def(r.inputs[0]);
         if (!p || !in(kReshapes, p->op) || !P.once(r.inputs[0])) return false;
         *m = Match{n, {n, p->id}, {p->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         int x = rb.map(m.v[0]);
         const auto& s = rb.src().value(rb.src().node(m.root).outputs[0]).shape;
         return rb.shape(x) == s ? x : rb.view(x, s);
       });
  rule("reduce_reduce", P::Associative, "sum(sum(A, d1), d2) -> sum(A, d1+d2) (also mean, amax, amin)",
       {"sum", "mean", "amax", "amin"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.op_in(n, {"sum", "mean", "amax", "amin"});
         if (!r || !plain_reduce(P, *r) || !P.once(r->inputs[0])) return false;
         const Node* p = P.def(r->inputs[0]);
         if (!p || p->op != r->op || !plain_reduce(P, *p)) return false;
         if (r->attr_ints("dim", {}).empty() || p->attr_ints("dim", {}).empty()) return false;
         if (r->attr_int("keepdim", 0) != p->attr_int("keepdim", 0)) return false;
         if (reduced_dims(*p, P.shape(p->inputs[0]).size()).empty() || reduced_dims(*r, P.shape(r->inputs[0]).size()).empty())
           return false;
         *m = Match{n, {n, p->id}, {p->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         const Node& p = rb.src().node(rb.src().value(r.inputs[0]).producer);
         const size_t rank = rb.src().value(m.v[0]).shape.size();
         auto inner = reduced_dims(p, rank);
         auto outer = reduced_dims(r, rb.src().value(r.inputs[0]).shape.size());
         std::vector<int64_t> dims;
         for (size_t i = 0, j = 0; i < rank; ++i) {
           bool keep = r.attr_int("keepdim", 0) != 0;
           // outer dim j indexes the inner output: every dim (keepdim) or the unreduced ones.
           bool red = inner[i] || ((keep || !inner[i]) && outer[j]);
           if (keep || !inner[i]) ++j;
           if (red) dims.push_back(static_cast<int64_t>(i));
         }
         AttrMap attrs = r.attrs;
         attrs["dim"] = dims;
         return rb.add(r.op, {rb.map(m.v[0])}, rb.src().value(r.outputs[0]).shape, F32, attrs);
       });

  // ======== distributive: factor shared operands out, fold scales/shifts into linear ops ========
  rule("factor_mul_add", P::Distributive, "A*B + A*C -> A*(B+C)", {"add", "mul"}, common_factor("add", "mul"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], rb.binary("add", v[1], v[2]));
       });
  rule("factor_mul_sub", P::Distributive, "A*B - A*C -> A*(B-C)", {"sub", "mul"}, common_factor("sub", "mul"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], rb.binary("sub", v[1], v[2]));
       });
  rule("factor_div_add", P::Distributive, "A/C + B/C -> (A+B)/C", {"add", "div"}, common_factor("add", "div"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("div", rb.binary("add", v[1], v[2]), v[0]);
       });
  rule("factor_div_sub", P::Distributive, "A/C - B/C -> (A-B)/C", {"sub", "div"}, common_factor("sub", "div"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("div", rb.binary("sub", v[1], v[2]), v[0]);
       });
  // A op A*B with the bare A on the given side: captures {A, B}.
  auto self_factor = [](const char* root, bool bare_left) {
    return [=](const RuleContext& ctx, int n, Match* m) {
      Pat P(ctx);
      const Node* r = P.bin(n, root);
      return r && either(*r, [&](int first, int second) {
        int a = bare_left ? first : second, qv = bare_left ? second : first;
        const Node* q = P.bin_of(qv, "mul");
        if (!q || !P.once(qv)) return false;
        return either(*q, [&](int a2, int b) {
          if (a2 != a) return false;
          *m = Match{n, {n, q->id}, {a, b}};
          return true;
        });
      });
    };
  };
  rule("factor_self_add", P::Distributive, "A + A*B -> A*(B+1)", {"add", "mul"}, self_factor("add", true),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], rb.binary("add", v[1], rb.scalar(1.f)));
       });
  rule("factor_self_sub_left", P::Distributive, "A - A*B -> A*(1-B)", {"sub", "mul"}, self_factor("sub", true),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], rb.binary("sub", rb.scalar(1.f), v[1]));
       });
  rule("factor_self_sub_right", P::Distributive, "A*B - A -> A*(B-1)", {"sub", "mul"}, self_factor("sub", false),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], rb.binary("sub", v[1], rb.scalar(1.f)));
       });
  rule("affine_collapse", P::Distributive, "(x*c1 + c2)*c3 -> x*(c1*c3) + c2*c3", {"mul", "add"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "mul");
         return r && either(*r, [&](int pv, int c3) {
           const Node* p = P.bin_of(pv, "add");
           if (!p || !P.once(pv) || !P.cst(c3)) return false;
           return either(*p, [&](int qv, int c2) {
             const Node* q = P.bin_of(qv, "mul");
             if (!q || !P.once(qv) || !P.cst(c2)) return false;
             return either(*q, [&](int x, int c1) {
               if (!P.cst(c1) || P.cst(x)) return false;
               *m = Match{n, {n, p->id, q->id}, {x, c1, c2, c3}};
               return true;
             });
           });
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("add", rb.binary("mul", v[0], rb.binary("mul", v[1], v[3])), rb.binary("mul", v[2], v[3]));
       });
  rule("shift_scale_shift", P::Distributive, "((x+c1)*c2)+c3 -> x*c2 + (c1*c2+c3)", {"add", "mul"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "add");
         return r && either(*r, [&](int pv, int c3) {
           const Node* p = P.bin_of(pv, "mul");
           if (!p || !P.once(pv) || !P.cst(c3)) return false;
           return either(*p, [&](int qv, int c2) {
             const Node* q = P.bin_of(qv, "add");
             if (!q || !P.once(qv) || !P.cst(c2)) return false;
             return either(*q, [&](int x, int c1) {
               if (!P.cst(c1) || P.cst(x)) return false;
               *m = Match{n, {n, p->id, q->id}, {x, c1, c2, c3}};
               return true;
             });
           });
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("add", rb.binary("mul", v[0], v[2]), rb.binary("add", rb.binary("mul", v[1], v[2]), v[3]));
       });
  rule("conv_add_conv", P::Distributive, "conv(X,W1,b1) + conv(X,W2,b2) -> conv(X, W1+W2, b1+b2)",
       {"add", "convolution"}, conv_pair("add"), conv_pair_build("add"));
  rule("conv_sub_conv", P::Distributive, "conv(X,W1,b1) - conv(X,W2,b2) -> conv(X, W1-W2, b1-b2)",
       {"sub", "convolution"}, conv_pair("sub"), conv_pair_build("sub"));
  rule("mm_add_mm", P::Distributive, "mm(X,W1) + mm(X,W2) -> mm(X, W1+W2)", {"add", "mm"}, gemm_pair("add", "mm"),
       gemm_pair_build("add"));
  rule("mm_sub_mm", P::Distributive, "mm(X,W1) - mm(X,W2) -> mm(X, W1-W2)", {"sub", "mm"}, gemm_pair("sub", "mm"),
       gemm_pair_build("sub"));
  rule("addmm_add_addmm", P::Distributive, "addmm(b1,X,W1) + addmm(b2,X,W2) -> addmm(b1+b2, X, W1+W2)",
       {"add", "addmm"}, gemm_pair("add", "addmm"), gemm_pair_build("add"));
  rule("conv_channel_scale", P::Distributive, "conv(X,W,b) * s[K] -> conv(X, W*s, b*s)", {"mul", "convolution"},
       conv_channel("mul"), [](GraphRebuilder& rb, const Match& m) {
         const Node& c = rb.src().node(rb.src().value(m.v[0]).producer);
         const size_t rank = rb.src().value(c.inputs[1]).shape.size();
         int s = rb.map(m.v[1]);
         const int64_t k1 = rb.out().value(s).numel();
         int w = rb.binary("mul", rb.map(c.inputs[1]), rb.view(s, channel_shape(k1, rank, 0)));
         int b = c.input_or_absent(2) >= 0 ? rb.binary("mul", rb.map(c.inputs[2]), rb.view(s, {k1})) : -1;
         return rb.emit_like(c, {rb.map(c.inputs[0]), w, b})[0];
       });
  rule("conv_channel_div", P::Distributive, "conv(X,W,b) / s[K] -> conv(X, W/s, b/s)", {"div", "convolution"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "div");
         if (!r) return false;
         const Node* c = plain_conv(P, r->inputs[0]);
         int64_t k1 = 0;
         if (!c || !P.once(r->inputs[0]) || !per_channel(P, r->inputs[1], static_cast<int64_t>(P.shape(r->inputs[0]).size()), P.shape(r->inputs[0]), &k1))
           return false;
         *m = Match{n, {n, c->id}, {r->inputs[0], r->inputs[1]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& c = rb.src().node(rb.src().value(m.v[0]).producer);
         const size_t rank = rb.src().value(c.inputs[1]).shape.size();
         int s = rb.map(m.v[1]);
         const int64_t k1 = rb.out().value(s).numel();
         int w = rb.binary("div", rb.map(c.inputs[1]), rb.view(s, channel_shape(k1, rank, 0)));
         int b = c.input_or_absent(2) >= 0 ? rb.binary("div", rb.map(c.inputs[2]), rb.view(s, {k1})) : -1;
         return rb.emit_like(c, {rb.map(c.inputs[0]), w, b})[0];
       });
  auto conv_shift_build = [](const char* op) {
    return [=](GraphRebuilder& rb, const Match& m) {
      const Node& c = rb.src().node(rb.src().value(m.v[0]).producer);
      const int64_t K = rb.src().value(c.inputs[1]).shape[0];
      int b = conv_bias(rb, op, rb.map(c.input_or_absent(2)), rb.map(m.v[1]), K);
      return rb.emit_like(c, {rb.map(c.inputs[0]), rb.map(c.inputs[1]), b})[0];
    };
  };
  rule("conv_channel_shift", P::Distributive, "conv(X,W,b) + t[K] -> conv(X, W, b+t)", {"add", "convolution"},
       conv_channel("add"), conv_shift_build("add"));
  rule("conv_channel_unshift", P::Distributive, "conv(X,W,b) - t[K] -> conv(X, W, b-t)", {"sub", "convolution"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "sub");
         if (!r) return false;
         const Node* c = plain_conv(P, r->inputs[0]);
         int64_t k1 = 0;
         if (!c || !P.once(r->inputs[0]) || !per_channel(P, r->inputs[1], static_cast<int64_t>(P.shape(r->inputs[0]).size()), P.shape(r->inputs[0]), &k1))
           return false;
         *m = Match{n, {n, c->id}, {r->inputs[0], r->inputs[1]}};
         return true;
       },
       conv_shift_build("sub"));
  rule("linear_col_scale", P::Distributive, "mm(X,W) * s[N] -> mm(X, W*s) (addmm: bias*s too)", {"mul", "mm", "addmm"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "mul");
         return r && either(*r, [&](int pv, int s) {
           int x = 0, w = 0;
           const Node* g = gemm_of(P, pv, &x, &w);
           if (!g || !P.once(pv) || !P.cst(g->inputs[w]) || (g->op == "addmm" && !P.cst(g->inputs[0]))) return false;
           if (!P.cst(s) || !P.f32(s) || P.shape(s).size() > 2 || !broadcasts_to(P.shape(s), P.shape(pv))) return false;
           if (align_shape(P.shape(s), 2)[0] != 1) return false;  // per column, not per row
           *m = Match{n, {n, g->id}, {pv, s}};
           return true;
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& g = rb.src().node(rb.src().value(m.v[0]).producer);
         int s = rb.map(m.v[1]);
         int sv = rb.view(s, {1, rb.out().value(s).numel()});
         if (g.op == "mm") return rb.emit_like(g, {rb.map(g.inputs[0]), rb.binary("mul", rb.map(g.inputs[1]), sv)})[0];
         return rb.emit_like(g, {rb.binary("mul", rb.map(g.inputs[0]), sv), rb.map(g.inputs[1]),
                                 rb.binary("mul", rb.map(g.inputs[2]), sv)})[0];
       });
  rule("linear_bias_add", P::Distributive, "mm(X,W) + t -> addmm(t, X, W); addmm(b,X,W) + t -> addmm(b+t, X, W)",
       {"add", "mm", "addmm"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "add");
         return r && either(*r, [&](int pv, int t) {
           int x = 0, w = 0;
           const Node* g = gemm_of(P, pv, &x, &w);
           if (!g || !P.once(pv) || P.shape(t).size() > 2 || !broadcasts_to(P.shape(t), P.shape(pv))) return false;
           if (g->op == "addmm" && g->attr_float("beta", 1.0) != 1.0) return false;
           *m = Match{n, {n, g->id}, {pv, t}};
           return true;
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& g = rb.src().node(rb.src().value(m.v[0]).producer);
         int t = rb.map(m.v[1]);
         if (g.op == "addmm")
           return rb.emit_like(g, {rb.binary("add", rb.map(g.inputs[0]), t), rb.map(g.inputs[1]), rb.map(g.inputs[2])})[0];
         return rb.add("addmm", {t, rb.map(g.inputs[0]), rb.map(g.inputs[1])}, rb.src().value(g.outputs[0]).shape, F32,
                       {{"alpha", int64_t{1}}, {"beta", int64_t{1}}});
       });
  rule("exp_mul_exp", P::Distributive, "exp(a)*exp(b) -> exp(a+b)", {"mul", "exp"}, unary_pair("mul", "exp", "exp"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.unary("exp", rb.binary("add", v[0], v[1]));
       });
  rule("exp_div_exp", P::Distributive, "exp(a)/exp(b) -> exp(a-b)", {"div", "exp"}, unary_pair("div", "exp", "exp"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.unary("exp", rb.binary("sub", v[0], v[1]));
       });
  rule("neg_add_neg", P::Distributive, "neg(a) + neg(b) -> neg(a+b)", {"add", "neg"}, unary_pair("add", "neg", "neg"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.unary("neg", rb.binary("add", v[0], v[1]));
       });
  rule("neg_sub_neg", P::Distributive, "neg(a) - neg(b) -> b - a", {"sub", "neg"}, unary_pair("sub", "neg", "neg"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("sub", v[1], v[0]);
       });

  // ======== commutative: move an op to the side where it touches fewer elements ========
  rule("sum_of_scaled", P::Commutative, "sum(A*c) -> sum(A)*c", {"sum", "mul"}, reduce_of("sum", "mul"),
       reduce_of_build("mul"));
  rule("mean_of_scaled", P::Commutative, "mean(A*c) -> mean(A)*c", {"mean", "mul"}, reduce_of("mean", "mul"),
       reduce_of_build("mul"));
  rule("sum_of_divided", P::Commutative, "sum(A/c) -> sum(A)/c", {"sum", "div"}, reduce_of("sum", "div"),
       reduce_of_build("div"));
  rule("mean_of_divided", P::Commutative, "mean(A/c) -> mean(A)/c", {"mean", "div"}, reduce_of("mean", "div"),
       reduce_of_build("div"));
  rule("mean_of_shifted", P::Commutative, "mean(A+c) -> mean(A)+c", {"mean", "add"}, reduce_of("mean", "add"),
       reduce_of_build("add"));
  rule("sum_of_shifted", P::Commutative, "sum(A+c) -> sum(A) + c*n (n = reduced elements)", {"sum", "add"},
       reduce_of("sum", "add"), [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         const auto& a = rb.src().value(m.v[0]).shape;
         auto red = reduced_dims(r, a.size());
         int64_t count = 1;
         for (size_t i = 0; i < a.size(); ++i)
           if (red[i]) count *= a[i];
         auto [sum, c] = reduce_and_constant(rb, m);
         return rb.binary("add", sum, rb.binary("mul", c, rb.scalar(static_cast<float>(count))));
       });
  rule("sum_of_neg", P::Commutative, "sum(neg(A)) -> neg(sum(A))", {"sum", "neg"}, reduce_of_unary("sum", {"neg"}),
       unary_after_root());
  rule("mean_of_neg", P::Commutative, "mean(neg(A)) -> neg(mean(A))", {"mean", "neg"}, reduce_of_unary("mean", {"neg"}),
       unary_after_root());
  rule("prod_of_exp", P::Commutative, "prod(exp(A)) -> exp(sum(A))", {"prod", "exp"}, reduce_of_unary("prod", {"exp"}),
       [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         AttrMap attrs;
         if (r.has_attr("dim")) attrs["dim"] = r.attr_ints("dim");
         attrs["keepdim"] = r.attr_int("keepdim", 0);
         int s = rb.add("sum", {rb.map(m.v[0])}, rb.src().value(r.outputs[0]).shape, F32, attrs);
         return rb.unary("exp", s);
       });
  const std::vector<std::string> monotone = {"relu", "hardtanh", "clamp", "sigmoid", "tanh", "exp", "erf",
                                             "floor", "ceil", "round", "sign", "hardsigmoid", "leaky_relu"};
  auto monotone_under = [](std::string root) {
    return [=](const RuleContext& ctx, int n, Match* m) {
      Pat P(ctx);
      const Node* r = P.op(n, root.c_str());
      if (!r || !P.f32(r->inputs[0]) || !P.f32(r->outputs[0]) || !P.once(r->inputs[0])) return false;
      for (size_t s = 1; s < r->outputs.size(); ++s)  // indices of tied maxima would change
        if (!ctx.g.value(r->outputs[s]).users.empty() || ctx.g.value(r->outputs[s]).is_output) return false;
      const Node* f = P.def(r->inputs[0]);
      if (!f || !monotone_total(*f) || !P.un(f->id, f->op.c_str())) return false;
      *m = Match{n, {n, f->id}, {f->inputs[0]}};
      return true;
    };
  };
  rule("monotone_after_maxpool", P::Commutative, "maxpool(f(x)) -> f(maxpool(x)), f nondecreasing",
       std::vector<std::string>{"max_pool2d_with_indices"} + monotone, monotone_under("max_pool2d_with_indices"),
       unary_after_root());
  rule("monotone_after_amax", P::Commutative, "amax(f(x)) -> f(amax(x)), f nondecreasing",
       std::vector<std::string>{"amax"} + monotone, monotone_under("amax"), unary_after_root());
  rule("monotone_after_amin", P::Commutative, "amin(f(x)) -> f(amin(x)), f nondecreasing",
       std::vector<std::string>{"amin"} + monotone, monotone_under("amin"), unary_after_root());
  auto pool_of_scaled = [](const char* pool) {
    return [=](const RuleContext& ctx, int n, Match* m) {
      Pat P(ctx);
      const Node* r = P.op(n, pool);
      if (!r || !P.all_f32(*r) || !P.once(r->inputs[0])) return false;
      const Node* p = P.bin_of(r->inputs[0], "mul");
      return p && either(*p, [&](int x, int c) {
        const auto& xs = P.shape(x);
        if (!P.cst(c) || xs != P.shape(r->inputs[0]) || (xs.size() != 3 && xs.size() != 4)) return false;
        auto ca = align_shape(P.shape(c), xs.size());
        if (ca[xs.size() - 1] != 1 || ca[xs.size() - 2] != 1) return false;  // pooling windows see one scale
        *m = Match{n, {n, p->id}, {x, c}};
        return true;
      });
    };
  };
  auto pool_of_scaled_build = [](GraphRebuilder& rb, const Match& m) {
    const Node& r = rb.src().node(m.root);
    int y = rb.emit_like(r, {rb.map(m.v[0])})[0];
    int c = rb.map(m.v[1]);
    return rb.binary("mul", y, rb.view(c, align_shape(rb.shape(c), rb.shape(y).size())));
  };
  rule("avgpool_of_scaled", P::Commutative, "avg_pool2d(x*c) -> avg_pool2d(x)*c, c per channel", {"avg_pool2d", "mul"},
       pool_of_scaled("avg_pool2d"), pool_of_scaled_build);
  rule("adaptive_avgpool_of_scaled", P::Commutative, "adaptive_avg_pool2d(x*c) -> adaptive_avg_pool2d(x)*c",
       {"_adaptive_avg_pool2d", "mul"}, pool_of_scaled("_adaptive_avg_pool2d"), pool_of_scaled_build);
  rule("unary_before_expand", P::Commutative, "f(expand(x)) -> expand(f(x))", computing_unary_ops() + std::vector<std::string>{"expand"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node& r = ctx.g.node(n);
         if (!computing_unary(r) || r.inputs[0] < 0 || P.shape(r.inputs[0]) != P.shape(r.outputs[0])) return false;
         const Node* e = P.def(r.inputs[0]);
         if (!e || e->op != "expand" || !P.once(r.inputs[0])) return false;
         *m = Match{n, {n, e->id}, {e->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         int x = rb.map(m.v[0]);
         const Value& out = rb.src().value(r.outputs[0]);
         int y = rb.add(r.op, {x}, rb.shape(x), out.dtype, r.attrs);
         return rb.expand(y, out.shape);
       });
  rule("binary_before_expand", P::Commutative, "expand(x) op y -> expand(x op y) when y broadcasts to x",
       {"add", "sub", "mul", "div", "expand"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.op_in(n, {"add", "sub", "mul", "div"});
         if (!r || !P.bin(n, r->op.c_str())) return false;
         for (int side = 0; side < 2; ++side) {
           int ev = r->inputs[side], y = r->inputs[1 - side];
           const Node* e = P.def(ev);
           if (!e || e->op != "expand" || !P.once(ev) || !broadcasts_to(P.shape(y), P.shape(e->inputs[0]))) continue;
           *m = Match{n, {n, e->id}, side == 0 ? std::vector<int>{e->inputs[0], y} : std::vector<int>{y, e->inputs[0]}};
           return true;
         }
         return false;
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         auto v = mapped(rb, m);
         return rb.expand(rb.binary(r.op, v[0], v[1]), rb.src().value(r.outputs[0]).shape);
       });
  rule("scale_into_mm", P::Commutative, "mm(X*c, W) -> mm(X, W*c), c per input column", {"mm", "addmm", "mul"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         int x = 0, w = 0;
         const Node* g = gemm_of(P, ctx.g.node(n).outputs[0], &x, &w);
         if (!g || g->id != n || !P.cst(g->inputs[w]) || !P.once(g->inputs[x])) return false;
         const Node* p = P.bin_of(g->inputs[x], "mul");
         return p && either(*p, [&](int a, int c) {
           if (!P.cst(c) || P.shape(a) != P.shape(g->inputs[x]) || P.shape(c).size() > 2) return false;
           if (align_shape(P.shape(c), 2)[0] != 1) return false;  // a per-row scale is not a weight scale
           *m = Match{n, {n, p->id}, {a, c}};
           return true;
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& g = rb.src().node(m.root);
         const size_t x = g.op == "addmm" ? 1 : 0;
         int c = rb.map(m.v[1]);
         int w = rb.binary("mul", rb.map(g.inputs[x + 1]), rb.view(c, {rb.out().value(c).numel(), 1}));
         std::vector<int> ins;
         if (x == 1) ins.push_back(rb.map(g.inputs[0]));
         ins.push_back(rb.map(m.v[0]));
         ins.push_back(w);
         return rb.emit_like(g, ins)[0];
       });
  rule("scale_into_conv", P::Commutative, "conv(X*c, W, b) -> conv(X, W*c, b), c scalar or per input channel",
       {"convolution", "mul"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node& r = ctx.g.node(n);
         if (r.op != "convolution" || plain_conv(P, r.outputs[0]) != &r || !P.once(r.inputs[0])) return false;
         const Node* p = P.bin_of(r.inputs[0], "mul");
         return p && either(*p, [&](int a, int c) {
           const auto& xs = P.shape(a);
           if (!P.cst(c) || xs != P.shape(r.inputs[0]) || xs.size() < 2) return false;
           auto ca = align_shape(P.shape(c), xs.size());
           for (size_t i = 0; i < ca.size(); ++i)
             if (i != 1 && ca[i] != 1) return false;
           if (ca[1] != 1 && r.attr_int("groups", 1) != 1) return false;  // grouped weights index channels per group
           *m = Match{n, {n, p->id}, {a, c}};
           return true;
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         int c = rb.map(m.v[1]);
         const size_t rank = rb.src().value(r.inputs[1]).shape.size();
         int w = rb.binary("mul", rb.map(r.inputs[1]), rb.view(c, channel_shape(rb.out().value(c).numel(), rank, 1)));
         return rb.emit_like(r, {rb.map(m.v[0]), w, rb.map(r.input_or_absent(2))})[0];
       });
  rule("neg_into_mm", P::Commutative, "mm(neg(X), W) -> mm(X, neg(W))", {"mm", "addmm", "neg"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         int x = 0, w = 0;
         const Node* g = gemm_of(P, ctx.g.node(n).outputs[0], &x, &w);
         if (!g || g->id != n || !P.cst(g->inputs[w]) || !P.once(g->inputs[x])) return false;
         const Node* p = P.un_of(g->inputs[x], "neg");
         if (!p) return false;
         *m = Match{n, {n, p->id}, {p->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& g = rb.src().node(m.root);
         const size_t x = g.op == "addmm" ? 1 : 0;
         std::vector<int> ins;
         if (x == 1) ins.push_back(rb.map(g.inputs[0]));
         ins.push_back(rb.map(m.v[0]));
         ins.push_back(rb.unary("neg", rb.map(g.inputs[x + 1])));
         return rb.emit_like(g, ins)[0];
       });
  rule("neg_into_conv", P::Commutative, "conv(neg(X), W, b) -> conv(X, neg(W), b)", {"convolution", "neg"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node& r = ctx.g.node(n);
         if (r.op != "convolution" || plain_conv(P, r.outputs[0]) != &r || !P.once(r.inputs[0])) return false;
         const Node* p = P.un_of(r.inputs[0], "neg");
         if (!p) return false;
         *m = Match{n, {n, p->id}, {p->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         const Node& r = rb.src().node(m.root);
         return rb.emit_like(r, {rb.map(m.v[0]), rb.unary("neg", rb.map(r.inputs[1])), rb.map(r.input_or_absent(2))})[0];
       });
  rule("neg_times_const", P::Commutative, "neg(x)*c -> x*neg(c)", {"mul", "neg"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "mul");
         return r && either(*r, [&](int pv, int c) {
           const Node* p = P.un_of(pv, "neg");
           if (!p || !P.once(pv) || !P.cst(c)) return false;
           *m = Match{n, {n, p->id}, {p->inputs[0], c}};
           return true;
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], rb.unary("neg", v[1]));
       });
  rule("neg_times_neg", P::Commutative, "neg(a)*neg(b) -> a*b", {"mul", "neg"}, unary_pair("mul", "neg", "neg"),
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("mul", v[0], v[1]);
       });
  rule("sub_of_neg", P::Commutative, "a - neg(b) -> a + b", {"sub", "neg"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "sub");
         const Node* q = r ? P.un_of(r->inputs[1], "neg") : nullptr;
         if (!q) return false;
         *m = Match{n, {n, q->id}, {r->inputs[0], q->inputs[0]}};
         return true;
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("add", v[0], v[1]);
       });
  rule("add_of_neg", P::Commutative, "a + neg(b) -> a - b", {"add", "neg"},
       [](const RuleContext& ctx, int n, Match* m) {
         Pat P(ctx);
         const Node* r = P.bin(n, "add");
         return r && either(*r, [&](int a, int qv) {
           const Node* q = P.un_of(qv, "neg");
           if (!q) return false;
           *m = Match{n, {n, q->id}, {a, q->inputs[0]}};
           return true;
         });
       },
       [](GraphRebuilder& rb, const Match& m) {
         auto v = mapped(rb, m);
         return rb.binary("sub", v[0], v[1]);
       });
  rule("log_of_exp", P::Commutative, "log(exp(x)) -> x", {"log", "exp"}, unary_chain("log", "exp"), reuse_first());
  rule("exp_of_log", P::Commutative, "exp(log(x)) -> x, x >= 0", {"exp", "log"}, unary_chain("exp", "log", true),
       reuse_first());
  rule("sqrt_of_square", P::Commutative, "sqrt(square(x)) -> abs(x)", {"sqrt", "square"}, unary_chain("sqrt", "square"),
       [](GraphRebuilder& rb, const Match& m) { return rb.unary("abs", rb.map(m.v[0])); });
  rule("square_of_sqrt", P::Commutative, "square(sqrt(x)) -> x, x >= 0", {"square", "sqrt"},
       unary_chain("square", "sqrt", true), reuse_first());
  return t;
}

}  // namespace

const std::vector<MathRule>& math_rules() {
  static const std::vector<MathRule> table = build_table();
  return table;
}

RuleEffect rule_effect(const RuleContext& ctx, const MathRule& rule, const Match& m) {
  const Graph& g = ctx.g;
  RuleEffect e;
  auto runtime_node = [&](const Node& n) { return n.outputs.empty() || !ctx.is_const[n.outputs[0]]; };
  // Pattern nodes die when nothing outside the dying part reads them (root output 0 is replaced).
  std::vector<int> nodes = m.nodes;
  std::sort(nodes.rbegin(), nodes.rend());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::set<int> dead;
  for (int id : nodes) {
    const Node& n = g.node(id);
    bool dies = true;
    for (size_t s = 0; s < n.outputs.size(); ++s) {
      if (id == m.root && s == 0) continue;
      const Value& v = g.value(n.outputs[s]);
      if (v.is_output) dies = false;
      for (int u : v.users)
        if (!dead.count(u)) dies = false;
    }
    if (!dies) continue;
    dead.insert(id);
    if (runtime_node(n)) {
      e.flops_removed += ecg::node_flops(g, n);
      ++e.nodes_removed;
    }
  }
  // Build the replacement alone, its operands as placeholders, and cost what survives folding.
  GraphRebuilder rb(g, /*placeholders=*/true);
  const int res = rule.build(rb, m);
  const Graph& s = rb.out();
  std::vector<char> c(s.values().size(), 0);
  for (const Value& v : s.values()) {
    int src = rb.source_of(v.id);
    c[v.id] = src >= 0 ? ctx.is_const[src] : v.is_compile_time();
  }
  for (const Node& n : s.nodes()) {
    bool folded = true;
    for (int in : n.inputs) folded = folded && (in < 0 || c[in]);
    for (int o : n.outputs) c[o] = folded;
    if (!folded) {
      e.flops_added += ecg::node_flops(s, n);
      ++e.nodes_added;
    }
  }
  const Value& old = g.value(g.node(m.root).outputs[0]);
  const Value& now = s.value(res);
  DNNF_CHECK(now.shape == old.shape && now.dtype == old.dtype, "math rule ", rule.name, " replaced ",
             ecg::shape_str(old.shape), " ", dtype_name(old.dtype), " by ", ecg::shape_str(now.shape), " ",
             dtype_name(now.dtype), " at node ", m.root, " ", g.describe_node(m.root));
  if (now.producer < 0) e.reused_value = rb.source_of(res);
  return e;
}

}  // namespace dnnfusion::rewrite
