#include "codegen/pair_profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>

#include "codegen/fused_codegen.h"
#include "common/error.h"
#include "ecg/op_registry.h"
#include "runtime/executor.h"

namespace dnnfusion::codegen {

using ecg::Graph;
using ecg::Node;

namespace {

std::string attr_str(const ecg::Attr& a) {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
          os << '[';
          for (auto x : v) os << x << ',';
          os << ']';
        } else {
          os << v;
        }
      },
      a);
  return os.str();
}

std::string node_sig(const Graph& g, const Node& n) {
  std::ostringstream os;
  os << n.op << '<' << ecg::mapping_type_name(n.info->mapping) << ">(";
  for (int v : n.inputs) {
    if (v < 0) {
      os << "_,";
      continue;
    }
    os << ecg::shape_str(g.value(v).shape) << dtype_name(g.value(v).dtype) << (g.value(v).is_compile_time() ? "w" : "") << ',';
  }
  os << ")->" << ecg::shape_str(g.value(n.outputs[0]).shape) << '{';
  for (const auto& [k, a] : n.attrs) os << k << '=' << attr_str(a) << ';';
  os << '}';
  return os.str();
}

// The pair as a graph of its own: outside operands become inputs (weights stay weights).
Graph pair_graph(const Graph& g, int p, int c) {
  Graph pg;
  std::map<int, int> vmap;
  auto operand = [&](int v) -> int {
    if (v < 0) return -1;
    auto it = vmap.find(v);
    if (it != vmap.end()) return it->second;
    const ecg::Value& val = g.value(v);
    int nv;
    if (val.kind == ecg::ValueKind::Weight)
      nv = pg.add_weight(val.shape, val.dtype, val.data, val.name);
    else if (val.kind == ecg::ValueKind::Constant)
      nv = pg.add_constant(val.shape, val.dtype, val.data, val.name);
    else
      nv = pg.add_input(val.shape, val.dtype, val.name);
    vmap[v] = nv;
    return nv;
  };
  for (int id : {p, c}) {
    const Node& n = g.node(id);
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(operand(v));
    std::vector<ecg::OutputSpec> outs;
    for (int v : n.outputs) outs.push_back({g.value(v).shape, g.value(v).dtype});
    int nn = pg.add_node(n.op, ins, outs, n.attrs, n.origin);
    for (size_t s = 0; s < n.outputs.size(); ++s) vmap[n.outputs[s]] = pg.node(nn).outputs[s];
  }
  pg.set_outputs({pg.node(1).outputs[0]});
  return pg;
}

fusion::Plan pair_plan(const Graph& pg, bool fused) {
  fusion::Plan plan;
  if (fused) {
    fusion::Block b;
    b.nodes = {0, 1};
    for (int n : b.nodes)
      if (pg.node(n).info->mapping == ecg::MappingType::ManyToMany) b.dominant = n;
    b.type = b.dominant >= 0 ? ecg::MappingType::ManyToMany : pg.node(1).info->mapping;
    plan.blocks.push_back(b);
    plan.block_of = {0, 0};
  } else {
    plan = fusion::plan_none(pg);
  }
  return plan;
}

double time_us(runtime::Executable& exe, const std::vector<const void*>& in, const std::vector<void*>& out) {
  exe.run(in, out);  // warm-up: first touch of the arena, caches
  std::vector<double> t;
  auto t_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (int i = 0; i < 15; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    exe.run(in, out);
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (i >= 4 && t1 > t_end) break;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void progress(size_t done, size_t total) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[dnnfusion] profiling yellow fusion cells [%.*s%*s] %zu/%zu", filled,
               "##############################", width - filled, "", done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace

std::string pair_key(const Graph& g, int producer, int consumer) {
  return node_sig(g, g.node(producer)) + " => " + node_sig(g, g.node(consumer));
}

std::vector<PairTiming> measure_pairs(const Graph& g, const std::vector<std::pair<int, int>>& pairs, int threads) {
  std::vector<PairTiming> out(pairs.size());
  if (pairs.empty()) return out;
  progress(0, pairs.size());
  std::vector<Graph> graphs;
  for (auto [p, c] : pairs) graphs.push_back(pair_graph(g, p, c));
  CodegenUnit unit;
  std::vector<int> fused_idx;
  for (const Graph& pg : graphs) fused_idx.push_back(unit.add(pg, pair_plan(pg, true)));
  unit.compile();
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Graph& pg = graphs[i];
    std::vector<std::vector<uint8_t>> in_bytes;
    std::vector<const void*> in;
    for (int v : pg.inputs()) {
      const auto& val = pg.value(v);
      in_bytes.emplace_back(static_cast<size_t>(val.nbytes()), 0);
      if (val.dtype == DType::Float32) {
        float* f = reinterpret_cast<float*>(in_bytes.back().data());
        for (int64_t k = 0; k < val.numel(); ++k) f[k] = dist(rng);
      }
      in.push_back(in_bytes.back().data());
    }
    std::vector<std::vector<uint8_t>> out_bytes;
    std::vector<void*> outs;
    for (int v : pg.outputs()) out_bytes.emplace_back(static_cast<size_t>(pg.value(v).nbytes()));
    for (auto& b : out_bytes) outs.push_back(b.data());
    runtime::Executable fused(pg, runtime::ExecOptions{threads}, std::move(unit.result(fused_idx[i]).program));
    runtime::Executable apart(pg, runtime::ExecOptions{threads});
    // Alternate the two so drift (turbo, other processes) hits both alike.
    double f1 = time_us(fused, in, outs), a1 = time_us(apart, in, outs);
    double f2 = time_us(fused, in, outs), a2 = time_us(apart, in, outs);
    out[i] = PairTiming{std::min(f1, f2), std::min(a1, a2)};
    progress(i + 1, pairs.size());
  }
  return out;
}

}  // namespace dnnfusion::codegen
