#include "target/cpu/codegen/fused_codegen.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "codegen/block_plan.h"
#include "codegen/expr_dag.h"
#include "ecg/elementwise_expr.h"
#include "target/cpu/codegen/prelude.h"
#include "target/cpu/codegen/kernel_templates.h"
#include "codegen/view_compose.h"
#include "common/error.h"
#include "ecg/op_registry.h"
#include "kernels/cpu/cpu_features.h"
#include "runtime/op_kernels.h"
#include "target/cpu/cpu_kernels.h"

namespace dnnfusion::codegen {

using ecg::Graph;
using ecg::MappingType;
using ecg::Node;

namespace {

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
  // A zero-element iteration space is one empty dim: no index arithmetic divides by an extent.
  if (std::find(dims.begin(), dims.end(), int64_t{0}) != dims.end()) {
    dims = {0};
    for (auto& a : acc) a.strides = {0};
  }
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
      name[e] = ecg::float_literal(ex.literal);
      continue;
    }
    if (ex.kind == Expr::Kind::Leaf) {
      size_t a = std::find(leaf_order.begin(), leaf_order.end(), e) - leaf_order.begin();
      inner_body << "      const " << (ex.is_bool ? "bool " : "float ") << v << " = " << elem(a) << ";\n";
    } else {
      std::vector<std::string> ops;
      for (int k : ex.kids) ops.push_back(k < 0 ? std::string() : name.at(k));
      inner_body << "      const float " << v << " = " << ecg::elementwise_expression(g, g.node(ex.node), ops) << ";\n";
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
  const runtime::OpKernel* k = d >= 0 ? target::cpu::cpu_target().find_kernel(g.node(d).op) : nullptr;
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
     << "                  " << bias_args(bias_arg) << ", " << ecg::float_literal(dn.attr_float("alpha", 1.0))
     << ", FN_epilogue{p}, par);\n}\n";
  return add_named_function(fn.str(), functions);
}

// Emits a function that runs GEMM node `dn` through the kernel template of
// kernels/cpu/gemm_template.h with the block's epilogue `epi_name` inlined into the micro-kernel's
// store (the epilogue reads its operands from the same pointer table `args`); `target` is the
// buffer the epilogue's results go to. Operands come from `views` (slot -> strided leaf) or are the
// node's contiguous inputs. Returns the function's name, or "" when the node's bias form is one the
// template does not cover, or an mm_packed with the bf16x6 packing (then the library kernel with the
// epilogue hook runs instead).
std::string emit_template_gemm(const Graph& g, const Node& dn, const std::vector<runtime::Step::InputView>& views,
                               const std::string& epi_name, int target, ArgTable& args,
                               std::map<std::string, std::string>& functions) {
  if (dn.op == "mm_packed") {
    // The bf16x6 packing runs on AMX through the library kernel, its epilogue as the hook.
    if (dn.has_attr("packing")) return "";
    return emit_template_packed_gemm(g, dn, views, epi_name, target, args, functions);
  }
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
    // A 0-d bias with N = 1 is one value per column too.
    if (beta != 1.0 || b.numel() != N || !(b.shape.size() <= 1 || b.shape.back() == N)) return "";
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
     << "                  " << bias_args(bias_arg) << ", " << ecg::float_literal(alpha) << ", 0.f, FN_epilogue{p}, par);\n}\n";
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
    const runtime::OpKernel* k = target::cpu::cpu_target().find_kernel(n.op);
    if (!k || !target::cpu::cpu_target().supports(g, n).empty()) return false;
    return is_f32(g, n.outputs[0]);
  }
  return ecg::elementwise_support(g, n).empty();
}

namespace {

// Emits one fused block's steps from its plan: the stages before the dominant op (aliases or
// loops), the dominant op's kernel with its prologue/epilogue hooks, strided operands and store
// strides (or, for a GEMM with an epilogue, the GEMM template instantiated with it inlined), then
// the stages after it.
class BlockEmitter {
 public:
  BlockEmitter(const Graph& g, const BlockPlan& bp, runtime::Program& prog, std::map<std::string, std::string>& functions,
               std::vector<std::function<void(const JitModule&)>>& resolvers, BlockReport& rep)
      : g_(g), bp_(bp), prog_(prog), functions_(functions), resolvers_(resolvers), rep_(rep) {}

  // Returns whether the block instantiated the GEMM template.
  bool emit() {
    for (const auto& st : bp_.before) emit_stage(st);
    if (bp_.dominant >= 0) emit_dominant();
    for (const auto& st : bp_.after) emit_stage(st);
    return uses_gemm_template_;
  }

 private:
  int expr_of(ExprBuilder& b, int v) const {
    const int e = b.of_value(v);
    DNNF_CHECK(e >= 0, "block ", bp_.block, ": the plan left value ", v, " without index arithmetic");
    return e;
  }

  std::string block_label() const { return "block " + std::to_string(bp_.block); }

  void emit_stage(const BlockPlan::Stage& st) {
    const int v = st.value;
    if (st.alias) {
      prog_.aliases.push_back(runtime::Alias{v, st.alias_of, st.elem_offset * static_cast<int64_t>(dtype_size(g_.value(v).dtype)),
                                             static_cast<int>(prog_.steps.size()) - 1});
      rep_.steps.push_back("alias");
      return;
    }
    ExprBuilder b(g_, bp_.leaves_of(g_, v));
    const int e = expr_of(b, v);
    ArgTable args;
    const std::string fname = emit_function(StageKind::Loop, g_, b, {e}, {v}, g_.value(v).shape, -1, args, functions_);
    runtime::Step s;
    s.kind = runtime::Step::Kind::Generated;
    s.args = args.values;
    s.reads.assign(args.values.begin(), args.values.end() - 1);
    s.writes = {v};
    s.block = bp_.block;
    s.label = block_label() + " loop " + fname;
    const size_t global = prog_.steps.size();
    prog_.steps.push_back(std::move(s));
    rep_.steps.push_back("loop");
    runtime::Program& prog = prog_;
    resolvers_.push_back([&prog, global, fname](const JitModule& m) {
      prog.steps[global].fn = reinterpret_cast<runtime::GeneratedFn>(m.symbol(fname));
    });
  }

  // same_index (optional): receives the positions in args of the float operands the hook reads at
  // the kernel output's own element indices (at most two), for the kernel to prefetch: a residual
  // add's other operand otherwise waits on memory in the epilogue, after the kernel's arithmetic.
  std::string emit_hook(StageKind kind, int value, int self, ArgTable& args, std::vector<int>* same_index = nullptr) {
    ExprBuilder b(g_, bp_.leaves_of(g_, value));
    const int e = expr_of(b, value);
    std::string name = emit_function(kind, g_, b, {e}, {}, g_.value(value).shape, self, args, functions_);
    if (!same_index) return name;
    for (const Leaf& l : b.leaves) {
      if (l.value == self || g_.value(l.value).dtype != DType::Float32 || !identity_view(l.view, g_.value(value).shape))
        continue;
      const auto at = std::find(args.values.begin(), args.values.end(), l.value);
      const int idx = static_cast<int>(at - args.values.begin());
      if (at != args.values.end() && same_index->size() < 2 &&
          std::find(same_index->begin(), same_index->end(), idx) == same_index->end())
        same_index->push_back(idx);
    }
    return name;
  }

  void emit_dominant() {
    const int d = bp_.dominant;
    const Node& dn = g_.node(d);
    const int d_out = dn.outputs[0];
    runtime::Step s;
    s.node = d;
    s.block = bp_.block;
    s.label = block_label() + ": " + dn.op;
    ArgTable args;
    std::string pro_name, epi_name;
    if (bp_.prologue_value >= 0) pro_name = emit_hook(StageKind::Prologue, bp_.prologue_value, -1, args);
    if (bp_.epilogue_target >= 0)
      epi_name = emit_hook(StageKind::Epilogue, bp_.epilogue_target, d_out, args,
                           bp_.store_strides.empty() ? &s.epilogue_same_index : nullptr);
    s.args = args.values;
    s.out_strides = bp_.store_strides;
    for (const auto& so : bp_.strided_operands) {
      s.input_views.push_back(runtime::Step::InputView{so.slot, so.value, so.strides, so.offset});
      s.reads.push_back(so.value);
    }
    for (int in : dn.inputs)
      if (in >= 0 && in != bp_.prologue_value && (!bp_.produced_inside(g_, in) || bp_.is_materialized(in)))
        s.reads.push_back(in);
    for (int a : args.values) s.reads.push_back(a);
    // GEMMs with an epilogue instantiate the kernel template with the epilogue inlined.
    std::string gemm_name;
    if (bp_.epilogue_target >= 0 && bp_.prologue_value < 0 && std::getenv("DNNFUSION_NO_GEMM_TEMPLATE") == nullptr) {
      gemm_name = emit_template_gemm(g_, dn, s.input_views, epi_name, bp_.epilogue_target, args, functions_);
      if (!gemm_name.empty()) {
        s.kind = runtime::Step::Kind::Generated;
        s.args = args.values;
        s.input_views.clear();
        s.reads.clear();
        for (int v : args.values)
          if (v != bp_.epilogue_target) s.reads.push_back(v);
        s.label = block_label() + ": " + dn.op + "<epilogue> " + gemm_name;
        uses_gemm_template_ = true;
      }
    }
    const int out_target = bp_.epilogue_target >= 0 ? bp_.epilogue_target : bp_.store_target;
    if (!gemm_name.empty())
      s.writes = {bp_.epilogue_target};
    else
      for (size_t slot = 0; slot < dn.outputs.size(); ++slot)
        s.writes.push_back(slot == 0 && out_target >= 0 ? out_target : dn.outputs[slot]);
    const size_t global = prog_.steps.size();
    prog_.steps.push_back(std::move(s));
    if (out_target >= 0) prog_.aliases.push_back(runtime::Alias{d_out, out_target, 0, static_cast<int>(global)});
    rep_.steps.push_back(!gemm_name.empty() ? "gemm template+inlined epilogue"
                                            : std::string(bp_.prologue_value >= 0 ? "prologue+" : "") + "kernel" +
                                                  (bp_.epilogue_target >= 0 ? "+epilogue" : "") +
                                                  (bp_.store_target >= 0 ? "+strided store" : ""));
    runtime::Program& prog = prog_;
    if (!gemm_name.empty())
      resolvers_.push_back([&prog, global, gemm_name](const JitModule& m) {
        prog.steps[global].fn = reinterpret_cast<runtime::GeneratedFn>(m.symbol(gemm_name));
      });
    else
      resolvers_.push_back([&prog, global, pro_name, epi_name](const JitModule& m) {
        if (!pro_name.empty()) prog.steps[global].prologue = reinterpret_cast<runtime::HookFn>(m.symbol(pro_name));
        if (!epi_name.empty()) prog.steps[global].epilogue = reinterpret_cast<runtime::HookFn>(m.symbol(epi_name));
      });
  }

  const Graph& g_;
  const BlockPlan& bp_;
  runtime::Program& prog_;
  std::map<std::string, std::string>& functions_;
  std::vector<std::function<void(const JitModule&)>>& resolvers_;
  BlockReport& rep_;
  bool uses_gemm_template_ = false;
};

}  // namespace

int CodegenUnit::add(const Graph& g, const fusion::Plan& plan) {
  results_.push_back(std::make_unique<CodegenResult>());
  CodegenResult& res = *results_.back();
  runtime::Program& prog = res.program;
  prog.blocks = static_cast<int>(plan.blocks.size());
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
    const runtime::OpKernel* dk =
        blk.dominant >= 0 ? target::cpu::cpu_target().find_kernel(g.node(blk.dominant).op) : nullptr;
    const BlockPlan bp = plan_block(g, plan, static_cast<int>(bi), dk);
    if (BlockEmitter(g, bp, prog, functions_, resolvers_, rep).emit()) uses_gemm_template_ = true;
    for (const auto& [rule, n] : bp.edge_rules) res.edge_rules[rule] += n;
    rep.internal_bytes = bp.internal_bytes;
    res.blocks.push_back(std::move(rep));
  }
  res.functions = static_cast<int>(functions_.size());  // so far; compile() sets the unit's total
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
  // Every emitted function is an exported symbol some resolver looks up: a cached module that
  // lacks one is stale and must be rebuilt rather than fail in a resolver.
  std::vector<std::string> symbols;
  symbols.reserve(functions_.size());
  for (const auto& kv : functions_) symbols.push_back(kv.first);
  JitModule module = jit_compile(src.str(), symbols);
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
  const runtime::OpKernel* k = target::cpu::cpu_target().find_kernel(n.op);
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
