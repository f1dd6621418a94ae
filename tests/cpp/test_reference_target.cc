// The reference target (csrc/target/reference): its kernel table is the cpu target's minus the
// ops only the cpu target's layout/packing passes create, its kernels take no hooks, every op runs
// single-op graphs to the cpu target's results (random shapes and data, replayable seed), and the
// nodes its bindings refuse come with a reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "ecg/op_registry.h"
#include "kernel_test_util.h"
#include "kernels/cpu/conv2d.h"
#include "runtime/executor.h"
#include "target/target.h"

namespace dnnfusion {
namespace {

using ecg::AttrMap;
using ecg::Graph;
using ecg::OutputSpec;
using Shape = std::vector<int64_t>;
using Bytes = std::vector<uint8_t>;

const DType f32 = DType::Float32, f64 = DType::Float64, i64 = DType::Int64, i32 = DType::Int32, b8 = DType::Bool;

const target::Target& ref_target() { return target::registry().get("reference"); }
const target::Target& cpu_target() { return target::registry().get("cpu"); }

// Ops only the cpu target's own layout / packing passes put into a graph.
const std::set<std::string>& cpu_only_ops() {
  static const std::set<std::string> s = {"conv2d_nchwc",     "conv2d_nchwc_pack_weight", "conv2d_nchwc_expand_dw",
                                          "conv2d_nchwc_expand_dw_project", "conv2d_nchwc_repack_bf16x6",
                                          "mm_packed",        "gemm_pack_b",              "max_pool2d_nchwc",
                                          "avg_pool2d_nchwc"};
  return s;
}

// ---------------------------------------------------------------- single-op graphs ----

// One node whose outputs are the graph's outputs, with data for the graph's inputs.
struct Case {
  std::string name;
  Graph g;
  std::vector<Bytes> in;
};

template <typename T>
int input(Case& c, const Shape& s, DType dt, const std::vector<T>& v) {
  const int id = c.g.add_input(s, dt, "in" + std::to_string(c.in.size()));
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  c.in.emplace_back(p, p + v.size() * sizeof(T));
  return id;
}

size_t count(const Shape& s) { return static_cast<size_t>(testing::numel(s)); }

int f32_in(Case& c, std::mt19937_64& rng, const Shape& s, float lo = -2.f, float hi = 2.f) {
  return input(c, s, f32, testing::random_vec(rng, count(s), lo, hi));
}

template <typename T>
int int_in(Case& c, std::mt19937_64& rng, const Shape& s, DType dt, int64_t lo, int64_t hi) {
  std::vector<T> v(count(s));
  for (auto& x : v) x = static_cast<T>(testing::rand_int(rng, lo, hi));
  return input(c, s, dt, v);
}

int i64_in(Case& c, std::mt19937_64& rng, const Shape& s, int64_t lo, int64_t hi) {
  return int_in<int64_t>(c, rng, s, i64, lo, hi);
}

int bool_in(Case& c, std::mt19937_64& rng, const Shape& s) { return int_in<uint8_t>(c, rng, s, b8, 0, 1); }

int scalar(Case& c, float v) { return c.g.add_constant({}, f32, &v, "scalar"); }

// Appends case `name` to `cases` and returns it for its inputs and node (a deque: earlier cases stay put).
Case& add_case(std::deque<Case>& cases, const std::string& name) {
  cases.emplace_back();
  cases.back().name = name;
  return cases.back();
}

void node(Case& c, const std::string& op, const std::vector<int>& ins, const std::vector<OutputSpec>& outs, AttrMap at = {}) {
  const int id = c.g.add_node(op, ins, outs, std::move(at), "aten." + op);
  c.g.set_outputs(c.g.node(id).outputs);
}

Shape broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Shape reduced(const Shape& s, const Shape& dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    bool red = dims.empty();
    for (int64_t d : dims) red |= (d < 0 ? d + static_cast<int64_t>(s.size()) : d) == i;
    if (!red) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

void unary_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const Shape s{testing::rand_int(rng, 1, 3), testing::rand_int(rng, 2, 5), testing::rand_int(rng, 3, 9)};
  const std::vector<std::pair<const char*, AttrMap>> float_ops = {
      {"relu", {}}, {"hardtanh", {{"min_val", -0.5}, {"max_val", 1.25}}}, {"clamp", {{"min", -1.0}, {"max", 0.5}}},
      {"clamp", {{"min", int64_t{0}}}}, {"hardswish", {}}, {"hardsigmoid", {}}, {"sigmoid", {}}, {"silu", {}},
      {"gelu", {}}, {"gelu", {{"approximate", std::string("tanh")}}}, {"tanh", {}}, {"exp", {}}, {"log", {}},
      {"sqrt", {}}, {"rsqrt", {}}, {"reciprocal", {}}, {"neg", {}}, {"abs", {}}, {"erf", {}},
      {"leaky_relu", {{"negative_slope", 0.2}}}, {"elu", {{"alpha", 0.7}}}, {"softplus", {{"beta", 2.0}, {"threshold", 3.0}}},
      {"mish", {}}, {"sign", {}}, {"square", {}}, {"sin", {}}, {"cos", {}}, {"floor", {}}, {"ceil", {}}, {"round", {}}};
  for (const auto& [op, at] : float_ops) {
    Case& c = add_case(cases, std::string(op) + " float32");
    node(c, op, {f32_in(c, rng, s, -3.f, 3.f)}, {{s, f32}}, at);
  }
  for (const char* op : {"relu", "neg", "abs", "sign", "clamp"}) {
    Case& c = add_case(cases, std::string(op) + " int64");
    node(c, op, {i64_in(c, rng, s, -9, 9)}, {{s, i64}}, {{"min", int64_t{-4}}, {"max", int64_t{5}}});
  }
  for (DType to : {f64, i64, b8}) {
    Case& c = add_case(cases, std::string("_to_copy to ") + dtype_name(to));
    node(c, "_to_copy", {f32_in(c, rng, s, -3.f, 3.f)}, {{s, to}}, {{"dtype", std::string(dtype_name(to))}});
  }
  Case& ln = add_case(cases, "logical_not float32");
  node(ln, "logical_not", {f32_in(ln, rng, s)}, {{s, b8}});
  Case& bn = add_case(cases, "bitwise_not bool");
  node(bn, "bitwise_not", {bool_in(bn, rng, s)}, {{s, b8}});
}

const std::vector<std::string>& binary_op_names() {
  static const std::vector<std::string> v = {"add", "sub", "rsub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
                                             "le", "gt", "ge", "logical_and", "logical_or", "remainder", "floor_divide", "atan2"};
  return v;
}

bool gives_bool(const std::string& op) {
  for (const char* o : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"})
    if (op == o) return true;
  return false;
}

void binary(Case& c, const std::string& op, int a, int b, DType out, const std::string& compute, AttrMap at = {}) {
  at["compute_dtype"] = compute;
  node(c, op, {a, b}, {{broadcast(c.g.value(a).shape, c.g.value(b).shape), out}}, std::move(at));
}

void binary_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const int64_t d0 = testing::rand_int(rng, 1, 3), d1 = testing::rand_int(rng, 2, 4), d2 = testing::rand_int(rng, 2, 6);
  for (const auto& op : binary_op_names()) {  // broadcasting [d0,1,d2] x [d1,1], and a 0-d scalar
    Case& c = add_case(cases, op + " float32 broadcast");
    const int a = f32_in(c, rng, {d0, 1, d2}), b = f32_in(c, rng, {d1, 1});
    binary(c, op, a, b, gives_bool(op) ? b8 : f32, "float32", {{"alpha", op == "add" || op == "sub" ? 0.5 : 1.0}});
    Case& s = add_case(cases, op + " float32 with a scalar");
    binary(s, op, f32_in(s, rng, {d0, d2}, 0.1f, 3.f), scalar(s, 1.75f), gives_bool(op) ? b8 : f32, "float32",
           {{"alpha", op == "rsub" ? 2.0 : 1.0}});
  }
  Case& fd = add_case(cases, "div rounding_mode=floor");
  binary(fd, "div", f32_in(fd, rng, {d0, d2}), f32_in(fd, rng, {d2}), f32, "float32", {{"rounding_mode", std::string("floor")}});
  for (const char* op : {"add", "sub", "mul", "floor_divide", "remainder", "maximum", "minimum", "lt", "eq", "div",
                         "bitwise_and", "bitwise_or"}) {
    Case& c = add_case(cases, std::string(op) + " int64");
    const int a = i64_in(c, rng, {d0, d1, d2}, -20, 20), b = i64_in(c, rng, {d2}, 1, 5);
    const DType out = gives_bool(op) ? b8 : std::string(op) == "div" ? f32 : i64;
    binary(c, op, a, b, out, "int64", {{"alpha", std::string(op) == "add" ? int64_t{2} : int64_t{1}}});
  }
  for (const char* op : {"bitwise_and", "bitwise_or", "logical_and"}) {
    Case& c = add_case(cases, std::string(op) + " bool");
    binary(c, op, bool_in(c, rng, {d0, d1}), bool_in(c, rng, {d1}), b8, "bool");
  }
  Case& mixed = add_case(cases, "add int64 + float32");
  binary(mixed, "add", i64_in(mixed, rng, {d1, d2}, -5, 5), f32_in(mixed, rng, {d2}), f32, "float32");
}

void select_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const int64_t d0 = testing::rand_int(rng, 1, 3), d1 = testing::rand_int(rng, 2, 4), d2 = testing::rand_int(rng, 2, 6);
  Case& w = add_case(cases, "where float32 with a scalar");
  node(w, "where", {bool_in(w, rng, {d0, d1, 1}), f32_in(w, rng, {d1, d2}), scalar(w, -0.5f)}, {{{d0, d1, d2}, f32}});
  Case& wi = add_case(cases, "where int64");
  node(wi, "where", {bool_in(wi, rng, {d1, 1}), i64_in(wi, rng, {d1, d2}, -9, 9), i64_in(wi, rng, {d2}, -9, 9)},
       {{{d1, d2}, i64}});
  Case& m = add_case(cases, "masked_fill");
  node(m, "masked_fill", {f32_in(m, rng, {d0, d1, d2}), bool_in(m, rng, {d1, 1}), scalar(m, 7.f)}, {{{d0, d1, d2}, f32}});
}

void reduce(Case& c, std::mt19937_64& rng, const std::string& op, const Shape& s, const Shape& dims, bool keepdim,
            DType out, AttrMap at = {}) {
  if (!dims.empty()) at["dim"] = dims;
  at["keepdim"] = int64_t{keepdim};
  const int x = out == i64 && op != "argmax" && op != "argmin" ? i64_in(c, rng, s, -9, 9) : f32_in(c, rng, s, 0.5f, 1.5f);
  const bool flat = (op == "argmax" || op == "argmin") && dims.empty();
  node(c, op, {x}, {{flat ? Shape(keepdim ? s.size() : 0, 1) : reduced(s, dims, keepdim), out}}, at);
}

void reduction_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const Shape s{testing::rand_int(rng, 2, 4), testing::rand_int(rng, 3, 6), testing::rand_int(rng, 2, 7)};
  reduce(add_case(cases, "sum dim 1 keepdim"), rng, "sum", s, {1}, true, f32);
  reduce(add_case(cases, "sum int64"), rng, "sum", s, {0, 2}, false, i64);
  reduce(add_case(cases, "sum to float64"), rng, "sum", s, {-1}, false, f64, {{"dtype", std::string("float64")}});
  reduce(add_case(cases, "mean dims 0,2"), rng, "mean", s, {0, 2}, false, f32);
  reduce(add_case(cases, "amax all"), rng, "amax", s, {}, false, f32);
  reduce(add_case(cases, "amin dim -1 keepdim"), rng, "amin", s, {-1}, true, f32);
  reduce(add_case(cases, "prod dim 1"), rng, "prod", s, {1}, false, f32);
  reduce(add_case(cases, "var correction 0"), rng, "var", s, {2}, true, f32, {{"correction", 0.0}});
  reduce(add_case(cases, "var default correction"), rng, "var", s, {0, 1}, false, f32);
  reduce(add_case(cases, "var unbiased=False"), rng, "var", s, {1}, false, f32, {{"unbiased", int64_t{0}}});
  reduce(add_case(cases, "argmax dim 1 keepdim"), rng, "argmax", s, {1}, true, i64);
  reduce(add_case(cases, "argmax dim -1"), rng, "argmax", s, {-1}, false, i64);
  reduce(add_case(cases, "argmin flattened"), rng, "argmin", s, {}, false, i64);
  reduce(add_case(cases, "argmax flattened keepdim"), rng, "argmax", s, {}, true, i64);
  Case& c = add_case(cases, "cumsum dim 1");
  node(c, "cumsum", {f32_in(c, rng, s)}, {{s, f32}}, {{"dim", int64_t{1}}});
  Case& ci = add_case(cases, "cumsum int64 dim -1");
  node(ci, "cumsum", {i64_in(ci, rng, s, -9, 9)}, {{s, i64}}, {{"dim", int64_t{-1}}});
  Case& cd = add_case(cases, "cumsum to float64");
  node(cd, "cumsum", {f32_in(cd, rng, s)}, {{s, f64}}, {{"dim", int64_t{0}}, {"dtype", std::string("float64")}});
}

void movement_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const int64_t a = testing::rand_int(rng, 1, 3), b = testing::rand_int(rng, 2, 5), d = testing::rand_int(rng, 2, 6);
  Case& cat = add_case(cases, "cat dim 1 with a legacy empty operand");
  const int64_t k0 = testing::rand_int(rng, 1, 3), k1 = testing::rand_int(rng, 0, 2), k2 = testing::rand_int(rng, 1, 4);
  node(cat, "cat",
       {f32_in(cat, rng, {a, k0, d}), f32_in(cat, rng, {0}), f32_in(cat, rng, {a, k1, d}), f32_in(cat, rng, {a, k2, d})},
       {{{a, k0 + k1 + k2, d}, f32}}, {{"dim", int64_t{1}}});
  Case& cati = add_case(cases, "cat int64 dim 0");
  node(cati, "cat", {i64_in(cati, rng, {a, d}, -9, 9), i64_in(cati, rng, {b, d}, -9, 9)}, {{{a + b, d}, i64}});
  const int64_t V = testing::rand_int(rng, 3, 10), E = testing::rand_int(rng, 2, 6);
  Case& emb = add_case(cases, "embedding");
  node(emb, "embedding", {f32_in(emb, rng, {V, E}), i64_in(emb, rng, {a, b}, 0, V - 1)}, {{{a, b, E}, f32}},
       {{"padding_idx", int64_t{-1}}});
  const int64_t n = testing::rand_int(rng, 1, 7);
  Case& is = add_case(cases, "index_select dim 1");
  node(is, "index_select", {f32_in(is, rng, {a, b, d}), i64_in(is, rng, {n}, 0, b - 1)}, {{{a, n, d}, f32}},
       {{"dim", int64_t{1}}});
  Case& is32 = add_case(cases, "index_select int32 index dim 0");
  node(is32, "index_select", {f32_in(is32, rng, {a, b}), int_in<int32_t>(is32, rng, {n}, i32, 0, a - 1)}, {{{n, b}, f32}},
       {{"dim", int64_t{0}}});
  Case& ga = add_case(cases, "gather dim 2");
  node(ga, "gather", {f32_in(ga, rng, {a, b, d}), i64_in(ga, rng, {a, b - 1, n}, 0, d - 1)}, {{{a, b - 1, n}, f32}},
       {{"dim", int64_t{2}}});
  Case& ga0 = add_case(cases, "gather dim 0");
  node(ga0, "gather", {f32_in(ga0, rng, {a, b}), i64_in(ga0, rng, {n, b}, 0, a - 1)}, {{{n, b}, f32}}, {{"dim", int64_t{0}}});
  Case& pad = add_case(cases, "constant_pad_nd");
  node(pad, "constant_pad_nd", {f32_in(pad, rng, {a, b, d})}, {{{a, b + 1, d + 3}, f32}},
       {{"pad", Shape{1, 2, 0, 1}}, {"value", 0.5}});
  Case& padi = add_case(cases, "constant_pad_nd int64 cropping");
  node(padi, "constant_pad_nd", {i64_in(padi, rng, {b, d}, -9, 9)}, {{{b, d}, i64}}, {{"pad", Shape{-1, 1}}, {"value", -3.0}});
  Case& rep = add_case(cases, "repeat");
  node(rep, "repeat", {f32_in(rep, rng, {a, b})}, {{{2, a, 3 * b}, f32}}, {{"repeats", Shape{2, 1, 3}}});
}

void source_cases(std::deque<Case>& cases) {
  node(add_case(cases, "arange float32"), "arange", {}, {{{8}, f32}},
       {{"start", 0.5}, {"end", 2.5}, {"step", 0.25}, {"dtype", std::string("float32")}});
  node(add_case(cases, "arange int64"), "arange", {}, {{{5}, i64}},
       {{"start", int64_t{-3}}, {"end", int64_t{7}}, {"step", int64_t{2}}});
  node(add_case(cases, "full"), "full", {}, {{{2, 3}, f32}}, {{"size", Shape{2, 3}}, {"fill_value", 1.5}});
  node(add_case(cases, "zeros int64"), "zeros", {}, {{{4}, i64}}, {{"size", Shape{4}}});
  node(add_case(cases, "ones bool"), "ones", {}, {{{2, 2}, b8}}, {{"size", Shape{2, 2}}});
  node(add_case(cases, "scalar_tensor"), "scalar_tensor", {}, {{{}, f32}}, {{"s", 3.5}});
}

void conv(Case& c, std::mt19937_64& rng, const Shape& x, const Shape& w, bool bias, const Shape& stride, const Shape& pad,
          const Shape& dil, int64_t groups) {
  const bool is1d = x.size() == 3;
  Shape out{x[0], w[0]};
  for (size_t i = 2; i < x.size(); ++i)
    out.push_back(kernels::Conv2dShape::out_size(x[i], pad[i - 2], dil[i - 2], w[i], stride[i - 2]));
  const int b = bias ? f32_in(c, rng, {w[0]}) : -1;
  node(c, "convolution", {f32_in(c, rng, x), f32_in(c, rng, w), b}, {{out, f32}},
       {{"stride", stride}, {"padding", pad}, {"dilation", dil}, {"transposed", int64_t{0}},
        {"output_padding", Shape(is1d ? 1 : 2, 0)}, {"groups", groups}});
}

void conv_gemm_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const int64_t N = testing::rand_int(rng, 1, 2), H = testing::rand_int(rng, 6, 11), W = testing::rand_int(rng, 6, 11);
  conv(add_case(cases, "convolution groups/stride/padding/dilation"), rng, {N, 4, H, W}, {6, 2, 3, 3}, true, {2, 1}, {1, 2},
       {1, 2}, 2);
  conv(add_case(cases, "convolution depthwise"), rng, {N, 3, H, W}, {3, 1, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 3);
  conv(add_case(cases, "convolution 1-D without bias"), rng, {N, 3, W}, {5, 3, 3}, false, {2}, {1}, {1}, 1);
  const int64_t B = testing::rand_int(rng, 1, 3), M = testing::rand_int(rng, 1, 9), K = testing::rand_int(rng, 1, 12),
                Nc = testing::rand_int(rng, 1, 10);
  Case& a1 = add_case(cases, "addmm per-column bias");
  node(a1, "addmm", {f32_in(a1, rng, {Nc}), f32_in(a1, rng, {M, K}), f32_in(a1, rng, {K, Nc})}, {{{M, Nc}, f32}},
       {{"beta", int64_t{1}}, {"alpha", int64_t{1}}});
  Case& a2 = add_case(cases, "addmm broadcast bias, beta and alpha");
  node(a2, "addmm", {f32_in(a2, rng, {M, 1}), f32_in(a2, rng, {M, K}), f32_in(a2, rng, {K, Nc})}, {{{M, Nc}, f32}},
       {{"beta", 0.5}, {"alpha", 2.0}});
  Case& a3 = add_case(cases, "addmm beta 0");
  node(a3, "addmm", {f32_in(a3, rng, {M, Nc}), f32_in(a3, rng, {M, K}), f32_in(a3, rng, {K, Nc})}, {{{M, Nc}, f32}},
       {{"beta", 0.0}});
  Case& mm = add_case(cases, "mm");
  node(mm, "mm", {f32_in(mm, rng, {M, K}), f32_in(mm, rng, {K, Nc})}, {{{M, Nc}, f32}});
  Case& bmm = add_case(cases, "bmm");
  node(bmm, "bmm", {f32_in(bmm, rng, {B, M, K}), f32_in(bmm, rng, {B, K, Nc})}, {{{B, M, Nc}, f32}});
  Case& bad = add_case(cases, "baddbmm");
  node(bad, "baddbmm", {f32_in(bad, rng, {B, 1, Nc}), f32_in(bad, rng, {B, M, K}), f32_in(bad, rng, {B, K, Nc})},
       {{{B, M, Nc}, f32}}, {{"beta", 0.25}, {"alpha", 1.5}});
}

// mask_kind: 0 none, 1 float [Lq, Lk], 2 bool [B, 1, 1, Lk].
void attention(Case& c, std::mt19937_64& rng, int mask_kind, bool causal, AttrMap at) {
  const int64_t B = testing::rand_int(rng, 1, 2), H = testing::rand_int(rng, 1, 3), Lq = testing::rand_int(rng, 1, 9),
                Lk = testing::rand_int(rng, 1, 9), D = testing::rand_int(rng, 2, 8), Dv = testing::rand_int(rng, 2, 8);
  std::vector<int> ins = {f32_in(c, rng, {B, H, Lq, D}), f32_in(c, rng, {B, H, Lk, D}), f32_in(c, rng, {B, H, Lk, Dv})};
  if (mask_kind == 1) ins.push_back(f32_in(c, rng, {Lq, Lk}));
  if (mask_kind == 2) ins.push_back(bool_in(c, rng, {B, 1, 1, Lk}));
  at["dropout_p"] = 0.0;
  at["is_causal"] = int64_t{causal};
  node(c, "_scaled_dot_product_flash_attention_for_cpu", ins, {{{B, H, Lq, Dv}, f32}, {{B, H, Lq}, f32}}, at);
}

void attention_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  attention(add_case(cases, "attention"), rng, 0, false, {});
  attention(add_case(cases, "attention causal"), rng, 0, true, {});
  attention(add_case(cases, "attention float mask and scale"), rng, 1, false, {{"scale", 0.3}});
  attention(add_case(cases, "attention bool mask"), rng, 2, false, {});
}

int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t o = (in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

// kernel, stride, padding, dilation as (h, w) pairs.
void pool(Case& c, std::mt19937_64& rng, const std::string& op, const Shape& x, const Shape& k, const Shape& s,
          const Shape& p, const Shape& d, bool ceil_mode, AttrMap at = {}) {
  Shape y = x;
  y[y.size() - 2] = pooled(x[x.size() - 2], k[0], s[0], p[0], d[0], ceil_mode);
  y[y.size() - 1] = pooled(x[x.size() - 1], k[1], s[1], p[1], d[1], ceil_mode);
  at["kernel_size"] = k;
  at["stride"] = s;
  at["padding"] = p;
  at["ceil_mode"] = int64_t{ceil_mode};
  if (op == "max_pool2d_with_indices") at["dilation"] = d;
  std::vector<OutputSpec> outs = {{y, f32}};
  if (op == "max_pool2d_with_indices") outs.push_back({y, i64});
  node(c, op, {f32_in(c, rng, x)}, outs, at);
}

void pooling_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const Shape x{testing::rand_int(rng, 1, 2), testing::rand_int(rng, 1, 3), testing::rand_int(rng, 7, 12),
                testing::rand_int(rng, 7, 12)};
  const std::string mp = "max_pool2d_with_indices";
  pool(add_case(cases, "max_pool2d 3x3/2 pad 1"), rng, mp, x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false);
  pool(add_case(cases, "max_pool2d ceil_mode"), rng, mp, x, {2, 3}, {2, 2}, {0, 1}, {1, 1}, true);
  pool(add_case(cases, "max_pool2d dilation 2"), rng, mp, x, {2, 2}, {1, 2}, {1, 0}, {2, 2}, false);
  pool(add_case(cases, "max_pool2d CHW"), rng, mp, {x[1], x[2], x[3]}, {3, 3}, {2, 2}, {0, 0}, {1, 1}, false);
  pool(add_case(cases, "avg_pool2d exclude pad"), rng, "avg_pool2d", x, {3, 2}, {2, 1}, {1, 1}, {1, 1}, false,
       {{"count_include_pad", int64_t{0}}});
  pool(add_case(cases, "avg_pool2d ceil_mode include pad"), rng, "avg_pool2d", x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true,
       {{"count_include_pad", int64_t{1}}});
  pool(add_case(cases, "avg_pool2d divisor_override"), rng, "avg_pool2d", x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false,
       {{"divisor_override", int64_t{5}}});
  Case& ap = add_case(cases, "_adaptive_avg_pool2d");
  node(ap, "_adaptive_avg_pool2d", {f32_in(ap, rng, x)}, {{{x[0], x[1], 3, 4}, f32}}, {{"output_size", Shape{3, 4}}});
  Case& ap3 = add_case(cases, "_adaptive_avg_pool2d CHW");
  node(ap3, "_adaptive_avg_pool2d", {f32_in(ap3, rng, {x[1], x[2], x[3]})}, {{{x[1], 5, 2}, f32}},
       {{"output_size", Shape{5, 2}}});
}

void norm_cases(std::mt19937_64& rng, std::deque<Case>& cases) {
  const int64_t N = testing::rand_int(rng, 1, 3), C = 2 * testing::rand_int(rng, 1, 3), H = testing::rand_int(rng, 1, 5),
                W = testing::rand_int(rng, 2, 6);
  for (bool affine : {true, false}) {
    Case& c = add_case(cases, affine ? "batch_norm" : "batch_norm without weight and bias");
    const int x = f32_in(c, rng, {N, C, H, W});
    const int w = affine ? f32_in(c, rng, {C}) : -1, b = affine ? f32_in(c, rng, {C}) : -1;
    const int mean = f32_in(c, rng, {C}), var = f32_in(c, rng, {C}, 0.5f, 2.f);
    node(c, "_native_batch_norm_legit_no_training", {x, w, b, mean, var}, {{{N, C, H, W}, f32}, {{0}, f32}, {{0}, f32}},
         {{"momentum", 0.1}, {"eps", 1e-5}});
  }
  Case& l1 = add_case(cases, "layer_norm last dim");
  node(l1, "native_layer_norm", {f32_in(l1, rng, {N, H, W}), f32_in(l1, rng, {W}), f32_in(l1, rng, {W})},
       {{{N, H, W}, f32}, {{N, H, 1}, f32}, {{N, H, 1}, f32}}, {{"normalized_shape", Shape{W}}, {"eps", 1e-5}});
  Case& l2 = add_case(cases, "layer_norm two dims without weight and bias");
  node(l2, "native_layer_norm", {f32_in(l2, rng, {N, H, W}), -1, -1}, {{{N, H, W}, f32}, {{N, 1, 1}, f32}, {{N, 1, 1}, f32}},
       {{"normalized_shape", Shape{H, W}}, {"eps", 1e-3}});
  for (bool affine : {true, false}) {
    Case& c = add_case(cases, affine ? "group_norm" : "group_norm without weight and bias");
    const int x = f32_in(c, rng, {N, C, H, W});
    const int w = affine ? f32_in(c, rng, {C}) : -1, b = affine ? f32_in(c, rng, {C}) : -1;
    node(c, "native_group_norm", {x, w, b}, {{{N, C, H, W}, f32}, {{N, 2}, f32}, {{N, 2}, f32}},
         {{"N", N}, {"C", C}, {"HxW", H * W}, {"group", int64_t{2}}, {"eps", 1e-5}});
  }
  for (const char* op : {"_softmax", "_log_softmax"})
    for (int64_t dim : {int64_t{1}, int64_t{-1}}) {
      Case& c = add_case(cases, std::string(op) + " dim " + std::to_string(dim));
      node(c, op, {f32_in(c, rng, {N, H, W}, -4.f, 4.f)}, {{{N, H, W}, f32}}, {{"dim", dim}, {"half_to_float", int64_t{0}}});
    }
}

std::deque<Case> all_cases(std::mt19937_64& rng) {
  std::deque<Case> cases;
  unary_cases(rng, cases);
  binary_cases(rng, cases);
  select_cases(rng, cases);
  reduction_cases(rng, cases);
  movement_cases(rng, cases);
  source_cases(cases);
  conv_gemm_cases(rng, cases);
  attention_cases(rng, cases);
  pooling_cases(rng, cases);
  norm_cases(rng, cases);
  return cases;
}

// ---------------------------------------------------------------- running and comparing ----

// Outputs of `c` on target t. Output buffers start as `poison`, so an element a kernel leaves
// unwritten differs between two runs poisoned differently.
std::vector<Bytes> run_on(const target::Target& t, const Case& c, int threads, uint8_t poison) {
  runtime::Executable exe(c.g, runtime::ExecOptions{threads, &t});
  std::vector<Bytes> out;
  for (int o : c.g.outputs()) out.emplace_back(static_cast<size_t>(c.g.value(o).nbytes()) + 1, poison);
  std::vector<const void*> ins;
  std::vector<void*> outs;
  for (const auto& b : c.in) ins.push_back(b.data());
  for (auto& b : out) outs.push_back(b.data());
  exe.run(ins, outs);
  for (auto& b : out) b.pop_back();
  return out;
}

template <typename T>
::testing::AssertionResult close(const Bytes& got_b, const Bytes& ref_b) {
  const size_t n = ref_b.size() / sizeof(T);
  std::vector<T> got(n), ref(n);
  if (n > 0) {  // an empty output has no buffer (memcpy from null is undefined even for 0 bytes)
    std::memcpy(got.data(), got_b.data(), n * sizeof(T));
    std::memcpy(ref.data(), ref_b.data(), n * sizeof(T));
  }
  double scale = 1.0;
  for (T r : ref)
    if (std::isfinite(r)) scale = std::max(scale, std::fabs(static_cast<double>(r)));
  for (size_t i = 0; i < n; ++i) {
    const bool same_special = std::isnan(got[i]) ? std::isnan(ref[i]) : !std::isfinite(ref[i]) && got[i] == ref[i];
    const bool ok = std::isfinite(got[i]) && std::isfinite(ref[i])
                        ? std::fabs(static_cast<double>(got[i]) - static_cast<double>(ref[i])) <= 1e-4 * scale
                        : same_special;
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": cpu " << got[i] << ", reference " << ref[i]
                                           << " (tolerance " << 1e-4 * scale << ")";
  }
  return ::testing::AssertionSuccess();
}

// Floating outputs within 1e-4 * max(1, max|reference|) (NaN and infinities where the reference
// has them); every other dtype byte for byte.
::testing::AssertionResult same_output(DType dt, const Bytes& got, const Bytes& ref) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "sizes differ";
  if (dt == f32) return close<float>(got, ref);
  if (dt == f64) return close<double>(got, ref);
  if (got != ref) return ::testing::AssertionFailure() << dtype_name(dt) << " output differs";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- tests ----

TEST(ReferenceTarget, EveryKernelIsACpuKernelOfARegisteredOpWithoutHooks) {
  const auto& ref = ref_target();
  ASSERT_FALSE(ref.kernel_ops().empty());
  for (const auto& op : ref.kernel_ops()) {
    EXPECT_NE(cpu_target().find_kernel(op), nullptr) << op << " has a reference kernel but no cpu kernel";
    EXPECT_NE(ecg::find_op(op), nullptr) << op << " is not in the ECG op registry";
    const runtime::OpKernel* k = ref.find_kernel(op);
    EXPECT_TRUE(k->run != nullptr || k->view != nullptr) << op;
    EXPECT_FALSE(k->epilogue_hook) << op;
    EXPECT_FALSE(k->prologue_hook) << op;
    EXPECT_EQ(k->strided_inputs, 0u) << op;
    EXPECT_FALSE(k->strided_output) << op;
  }
}

TEST(ReferenceTarget, CoversEveryCpuOpButTheCpuLayoutOps) {
  for (const auto& op : cpu_target().kernel_ops()) {
    if (cpu_only_ops().count(op)) continue;
    EXPECT_NE(ref_target().find_kernel(op), nullptr) << "no reference kernel for " << op;
  }
  for (const auto& op : cpu_only_ops()) {
    EXPECT_NE(cpu_target().find_kernel(op), nullptr) << op << " is no longer a cpu op: update the list";
    EXPECT_EQ(ref_target().find_kernel(op), nullptr) << op;
  }
}

TEST(ReferenceTarget, MatchesTheCpuTargetOnSingleOpGraphs) {
  std::printf("[ seed     ] %s\n", testing::seed_note().c_str());
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed());
  std::set<std::string> ran;
  for (int round = 0; round < 3; ++round) {
    for (const Case& c : all_cases(rng)) {
      SCOPED_TRACE(c.name + ": " + c.g.describe_node(0));
      const ecg::Node& n = c.g.node(0);
      ASSERT_EQ(ref_target().supports(c.g, n), "");
      ASSERT_EQ(cpu_target().supports(c.g, n), "");
      const auto ref = run_on(ref_target(), c, 1, 0xA5);
      const auto cpu = run_on(cpu_target(), c, 2, 0x5A);
      for (size_t o = 0; o < ref.size(); ++o)
        EXPECT_TRUE(same_output(c.g.value(c.g.outputs()[o]).dtype, cpu[o], ref[o])) << "output " << o;
      ran.insert(n.op);
    }
  }
  for (const auto& op : ref_target().kernel_ops()) {
    if (!ref_target().find_kernel(op)->run) continue;  // views: runtime::register_view_ops
    EXPECT_TRUE(ran.count(op)) << op << " has no equivalence case";
  }
}

// Builds one node over float32 inputs of the given shapes.
struct OneNode {
  Graph g;
  int id = -1;
  OneNode(const std::string& op, const std::vector<Shape>& ins, const std::vector<OutputSpec>& outs, AttrMap at,
          DType in_dtype = f32) {
    std::vector<int> v;
    for (const auto& s : ins) v.push_back(g.add_input(s, in_dtype));
    id = g.add_node(op, v, outs, std::move(at));
  }
};

TEST(ReferenceTarget, RefusedNodesComeWithAReason) {
  const Shape x{1, 2, 5, 5};
  const std::vector<std::pair<std::string, OneNode>> refused = {
      {"transposed convolution",
       OneNode("convolution", {x, {2, 3, 3, 3}}, {{{1, 3, 7, 7}, f32}}, {{"transposed", int64_t{1}}})},
      {"3-D convolution", OneNode("convolution", {{1, 2, 4, 4, 4}, {3, 2, 1, 1, 1}}, {{{1, 3, 4, 4, 4}, f32}}, {})},
      {"convolution output shape off", OneNode("convolution", {x, {3, 2, 3, 3}}, {{{1, 3, 5, 5}, f32}}, {})},
      {"attention with dropout",
       OneNode("_scaled_dot_product_flash_attention_for_cpu", {{1, 1, 2, 4}, {1, 1, 3, 4}, {1, 1, 3, 4}},
               {{{1, 1, 2, 4}, f32}, {{1, 1, 2}, f32}}, {{"dropout_p", 0.1}})},
      {"gelu approximate='fast'", OneNode("gelu", {x}, {{x, f32}}, {{"approximate", std::string("fast")}})},
      {"round decimals", OneNode("round", {x}, {{x, f32}}, {{"decimals", int64_t{2}}})},
      {"div rounding_mode='trunc'",
       OneNode("div", {x, x}, {{x, f32}}, {{"rounding_mode", std::string("trunc")}, {"compute_dtype", std::string("float32")}})},
      {"mul with alpha", OneNode("mul", {x, x}, {{x, f32}}, {{"alpha", 2.0}, {"compute_dtype", std::string("float32")}})},
      {"bitwise_and on floats",
       OneNode("bitwise_and", {x, x}, {{x, f32}}, {{"compute_dtype", std::string("float32")}})},
      {"_softmax half_to_float", OneNode("_softmax", {x}, {{x, f32}}, {{"dim", int64_t{1}}, {"half_to_float", int64_t{1}}})},
      {"argmax over two dims", OneNode("argmax", {x}, {{{1, 5}, i64}}, {{"dim", Shape{1, 2}}})},
      {"sum output of the wrong size", OneNode("sum", {x}, {{{1, 2}, f32}}, {{"dim", Shape{2}}, {"keepdim", int64_t{0}}})},
      {"mm on float64", OneNode("mm", {{2, 3}, {3, 4}}, {{{2, 4}, f64}}, {}, f64)},
      {"mm with mismatched inner dims", OneNode("mm", {{2, 3}, {4, 4}}, {{{2, 4}, f32}}, {})},
      {"avg_pool2d divisor_override 0",
       OneNode("avg_pool2d", {x}, {{{1, 2, 2, 2}, f32}}, {{"kernel_size", Shape{2, 2}}, {"divisor_override", int64_t{0}}})},
      {"max_pool2d output ignoring ceil_mode",
       OneNode("max_pool2d_with_indices", {x}, {{{1, 2, 2, 2}, f32}, {{1, 2, 2, 2}, i64}},
               {{"kernel_size", Shape{2, 2}}, {"ceil_mode", int64_t{1}}})},
      {"batch_norm with non-empty save_mean",
       OneNode("_native_batch_norm_legit_no_training", {x, {2}, {2}, {2}, {2}}, {{x, f32}, {{2}, f32}, {{2}, f32}},
               {{"momentum", 0.1}, {"eps", 1e-5}})},
      {"layer_norm mean of the wrong size",
       OneNode("native_layer_norm", {x}, {{x, f32}, {{1, 2}, f32}, {{1, 2}, f32}},
               {{"normalized_shape", Shape{5}}, {"eps", 1e-5}})},
      {"conv2d_nchwc (a cpu layout op)", OneNode("conv2d_nchwc", {{1, 1, 5, 5, 2}, {18}}, {{{1, 1, 5, 5, 1}, f32}}, {})},
  };
  for (const auto& [what, one] : refused) {
    const std::string why = ref_target().supports(one.g, one.g.node(one.id));
    EXPECT_FALSE(why.empty()) << what << " is accepted";
    std::printf("[ refused  ] %s: %s\n", what.c_str(), why.c_str());
  }
}

}  // namespace
}  // namespace dnnfusion

namespace dnnfusion {
namespace {

// var.dim's `unbiased` and var.correction's `correction` both reach the kernel, on both targets
// (checked against values computed here, not against each other).
TEST(ReferenceTarget, VarHonoursUnbiasedAndCorrection) {
  const std::vector<float> x = {1, 2, 3, 4, 2, 2, 2, 6};  // rows: mean 2.5, 3
  const double ss[2] = {5.0, 12.0};                        // sums of squared deviations
  struct Form {
    ecg::AttrMap attrs;
    double divisor_minus;  // N - divisor
  };
  const std::vector<Form> forms = {{{{"unbiased", int64_t{0}}}, 0.0},
                                   {{{"unbiased", int64_t{1}}}, 1.0},
                                   {{{"correction", 0.0}}, 0.0},
                                   {{}, 1.0}};
  for (const std::string name : {"cpu", "reference"})
    for (const Form& f : forms) {
      Graph g;
      int in = g.add_input({2, 4}, DType::Float32, "x");
      ecg::AttrMap a = f.attrs;
      a["dim"] = std::vector<int64_t>{1};
      int out = g.node(g.add_node("var", {in}, {{{2}, DType::Float32}}, a)).outputs[0];
      g.set_outputs({out});
      runtime::Executable exe(g, runtime::ExecOptions{1, &target::registry().get(name)});
      std::vector<float> y(2);
      exe.run({x.data()}, {y.data()});
      for (int r = 0; r < 2; ++r) EXPECT_NEAR(y[r], ss[r] / (4.0 - f.divisor_minus), 1e-6) << name << " row " << r;
    }
}

}  // namespace
}  // namespace dnnfusion
