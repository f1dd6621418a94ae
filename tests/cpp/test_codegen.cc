// Fused code generation: index arithmetic (view composition) against brute force, and generated
// programs for hand-made fusion plans against the unfused executor on the same graph — inline
// element-wise chains with broadcasting, data movement inside blocks, forced materialization,
// Many-to-Many blocks with prologue/epilogue hooks, and the on-disk kernel cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <random>

#include "target/cpu/codegen/fused_codegen.h"
#include "target/cpu/codegen/prelude.h"
#include "target/cpu/codegen/jit_compiler.h"
#include "codegen/view_compose.h"
#include "ecg/elementwise_expr.h"
#include "ecg/op_registry.h"
#include "common/error.h"
#include "kernel_test_util.h"
#include "runtime/executor.h"
#include "test_env_util.h"

using namespace dnnfusion;
using codegen::StridedView;
using ecg::Graph;
namespace dt = dnnfusion::testing;

namespace {

// Element index i (row-major over v.shape) -> buffer offset.
int64_t address(const StridedView& v, int64_t i) {
  int64_t off = v.offset;
  for (int64_t k = static_cast<int64_t>(v.shape.size()) - 1; k >= 0; --k) {
    off += (i % v.shape[k]) * v.strides[k];
    i /= v.shape[k];
  }
  return off;
}

struct Run {
  std::vector<std::vector<float>> outs;
  runtime::ExecStats stats;
};

Run run_graph(const Graph& g, const std::vector<std::vector<float>>& inputs, runtime::Program prog = {}) {
  runtime::Executable exe(g, runtime::ExecOptions{2}, std::move(prog));
  Run r;
  std::vector<const void*> in;
  for (auto& v : inputs) in.push_back(v.data());
  std::vector<void*> out;
  for (int o : g.outputs()) r.outs.emplace_back(static_cast<size_t>(g.value(o).numel()));
  for (auto& o : r.outs) out.push_back(o.data());
  exe.run(in, out);
  r.stats = exe.stats();
  return r;
}

fusion::Plan make_plan(const Graph& g, const std::vector<std::vector<int>>& groups) {
  fusion::Plan p;
  p.block_of.assign(g.nodes().size(), -1);
  for (const auto& grp : groups) {
    fusion::Block b;
    b.nodes = grp;
    for (int n : grp) {
      p.block_of[n] = static_cast<int>(p.blocks.size());
      if (g.node(n).info->mapping == ecg::MappingType::ManyToMany) b.dominant = n;
    }
    b.type = b.dominant >= 0 ? ecg::MappingType::ManyToMany : ecg::MappingType::OneToOne;
    p.blocks.push_back(b);
  }
  for (size_t n = 0; n < g.nodes().size(); ++n)
    if (p.block_of[n] < 0) {
      p.block_of[n] = static_cast<int>(p.blocks.size());
      fusion::Block b;
      b.nodes = {static_cast<int>(n)};
      b.type = g.node(static_cast<int>(n)).info->mapping;
      p.blocks.push_back(b);
    }
  // Blocks in the order of their first node is topological for the contiguous groups used here.
  std::vector<size_t> order(p.blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.blocks[a].nodes[0] < p.blocks[b].nodes[0]; });
  fusion::Plan q;
  q.block_of.assign(g.nodes().size(), -1);
  for (size_t i : order) {
    for (int n : p.blocks[i].nodes) q.block_of[n] = static_cast<int>(q.blocks.size());
    q.blocks.push_back(p.blocks[i]);
  }
  return q;
}

void expect_same(const Graph& g, const std::vector<std::vector<float>>& inputs, const std::vector<std::vector<int>>& groups,
                 int expect_kernels = -1, double tol = 2e-6) {
  Run ref = run_graph(g, inputs);
  codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, groups));
  Run got = run_graph(g, inputs, std::move(cg.program));
  ASSERT_EQ(ref.outs.size(), got.outs.size());
  for (size_t i = 0; i < ref.outs.size(); ++i)
    EXPECT_TRUE(dt::all_close(got.outs[i].data(), ref.outs[i].data(), ref.outs[i].size(), tol, tol)) << "output " << i;
  if (expect_kernels >= 0) {
    EXPECT_EQ(got.stats.kernels_per_call, expect_kernels) << cg.source;
  }
  EXPECT_LE(got.stats.irs_bytes, ref.stats.irs_bytes);
}

std::vector<float> rnd(std::mt19937_64& rng, int64_t n) { return dt::random_vec(rng, static_cast<size_t>(n), -2.f, 2.f); }

}  // namespace

TEST(ViewCompose, ReshapeMatchesBruteForce) {
  std::mt19937_64 rng(dt::test_seed());
  SCOPED_TRACE(dt::seed_note());
  int ok = 0, refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // A contiguous tensor, permuted and sliced, then reshaped.
    std::vector<int64_t> shape;
    int rank = static_cast<int>(dt::rand_int(rng, 1, 4));
    for (int i = 0; i < rank; ++i) shape.push_back(dt::rand_int(rng, 1, 4) * (dt::rand_int(rng, 0, 1) ? 2 : 1));
    StridedView v = StridedView::contiguous(shape);
    std::vector<int64_t> perm(rank);
    for (int i = 0; i < rank; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    StridedView p{{}, {}, 0};
    for (int i = 0; i < rank; ++i) p.shape.push_back(v.shape[perm[i]]), p.strides.push_back(v.strides[perm[i]]);
    int64_t n = dt::numel(p.shape);
    // Random factorization of n as the new shape.
    std::vector<int64_t> ns;
    int64_t rest = n;
    while (rest > 1 && ns.size() < 4) {
      std::vector<int64_t> divs;
      for (int64_t d = 2; d <= rest; ++d)
        if (rest % d == 0) divs.push_back(d);
      int64_t d = divs[static_cast<size_t>(dt::rand_int(rng, 0, static_cast<int64_t>(divs.size()) - 1))];
      ns.push_back(d);
      rest /= d;
      if (dt::rand_int(rng, 0, 3) == 0) ns.push_back(1);
    }
    if (rest > 1) ns.push_back(rest);
    if (ns.empty()) ns.push_back(1);
    auto r = codegen::reshape_view(p, ns);
    if (!r) {
      ++refused;
      continue;
    }
    ++ok;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(address(*r, i), address(p, i)) << "element " << i;
  }
  EXPECT_GT(ok, 100);
  EXPECT_GT(refused, 10);  // permuted tensors that cannot be viewed exist and are refused
}

TEST(Codegen, InlineChainWithBroadcastAndDataMovement) {
  std::mt19937_64 rng(dt::test_seed());
  SCOPED_TRACE(dt::seed_note());
  Graph g;
  int x = g.add_input({2, 3, 4, 5}, DType::Float32, "x");
  auto wv = rnd(rng, 5);
  int w = g.add_weight({5}, DType::Float32, wv.data(), "w");
  float half = 0.5f;
  int c = g.add_constant({}, DType::Float32, &half, "c");
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> s, ecg::AttrMap a = {}) {
    return g.node(g.add_node(op, in, {{s, DType::Float32}}, a)).outputs[0];
  };
  int a = f("add", {x, w}, {2, 3, 4, 5});
  int r = f("gelu", {a}, {2, 3, 4, 5});
  int s = f("sigmoid", {r}, {2, 3, 4, 5});
  int m = f("mul", {r, s}, {2, 3, 4, 5});  // r is used twice: common sub-expression
  int p = f("permute", {m}, {2, 4, 3, 5}, {{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
  int v = f("view", {p}, {2, 2, 2, 3, 5}, {{"size", std::vector<int64_t>{2, 2, 2, 3, 5}}});
  int o = f("mul", {v, c}, {2, 2, 2, 3, 5});
  g.set_outputs({o});
  expect_same(g, {rnd(rng, 120)}, {{0, 1, 2, 3, 4, 5, 6}}, 1);
}

TEST(Codegen, ShortInnerDimensionLoopsWalkTheLastTwoDims) {
  // NCHW -> NCHW16c, a 32c -> 16c re-block and a one-image transform whose only outer row is
  // split among the workers: each a loop over (rows, second-to-last dim, 16-wide channel block).
  std::mt19937_64 rng(dt::test_seed() + 7);
  SCOPED_TRACE(dt::seed_note());
  auto f = [](Graph& g, const char* op, std::vector<int> in, std::vector<int64_t> s, ecg::AttrMap a = {}) {
    return g.node(g.add_node(op, in, {{s, DType::Float32}}, a)).outputs[0];
  };
  using V = std::vector<int64_t>;
  {
    Graph g;
    int x = g.add_input({2, 64, 7, 9}, DType::Float32, "x");
    int v = f(g, "view", {x}, {2, 4, 16, 7, 9}, {{"size", V{2, 4, 16, 7, 9}}});
    int p = f(g, "permute", {v}, {2, 4, 7, 9, 16}, {{"dims", V{0, 1, 3, 4, 2}}});
    g.set_outputs({f(g, "relu", {p}, {2, 4, 7, 9, 16})});
    expect_same(g, {rnd(rng, 2 * 64 * 7 * 9)}, {{0, 1, 2}}, 1);
    codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, {{0, 1, 2}}));
    EXPECT_NE(cg.source.find("i2_"), std::string::npos) << cg.source;
  }
  {
    Graph g;
    int x = g.add_input({1, 3, 5, 6, 32}, DType::Float32, "x");
    int v = f(g, "view", {x}, {1, 3, 5, 6, 2, 16}, {{"size", V{1, 3, 5, 6, 2, 16}}});
    int p = f(g, "permute", {v}, {1, 3, 2, 5, 6, 16}, {{"dims", V{0, 1, 4, 2, 3, 5}}});
    int w = f(g, "view", {p}, {1, 6, 5, 6, 16}, {{"size", V{1, 6, 5, 6, 16}}});
    g.set_outputs({f(g, "relu", {w}, {1, 6, 5, 6, 16})});
    // The merging view of the permuted tensor is no strided view: the re-block is materialized
    // (a loop of its own) and the relu reads it.
    expect_same(g, {rnd(rng, 3 * 5 * 6 * 32)}, {{0, 1, 2, 3}}, 2);
  }
  {
    Graph g;
    int x = g.add_input({1, 16, 30, 31}, DType::Float32, "x");
    int v = f(g, "view", {x}, {1, 1, 16, 30, 31}, {{"size", V{1, 1, 16, 30, 31}}});
    int p = f(g, "permute", {v}, {1, 1, 30, 31, 16}, {{"dims", V{0, 1, 3, 4, 2}}});
    g.set_outputs({f(g, "relu", {p}, {1, 1, 30, 31, 16})});
    expect_same(g, {rnd(rng, 16 * 30 * 31)}, {{0, 1, 2}}, 1);
  }
}

// The prelude's erf (a rational fit, clamped) against the C library in double: every value of a
// dense sweep of [-8, 8] plus the edges (+-0, +-inf, NaN, huge, tiny), through both erf and the
// erf-GELU that uses it in generated code.
TEST(Codegen, PreludeErfAndGeluMatchTheLibraryOverTheWholeRange) {
  std::vector<float> xs;
  for (int i = -80000; i <= 80000; ++i) xs.push_back(static_cast<float>(i) * 1e-4f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, inf, -inf, 1e30f, -1e30f, 1e-30f, -1e-30f, 3.99999f, 4.00001f, -3.99999f, 4e4f})
    xs.push_back(v);
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = static_cast<int64_t>(xs.size());
  Graph g;
  int x = g.add_input({n}, DType::Float32, "x");
  int e = g.node(g.add_node("erf", {x}, {{{n}, DType::Float32}}, {})).outputs[0];
  int ge = g.node(g.add_node("gelu", {x}, {{{n}, DType::Float32}}, {})).outputs[0];
  g.set_outputs({e, ge});
  codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, {{0, 1}}));
  ::Run got = run_graph(g, {xs}, std::move(cg.program));
  ASSERT_NE(cg.source.find("dnnf_erf("), std::string::npos) << cg.source;
  double worst_erf = 0, worst_gelu = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[i], ref_erf = std::erf(v), ref_gelu = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    const float ge_got = got.outs[1][i], e_got = got.outs[0][i];
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(e_got) && std::isnan(ge_got)) << "NaN must propagate";
      continue;
    }
    ASSERT_LE(std::fabs(e_got), 1.f) << "erf(" << v << ") = " << e_got << " leaves [-1, 1]";
    worst_erf = std::max(worst_erf, std::fabs(e_got - ref_erf));
    if (std::isinf(v)) {
      EXPECT_EQ(e_got, v > 0 ? 1.f : -1.f);  // gelu(+-inf) is inf * 0 somewhere; torch itself gives NaN
    } else {
      // Absolute near 0, relative for large |x| (where gelu(x) ~ x).
      worst_gelu = std::max(worst_gelu, std::fabs(ge_got - ref_gelu) / std::max(1.0, std::fabs(v)));
    }
  }
  EXPECT_LT(worst_erf, 5e-7);
  EXPECT_LT(worst_gelu, 5e-7);
}

TEST(Codegen, NonViewableReshapeIsMaterializedInsideTheBlock) {
  std::mt19937_64 rng(dt::test_seed());
  Graph g;
  int x = g.add_input({4, 6}, DType::Float32, "x");
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> s, ecg::AttrMap a = {}) {
    return g.node(g.add_node(op, in, {{s, DType::Float32}}, a)).outputs[0];
  };
  int e = f("exp", {x}, {4, 6});
  int t = f("t", {e}, {6, 4});
  int v = f("view", {t}, {24}, {{"size", std::vector<int64_t>{24}}});  // needs a copy in torch too
  int n = f("neg", {v}, {24});
  g.set_outputs({n});
  codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, {{0, 1, 2, 3}}));
  EXPECT_EQ(cg.blocks[0].internal_bytes, 24 * 4);
  expect_same(g, {rnd(rng, 24)}, {{0, 1, 2, 3}}, 2);
}

TEST(Codegen, BlockOutputsUsedOutsideAreWrittenAndPureViewsAlias) {
  std::mt19937_64 rng(dt::test_seed());
  Graph g;
  int x = g.add_input({3, 8}, DType::Float32, "x");
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> s, ecg::AttrMap a = {}) {
    return g.node(g.add_node(op, in, {{s, DType::Float32}}, a)).outputs[0];
  };
  int r = f("relu", {x}, {3, 8});
  int v = f("view", {r}, {24}, {{"size", std::vector<int64_t>{24}}});
  int t = f("tanh", {v}, {24});
  int u = f("unsqueeze", {r}, {3, 1, 8}, {{"dim", int64_t{1}}});
  int s = f("sum", {u}, {3, 8}, {{"dim", std::vector<int64_t>{1}}});
  g.set_outputs({t, s});
  // {relu, view, tanh, unsqueeze} fused; relu's result is needed by sum (another block) through a
  // view that aliases it.
  expect_same(g, {rnd(rng, 24)}, {{0, 1, 2, 3}});
}

TEST(Codegen, ManyToManyBlocksMatchUnfused) {
  std::mt19937_64 rng(dt::test_seed());
  SCOPED_TRACE(dt::seed_note());
  // linear -> +residual -> gelu ; then scale -> add mask -> softmax -> * 2 ; conv -> bn -> relu
  Graph g;
  int x = g.add_input({6, 16}, DType::Float32, "x");
  int res = g.add_input({6, 24}, DType::Float32, "res");
  int img = g.add_input({2, 4, 9, 9}, DType::Float32, "img");
  auto wv = rnd(rng, 16 * 24), bv = rnd(rng, 24), mv = rnd(rng, 24), cw = rnd(rng, 8 * 4 * 9), cb = rnd(rng, 8);
  auto bnw = rnd(rng, 8), bnb = rnd(rng, 8), bnm = rnd(rng, 8), bnv = dt::random_vec(rng, 8, 0.5f, 2.f);
  int W = g.add_weight({16, 24}, DType::Float32, wv.data(), "W");
  int B = g.add_weight({24}, DType::Float32, bv.data(), "B");
  int M = g.add_weight({24}, DType::Float32, mv.data(), "mask");
  int CW = g.add_weight({8, 4, 3, 3}, DType::Float32, cw.data(), "cw");
  int CB = g.add_weight({8}, DType::Float32, cb.data(), "cb");
  int BW = g.add_weight({8}, DType::Float32, bnw.data()), BB = g.add_weight({8}, DType::Float32, bnb.data());
  int BM = g.add_weight({8}, DType::Float32, bnm.data()), BV = g.add_weight({8}, DType::Float32, bnv.data());
  float two = 2.f, scale = 0.25f;
  int C2 = g.add_constant({}, DType::Float32, &two), CS = g.add_constant({}, DType::Float32, &scale);
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> s, ecg::AttrMap a = {}) {
    return g.node(g.add_node(op, in, {{s, DType::Float32}}, a)).outputs[0];
  };
  int mm = f("addmm", {B, x, W}, {6, 24});                  // node 0
  int ad = f("add", {mm, res}, {6, 24});                    // 1
  int ge = f("gelu", {ad}, {6, 24});                        // 2
  int sc = f("mul", {ge, CS}, {6, 24});                     // 3
  int am = f("add", {sc, M}, {6, 24});                      // 4
  int sm = f("_softmax", {am}, {6, 24}, {{"dim", int64_t{-1}}, {"half_to_float", int64_t{0}}});  // 5
  int s2 = f("mul", {sm, C2}, {6, 24});                     // 6
  int cv = f("convolution", {img, CW, CB}, {2, 8, 9, 9},
             {{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
              {"dilation", std::vector<int64_t>{1, 1}}, {"transposed", int64_t{0}},
              {"output_padding", std::vector<int64_t>{0, 0}}, {"groups", int64_t{1}}});  // 7
  int bn = g.node(g.add_node("_native_batch_norm_legit_no_training", {cv, BW, BB, BM, BV},
                             {{{2, 8, 9, 9}, DType::Float32}, {{0}, DType::Float32}, {{0}, DType::Float32}},
                             {{"momentum", 0.1}, {"eps", 1e-5}})).outputs[0];  // 8
  int rl = f("relu", {bn}, {2, 8, 9, 9});                   // 9
  g.set_outputs({ge, s2, rl});
  expect_same(g, {rnd(rng, 96), rnd(rng, 144), rnd(rng, 2 * 4 * 81)}, {{0, 1, 2}, {3, 4, 5, 6}, {7, 8, 9}}, -1, 1e-5);
  codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, {{0, 1, 2}, {3, 4, 5, 6}, {7, 8, 9}}));
  runtime::Executable exe(g, runtime::ExecOptions{2}, std::move(cg.program));
  // Where the kernels take hooks, each block is one launch: epilogues on addmm/conv, a prologue
  // and an epilogue on softmax.
  EXPECT_EQ(exe.stats().kernels_per_call, 3) << cg.source;
  EXPECT_EQ(exe.stats().irs_bytes, 0);
}

TEST(Codegen, ValueTheEpilogueReadsButThatDoesNotDependOnTheKernelRunsBeforeIt) {
  // conv -> add(residual re-blocked in the block) -> relu: the residual's permute + view has no
  // strided view (it merges dims of a permuted tensor), so the block materializes it; that loop
  // must run before the conv whose epilogue reads it (a re-blocked residual in NCHW[x]c ResNets).
  std::mt19937_64 rng(dt::test_seed());
  SCOPED_TRACE(dt::seed_note());
  Graph g;
  int img = g.add_input({1, 4, 6, 6}, DType::Float32, "img");
  int res = g.add_input({1, 2, 6, 6, 2}, DType::Float32, "res");
  auto cw = rnd(rng, 4 * 4 * 9), cb = rnd(rng, 4);
  int CW = g.add_weight({4, 4, 3, 3}, DType::Float32, cw.data(), "cw");
  int CB = g.add_weight({4}, DType::Float32, cb.data(), "cb");
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> sh, ecg::AttrMap a = {}) {
    return g.node(g.add_node(op, in, {{sh, DType::Float32}}, a)).outputs[0];
  };
  int cv = f("convolution", {img, CW, CB}, {1, 4, 6, 6},
             {{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
              {"dilation", std::vector<int64_t>{1, 1}}, {"transposed", int64_t{0}},
              {"output_padding", std::vector<int64_t>{0, 0}}, {"groups", int64_t{1}}});  // node 0
  int pm = f("permute", {res}, {1, 2, 2, 6, 6}, {{"dims", std::vector<int64_t>{0, 1, 4, 2, 3}}});  // 1
  int vw = f("view", {pm}, {1, 4, 6, 6}, {{"size", std::vector<int64_t>{1, 4, 6, 6}}});            // 2
  int ad = f("add", {cv, vw}, {1, 4, 6, 6});                                                      // 3
  int rl = f("relu", {ad}, {1, 4, 6, 6});                                                         // 4
  g.set_outputs({rl});
  expect_same(g, {rnd(rng, 144), rnd(rng, 144)}, {{0, 1, 2, 3, 4}}, 2, 1e-5);
}

TEST(Codegen, EpilogueNamesTheOperandsItReadsAtTheKernelsOwnIndices) {
  // conv -> add(residual of the conv's shape) -> mul(per-channel scale, broadcast) -> relu: the
  // conv's step tells the kernel where the residual is (ElementHook::same_index, a prefetch
  // hint); the broadcast scale is not read at the output's indices and is not named.
  std::mt19937_64 rng(dt::test_seed());
  SCOPED_TRACE(dt::seed_note());
  Graph g;
  int img = g.add_input({2, 4, 6, 6}, DType::Float32, "img");
  int res = g.add_input({2, 4, 6, 6}, DType::Float32, "res");
  auto cw = rnd(rng, 4 * 4 * 9), cb = rnd(rng, 4), sv = rnd(rng, 4);
  int CW = g.add_weight({4, 4, 3, 3}, DType::Float32, cw.data(), "cw");
  int CB = g.add_weight({4}, DType::Float32, cb.data(), "cb");
  int SC = g.add_weight({4, 1, 1}, DType::Float32, sv.data(), "scale");
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> sh, ecg::AttrMap a = {}) {
    return g.node(g.add_node(op, in, {{sh, DType::Float32}}, a)).outputs[0];
  };
  int cv = f("convolution", {img, CW, CB}, {2, 4, 6, 6},
             {{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
              {"dilation", std::vector<int64_t>{1, 1}}, {"transposed", int64_t{0}},
              {"output_padding", std::vector<int64_t>{0, 0}}, {"groups", int64_t{1}}});  // node 0
  int ad = f("add", {cv, res}, {2, 4, 6, 6});  // 1
  int ml = f("mul", {ad, SC}, {2, 4, 6, 6});   // 2
  int rl = f("relu", {ml}, {2, 4, 6, 6});      // 3
  g.set_outputs({rl});
  expect_same(g, {rnd(rng, 288), rnd(rng, 288)}, {{0, 1, 2, 3}}, 1, 1e-5);
  codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, {{0, 1, 2, 3}}));
  const auto step = std::find_if(cg.program.steps.begin(), cg.program.steps.end(),
                                 [](const runtime::Step& s) { return s.epilogue != nullptr; });
  ASSERT_NE(step, cg.program.steps.end()) << cg.source;
  ASSERT_EQ(step->epilogue_same_index.size(), 1u);
  EXPECT_EQ(step->args[static_cast<size_t>(step->epilogue_same_index[0])], res);
  EXPECT_NE(std::find(step->args.begin(), step->args.end(), SC), step->args.end());  // read, not named
}

TEST(Codegen, KernelCacheSkipsTheCompilerAndMissingCompilerIsAClearError) {
  test_util::TempDir cache_dir("/tmp/dnnf_cache_");
  test_util::ScopedEnv cache("DNNFUSION_CACHE_DIR", cache_dir.path().string());
  const std::string src = codegen::generated_prelude() + "extern \"C\" int dnnf_probe() { return 7; }\n";
  codegen::JitModule a = codegen::jit_compile(src);
  EXPECT_FALSE(a.cache_hit);
  EXPECT_EQ(reinterpret_cast<int (*)()>(a.symbol("dnnf_probe"))(), 7);
  EXPECT_GT(a.compile_ms, 0);
  codegen::JitModule b = codegen::jit_compile(src);
  EXPECT_TRUE(b.cache_hit);
  EXPECT_EQ(a.path, b.path);
  // A corrupt cache entry is rebuilt.
  const std::string path = a.path;
  a = codegen::JitModule{};
  b = codegen::JitModule{};
  { FILE* fp = std::fopen(path.c_str(), "w"); std::fputs("garbage", fp); std::fclose(fp); }
  codegen::JitModule c = codegen::jit_compile(src);
  EXPECT_FALSE(c.cache_hit);
  test_util::ScopedEnv cxx("DNNFUSION_CXX", "/nonexistent/c++");
  try {
    codegen::jit_compile(src + "// other\n");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no C++ compiler"), std::string::npos) << e.what();
  }
}

TEST(Codegen, DataMovementFeedingGemmAndAttentionBecomesStridedOperands) {
  std::mt19937_64 rng(dt::test_seed());
  SCOPED_TRACE(dt::seed_note());
  Graph g;
  int a = g.add_input({2, 4, 6}, DType::Float32, "a");
  int b = g.add_input({2, 4, 5}, DType::Float32, "b");
  int qkv = g.add_input({1, 7, 3 * 8}, DType::Float32, "qkv");
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> s, ecg::AttrMap at = {}) {
    return g.node(g.add_node(op, in, {{s, DType::Float32}}, at)).outputs[0];
  };
  int at = f("transpose", {a}, {2, 6, 4}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});  // 0
  int mm = f("bmm", {at, b}, {2, 6, 5});                                                      // 1
  int r = f("relu", {mm}, {2, 6, 5});                                                         // 2
  std::vector<int> heads;
  for (int i = 0; i < 3; ++i) {  // q, k, v: slice of the packed projection, split into 2 heads of 4
    int s = f("slice", {qkv}, {1, 7, 8}, {{"dim", int64_t{2}}, {"start", int64_t{8 * i}}, {"end", int64_t{8 * i + 8}}});
    int v = f("view", {s}, {1, 7, 2, 4}, {{"size", std::vector<int64_t>{1, 7, 2, 4}}});
    heads.push_back(f("transpose", {v}, {1, 2, 7, 4}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}}));
  }  // nodes 3..11
  int att = g.node(g.add_node("_scaled_dot_product_flash_attention_for_cpu", heads,
                              {{{1, 2, 7, 4}, DType::Float32}, {{1, 2, 7}, DType::Float32}}, {{"dropout_p", 0.0}}))
                .outputs[0];  // 12
  g.set_outputs({r, att});
  std::vector<int> attn_block;
  for (int i = 3; i <= 12; ++i) attn_block.push_back(i);
  expect_same(g, {rnd(rng, 48), rnd(rng, 40), rnd(rng, 7 * 24)}, {{0, 1, 2}, attn_block}, 2, 1e-5);  // bmm+epilogue; attention
  codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, {{0, 1, 2}, attn_block}));
  runtime::Executable exe(g, runtime::ExecOptions{2}, std::move(cg.program));
  // The GEMM reads its transposed operand strided and attention its q/k/v head splits (nothing
  // copied): the only intermediate written is attention's log-sum-exp output.
  EXPECT_EQ(exe.stats().irs_bytes, 1 * 2 * 7 * 4);
  EXPECT_EQ(cg.edge_rules["Shuffle -> Many-to-Many: strided operand"], 4);
}

TEST(Codegen, PermuteAfterAttentionBecomesItsStridedStore) {
  std::mt19937_64 rng(dt::test_seed());
  SCOPED_TRACE(dt::seed_note());
  Graph g;
  std::vector<int> in;
  for (const char* name : {"q", "k", "v"}) in.push_back(g.add_input({2, 3, 5, 4}, DType::Float32, name));
  auto f = [&](const char* op, std::vector<int> ins, std::vector<int64_t> s, ecg::AttrMap at = {}) {
    return g.node(g.add_node(op, ins, {{s, DType::Float32}}, at)).outputs[0];
  };
  int att = g.node(g.add_node("_scaled_dot_product_flash_attention_for_cpu", in,
                              {{{2, 3, 5, 4}, DType::Float32}, {{2, 3, 5}, DType::Float32}}, {{"dropout_p", 0.0}}))
                .outputs[0];                                                                          // 0
  int t = f("transpose", {att}, {2, 5, 3, 4}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});         // 1
  int m = f("view", {t}, {2, 5, 12}, {{"size", std::vector<int64_t>{2, 5, 12}}});                     // 2: merge heads
  int r = f("relu", {m}, {2, 5, 12});                                                                 // 3
  g.set_outputs({r});
  // Attention writes [B, L, H, D] directly; the head merge is an alias, relu its own loop.
  expect_same(g, {rnd(rng, 120), rnd(rng, 120), rnd(rng, 120)}, {{0, 1, 2}}, 2, 1e-5);
  codegen::CodegenResult cg = codegen::generate_program(g, make_plan(g, {{0, 1, 2}}));
  EXPECT_EQ(cg.edge_rules["Many-to-Many -> Shuffle: strided store"], 1);
  runtime::Executable exe(g, runtime::ExecOptions{2}, std::move(cg.program));
  EXPECT_EQ(exe.stats().irs_bytes, (2 * 5 * 12 + 2 * 3 * 5) * 4);  // the permuted output and lse
}

TEST(Codegen, FreeMergeNamesDataMovementThatCostsNothing) {
  Graph g;
  auto f = [&](const char* op, std::vector<int> in, std::vector<int64_t> s, ecg::AttrMap at = {}) {
    return g.node(g.add_node(op, in, {{s, DType::Float32}}, at)).outputs[0];
  };
  std::vector<int> qkv;
  for (int i = 0; i < 3; ++i) qkv.push_back(g.add_input({1, 5, 2, 4}, DType::Float32));
  std::vector<int> heads;
  for (int i = 0; i < 3; ++i)  // nodes 0..2: [B, L, H, D] -> [B, H, L, D]
    heads.push_back(f("transpose", {qkv[i]}, {1, 2, 5, 4}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}}));
  int att = g.node(g.add_node("_scaled_dot_product_flash_attention_for_cpu", heads,
                              {{{1, 2, 5, 4}, DType::Float32}, {{1, 2, 5}, DType::Float32}}, {{"dropout_p", 0.0}}))
                .outputs[0];                                                                           // 3
  int t = f("transpose", {att}, {1, 5, 2, 4}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});          // 4
  int v = f("view", {t}, {1, 5, 8}, {{"size", std::vector<int64_t>{1, 5, 8}}});                        // 5
  int p = f("permute", {v}, {1, 8, 5}, {{"dims", std::vector<int64_t>{0, 2, 1}}});                     // 6
  int r = f("relu", {p}, {1, 8, 5});                                                                   // 7
  g.set_outputs({r});
  EXPECT_TRUE(codegen::free_merge(g, {3}, 4));         // attention stores its output permuted
  EXPECT_TRUE(codegen::free_merge(g, {3, 4}, 5));      // a reshape keeps the element order
  EXPECT_TRUE(codegen::free_merge(g, {0, 1, 2}, 3));   // attention reads the head splits strided
  EXPECT_TRUE(codegen::free_merge(g, {3}, 0));
  EXPECT_FALSE(codegen::free_merge(g, {7}, 6));        // a real permute feeding a loop: strided reads
  EXPECT_FALSE(codegen::free_merge(g, {6}, 7));        // not data movement
}

// The op registry states each element-wise op's expression once; the cpu prelude must define
// every vocabulary function any of them calls, and substitution must place each operand.
TEST(ElementwiseExpressions, EveryRegistryExpressionUsesOnlyThePreludesVocabulary) {
  const std::string& prelude = codegen::generated_prelude();
  int with_expr = 0;
  for (const auto& op : ecg::all_ops()) {
    if (!op.elementwise.text) continue;
    ++with_expr;
    ecg::Node n;
    n.op = op.name;
    n.info = &op;
    n.attrs = {{"eps", 1e-5}};  // batch norm's one required attribute
    std::vector<std::string> operands;
    for (size_t i = 0; i < op.elementwise.operands.size(); ++i) operands.push_back("OPERAND" + std::to_string(i));
    ecg::Graph g;
    const std::string e = ecg::elementwise_expression(g, n, operands);
    EXPECT_EQ(e.find('$'), std::string::npos) << op.name << ": " << e;
    EXPECT_NE(e.find("OPERAND0"), std::string::npos) << op.name << ": " << e;
    for (size_t p = e.find("dnnf_"); p != std::string::npos; p = e.find("dnnf_", p + 1)) {
      size_t q = p;
      while (q < e.size() && (std::isalnum(static_cast<unsigned char>(e[q])) || e[q] == '_')) ++q;
      const std::string fn = e.substr(p, q - p);
      EXPECT_NE(prelude.find("inline float " + fn + "("), std::string::npos) << op.name << " calls " << fn;
    }
  }
  EXPECT_GE(with_expr, 40);
}

TEST(ElementwiseExpressions, SupportChecksOperandDtypesAndTheRowsOwnConditions) {
  ecg::Graph g;
  int f = g.add_input({4}, DType::Float32, "f");
  int b = g.add_input({4}, DType::Bool, "b");
  auto node = [&](const std::string& op, std::vector<int> ins, DType out, ecg::AttrMap attrs = {}) -> const ecg::Node& {
    return g.node(g.add_node(op, ins, {{{4}, out}}, std::move(attrs)));
  };
  EXPECT_EQ(ecg::elementwise_support(g, node("relu", {f}, DType::Float32)), "");
  EXPECT_NE(ecg::elementwise_support(g, node("relu", {f}, DType::Bool)), "");
  EXPECT_EQ(ecg::elementwise_support(g, node("where", {b, f, f}, DType::Float32)), "");
  EXPECT_NE(ecg::elementwise_support(g, node("where", {f, f, f}, DType::Float32)), "");
  EXPECT_NE(ecg::elementwise_support(g, node("gelu", {f}, DType::Float32, {{"approximate", std::string("erf2")}})), "");
  EXPECT_NE(ecg::elementwise_support(g, node("div", {f, f}, DType::Float32, {{"rounding_mode", std::string("floor")}})), "");
  EXPECT_NE(ecg::elementwise_support(g, node("add", {f, f}, DType::Float32, {{"compute_dtype", std::string("float64")}})), "");
  EXPECT_NE(ecg::elementwise_support(g, node("logical_not", {b}, DType::Float32)), "");  // no expression
  const ecg::Node& sub = node("sub", {f, f}, DType::Float32, {{"alpha", 2.0}});
  EXPECT_EQ(ecg::elementwise_expression(g, sub, {"x", "y"}), "(x - (" + ecg::float_literal(2.0) + " * y))");
}
