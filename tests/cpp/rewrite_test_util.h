// Helpers for the rewriting-pass tests: a small float32 graph builder that infers result shapes
// and owns its weights' data, a runner over the runtime's Executable, constant folding with the
// runtime as evaluator (as the pipeline does), and an output comparison relative to max|ref|.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ecg/graph.h"
#include "ecg/op_registry.h"
#include "kernel_test_util.h"
#include "rewrite/fold_constants.h"
#include "rewrite/graph_edit.h"
#include "runtime/executor.h"

namespace dnnfusion::rewrite_test {

using ecg::AttrMap;
using ecg::Graph;
using Shape = std::vector<int64_t>;

struct GraphBuilder {
  Graph g;
  std::mt19937_64& rng;
  std::vector<std::shared_ptr<std::vector<float>>> data;  // weights' storage (borrowed by g)

  explicit GraphBuilder(std::mt19937_64& r) : rng(r) {}

  int input(const Shape& s) { return g.add_input(s, DType::Float32, "x" + std::to_string(g.inputs().size())); }
  int weight_data(const Shape& s, std::vector<float> v) {
    data.push_back(std::make_shared<std::vector<float>>(std::move(v)));
    return g.add_weight(s, DType::Float32, data.back()->data(), "w" + std::to_string(data.size()));
  }
  // Random weight with |values| in [lo, hi] and a random sign unless `positive`.
  int weight(const Shape& s, float lo = 0.5f, float hi = 1.5f, bool positive = false) {
    int64_t n = 1;
    for (auto d : s) n *= d;
    std::vector<float> v = testing::random_vec(rng, static_cast<size_t>(n), lo, hi);
    if (!positive)
      for (auto& x : v)
        if (rng() & 1) x = -x;
    return weight_data(s, std::move(v));
  }
  int cst(float v) { return g.add_constant({}, DType::Float32, &v, "scalar"); }

  int node(const std::string& op, const std::vector<int>& ins, const Shape& out, AttrMap attrs = {},
           DType dt = DType::Float32) {
    return g.node(g.add_node(op, ins, {{out, dt}}, std::move(attrs), "aten." + op)).outputs[0];
  }
  const Shape& shape(int v) const { return g.value(v).shape; }
  int un(const std::string& op, int x, AttrMap attrs = {}) { return node(op, {x}, shape(x), std::move(attrs)); }
  int bin(const std::string& op, int a, int b) {
    AttrMap at{{"compute_dtype", std::string("float32")}};
    if (op == "add" || op == "sub") at["alpha"] = int64_t{1};
    return node(op, {a, b}, rewrite::broadcast_shapes(shape(a), shape(b)), at);
  }
  int conv(int x, int w, int b, int64_t stride = 1, int64_t pad = 0, int64_t groups = 1) {
    const Shape& xs = shape(x);
    const Shape& ws = shape(w);
    Shape out = {xs[0], ws[0]};
    for (size_t i = 2; i < xs.size(); ++i) out.push_back((xs[i] + 2 * pad - ws[i]) / stride + 1);
    const size_t sp = xs.size() - 2;
    return node("convolution", {x, w, b}, out,
                {{"stride", Shape(sp, stride)}, {"padding", Shape(sp, pad)}, {"dilation", Shape(sp, 1)},
                 {"transposed", int64_t{0}}, {"output_padding", Shape(sp, 0)}, {"groups", groups}});
  }
  int mm(int a, int b) { return node("mm", {a, b}, {shape(a)[0], shape(b)[1]}); }
  int addmm(int bias, int a, int b) {
    return node("addmm", {bias, a, b}, {shape(a)[0], shape(b)[1]}, {{"beta", int64_t{1}}, {"alpha", int64_t{1}}});
  }
  int reduce(const std::string& op, int x, Shape dims, bool keepdim) {
    const Shape& xs = shape(x);
    Shape out;
    for (size_t i = 0; i < xs.size(); ++i) {
      bool red = dims.empty();
      for (auto d : dims) red |= (d < 0 ? d + static_cast<int64_t>(xs.size()) : d) == static_cast<int64_t>(i);
      if (!red) out.push_back(xs[i]);
      else if (keepdim) out.push_back(1);
    }
    AttrMap at{{"keepdim", int64_t{keepdim}}};
    if (!dims.empty()) at["dim"] = dims;
    return node(op, {x}, out, at);
  }
  int view(int x, const Shape& s) { return node("view", {x}, s, {{"size", s}}); }
  int expand(int x, const Shape& s) { return node("expand", {x}, s, {{"size", s}}); }
  int permute(int x, const Shape& dims) {
    Shape out;
    for (auto d : dims) out.push_back(shape(x)[static_cast<size_t>(d)]);
    return node("permute", {x}, out, {{"dims", dims}});
  }
  int transpose(int x, int64_t d0, int64_t d1) {
    Shape out = shape(x);
    std::swap(out[static_cast<size_t>(d0)], out[static_cast<size_t>(d1)]);
    return node("transpose", {x}, out, {{"dim0", d0}, {"dim1", d1}});
  }
  // Output 0 of max_pool2d_with_indices (NCHW, no padding).
  int maxpool(int x, int64_t k, int64_t s) {
    Shape out = shape(x);
    for (size_t i = out.size() - 2; i < out.size(); ++i) out[i] = (out[i] - k) / s + 1;
    int n = g.add_node("max_pool2d_with_indices", {x}, {{out, DType::Float32}, {out, DType::Int64}},
                       {{"kernel_size", Shape{k, k}}, {"stride", Shape{s, s}}, {"padding", Shape{0, 0}},
                        {"dilation", Shape{1, 1}}, {"ceil_mode", int64_t{0}}},
                       "aten.max_pool2d_with_indices");
    return g.node(n).outputs[0];
  }
  int avgpool(int x, int64_t k, int64_t s) {
    Shape out = shape(x);
    for (size_t i = out.size() - 2; i < out.size(); ++i) out[i] = (out[i] - k) / s + 1;
    return node("avg_pool2d", {x}, out,
                {{"kernel_size", Shape{k, k}}, {"stride", Shape{s, s}}, {"padding", Shape{0, 0}},
                 {"ceil_mode", int64_t{0}}, {"count_include_pad", int64_t{1}}});
  }
  // Output 0 of an inference batch norm over dim 1 with random parameters (var > 0).
  int batch_norm(int x, bool affine = true) {
    const int64_t C = shape(x)[1];
    int w = affine ? weight({C}) : -1, b = affine ? weight({C}) : -1;
    int mean = weight({C}, 0.f, 0.5f), var = weight({C}, 0.5f, 2.f, true);
    const Shape& s = shape(x);
    int n = g.add_node("_native_batch_norm_legit_no_training", {x, w, b, mean, var},
                       {{s, DType::Float32}, {{0}, DType::Float32}, {{0}, DType::Float32}},
                       {{"momentum", 0.1}, {"eps", 1e-5}}, "aten._native_batch_norm_legit_no_training");
    return g.node(n).outputs[0];
  }
  void out(const std::vector<int>& ids) { g.set_outputs(ids); }
};

using Buffers = std::vector<std::vector<uint8_t>>;

inline Buffers random_inputs(const Graph& g, std::mt19937_64& rng, float lo, float hi) {
  Buffers in;
  for (int id : g.inputs()) {
    auto v = testing::random_vec(rng, static_cast<size_t>(g.value(id).numel()), lo, hi);
    in.emplace_back(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<const uint8_t*>(v.data() + v.size()));
  }
  return in;
}

inline Buffers run_graph(const Graph& g, const Buffers& inputs) {
  runtime::Executable exe(g, runtime::ExecOptions{1});
  Buffers out;
  std::vector<const void*> ins;
  std::vector<void*> outs;
  for (const auto& b : inputs) ins.push_back(b.data());
  for (int o : g.outputs()) out.emplace_back(static_cast<size_t>(g.value(o).nbytes()));
  for (auto& b : out) outs.push_back(b.data());
  exe.run(ins, outs);
  return out;
}

// fold_constants with the runtime as evaluator, as the pipeline runs it.
inline Graph fold(const Graph& g) {
  return rewrite::fold_constants(g, [](const Graph& s) {
    Buffers none;
    return run_graph(s, none);
  });
}

// Runtime FLOPs of a folded graph.
inline int64_t total_flops(const Graph& g) {
  int64_t f = 0;
  for (const auto& n : g.nodes()) f += ecg::node_flops(g, n);
  return f;
}

inline int count_op(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes()) c += n.op == op;
  return c;
}

// Float32 outputs agree within rtol * max(1, max|ref|) (non-finite values must match exactly in
// kind); other dtypes bit for bit.
inline ::testing::AssertionResult outputs_close(const Graph& g, const Buffers& ref, const Buffers& got,
                                                double rtol = 1e-5) {
  if (ref.size() != got.size()) return ::testing::AssertionFailure() << "output count differs";
  for (size_t o = 0; o < ref.size(); ++o) {
    const auto& v = g.value(g.outputs()[o]);
    if (ref[o].size() != got[o].size()) return ::testing::AssertionFailure() << "output " << o << " size differs";
    if (v.dtype != DType::Float32) {
      if (ref[o] != got[o]) return ::testing::AssertionFailure() << "output " << o << " (" << dtype_name(v.dtype) << ") differs";
      continue;
    }
    const float* r = reinterpret_cast<const float*>(ref[o].data());
    const float* x = reinterpret_cast<const float*>(got[o].data());
    const size_t n = ref[o].size() / sizeof(float);
    double scale = 1.0;
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(r[i])) scale = std::max(scale, std::fabs(static_cast<double>(r[i])));
    for (size_t i = 0; i < n; ++i) {
      const bool fr = std::isfinite(r[i]), fx = std::isfinite(x[i]);
      bool ok = fr && fx ? std::fabs(static_cast<double>(r[i]) - x[i]) <= rtol * scale
                         : (!fr && !fx && (std::isnan(r[i]) == std::isnan(x[i])) && (std::isnan(r[i]) || r[i] == x[i]));
      if (!ok)
        return ::testing::AssertionFailure() << "output " << o << " element " << i << ": got " << x[i] << ", expected "
                                             << r[i] << " (tolerance " << rtol * scale << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace dnnfusion::rewrite_test
