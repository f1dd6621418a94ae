// The cuda target's graph side: which nodes it accepts at import (sparse convolutions and the
// epilogue ops after them, by the compile options), the pass that turns each chain into one
// sparse_conv2d node running a kernel built for its weights (IR in, IR out), and the numbers: the
// fused graph run by the target with its kernels emulated on the CPU (DNNFUSION_CUDA_EMULATE, the
// PTX interpreter) equals the unfused graph on the reference target.
// Needs NVRTC and ptxas like the other cuda tests (scripts/test.sh sets DNNFUSION_NVRTC).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "compile_options.h"
#include "kernel_test_util.h"
#include "test_env_util.h"
#include "runtime/executor.h"
#include "target/cuda/graph/fuse_sparse_convs.h"
#include "target/cuda/graph/sparse_conv_chains.h"
#include "target/target.h"

using namespace dnnfusion;
namespace test_util = dnnfusion::test_util;
using ecg::Graph;
using dnnfusion::testing::seed_note;
using dnnfusion::testing::test_seed;

namespace {

// The target's kernels run through the PTX interpreter on host memory while one lives.
struct EmulateEnv : test_util::ScopedEnv {
  EmulateEnv() : ScopedEnv("DNNFUSION_CUDA_EMULATE", "1") {}
};

std::vector<float> sparse_weights(size_t n, double zeros, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f), p(0.f, 1.f);
  std::vector<float> w(n);
  for (auto& v : w) v = p(rng) < zeros ? 0.f : u(rng);
  return w;
}

// conv1(+bias) -> relu -> conv2 -> add(relu1) -> relu; conv1's raw output is also a graph output.
struct TwoConvGraph {
  std::vector<float> w1, b1, w2;
  Graph g;
  int x = -1;
  explicit TwoConvGraph(double zeros, int groups2 = 1) {
    std::mt19937 rng(static_cast<uint32_t>(test_seed()));
    w1 = sparse_weights(8 * 4 * 9, zeros, rng);
    b1 = sparse_weights(8, 0.0, rng);
    w2 = sparse_weights(8 * (8 / groups2) * 9, zeros, rng);
    x = g.add_input({1, 4, 7, 6}, DType::Float32, "x");
    const int wv1 = g.add_weight({8, 4, 3, 3}, DType::Float32, w1.data(), "w1");
    const int bv1 = g.add_weight({8}, DType::Float32, b1.data(), "b1");
    const int wv2 = g.add_weight({8, 8 / groups2, 3, 3}, DType::Float32, w2.data(), "w2");
    ecg::AttrMap conv{{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
                      {"dilation", std::vector<int64_t>{1, 1}}, {"transposed", int64_t{0}},
                      {"output_padding", std::vector<int64_t>{0, 0}}, {"groups", int64_t{1}}};
    const ecg::OutputSpec act{{1, 8, 7, 6}, DType::Float32};
    const int c1 = g.node(g.add_node("convolution", {x, wv1, bv1}, {act}, conv)).outputs[0];
    const int r1 = g.node(g.add_node("relu", {c1}, {act})).outputs[0];
    conv["groups"] = int64_t{groups2};
    const int c2 = g.node(g.add_node("convolution", {r1, wv2, -1}, {act}, conv)).outputs[0];
    const int a = g.node(g.add_node("add", {c2, r1}, {act}, {{"alpha", 1.0}})).outputs[0];
    const int r2 = g.node(g.add_node("relu", {a}, {act})).outputs[0];
    g.set_outputs({r2, c1});
  }
};

std::vector<std::vector<float>> run(const Graph& g, const target::Target& t, const std::vector<float>& x) {
  runtime::Executable exe(g, runtime::ExecOptions{2, &t});
  std::vector<std::vector<float>> outs;
  std::vector<void*> ptrs;
  for (int o : g.outputs()) outs.emplace_back(static_cast<size_t>(g.value(o).numel()));
  for (auto& o : outs) ptrs.push_back(o.data());
  exe.run({x.data()}, ptrs);
  return outs;
}

}  // namespace

TEST(CudaTarget, AcceptsSparseChainsByTheOptions) {
  EmulateEnv emu;
  const target::Target& t = target::registry().get("cuda");
  CompileOptions opts;
  TwoConvGraph sparse(0.9);
  for (const auto& n : sparse.g.nodes()) EXPECT_EQ(t.supports_at_import(sparse.g, n, opts), "") << n.op << " " << seed_note();
  opts.sparse_threshold = 0.95;  // now too dense: every node refused, each with its reason
  for (const auto& n : sparse.g.nodes()) {
    const std::string why = t.supports_at_import(sparse.g, n, opts);
    EXPECT_NE(why.find(n.op == "convolution" ? "below sparse_threshold" : "not after a sparse convolution"),
              std::string::npos) << n.op << ": " << why;
  }
  opts.sparse_threshold = 0.5;
  opts.sparse_max_weights = 100;
  EXPECT_NE(t.supports_at_import(sparse.g, sparse.g.node(0), opts).find("exceed the generated-kernel limit 100"),
            std::string::npos);
  TwoConvGraph grouped(0.9, 2);
  EXPECT_NE(t.supports_at_import(grouped.g, grouped.g.node(2), CompileOptions{}).find("grouped"), std::string::npos);
  EXPECT_NE(t.supports_at_import(grouped.g, grouped.g.node(3), CompileOptions{}).find("not after a sparse"),
            std::string::npos);
  // Ops outside the chains are the kernel table's business: the target has none for them.
  Graph g;
  const int in = g.add_input({2, 3}, DType::Float32);
  const int n = g.add_node("sigmoid", {in}, {{{2, 3}, DType::Float32}});
  EXPECT_NE(t.supports_at_import(g, g.node(n), CompileOptions{}).find("no cuda kernel"), std::string::npos);
}

TEST(CudaTarget, FuseSparseConvsReplacesEveryChainAndMatchesTheReference) {
  EmulateEnv emu;
  TwoConvGraph src(0.9);
  cuda::FuseSparseConvsReport rep;
  const Graph fused = cuda::fuse_sparse_convs(src.g, CompileOptions{}, "sm_80", -1, &rep);
  // conv1 raw (a graph output), conv1+relu (read by conv2 and by the add), conv2+residual+relu.
  ASSERT_EQ(fused.nodes().size(), 3u) << fused.dump();
  std::vector<std::string> acts;
  for (const auto& n : fused.nodes()) {
    EXPECT_EQ(n.op, "sparse_conv2d");
    acts.push_back(n.attr_str("activation") + (n.input_or_absent(3) >= 0 ? "+res" : "") +
                   (n.input_or_absent(2) >= 0 ? "+bias" : ""));
  }
  EXPECT_EQ(acts, (std::vector<std::string>{"none+bias", "relu+bias", "relu+res"}));
  EXPECT_EQ(rep.kernels, 3);
  EXPECT_EQ(rep.epilogue_ops, 3);  // relu, add, relu
  ASSERT_EQ(rep.lines.size(), 3u);
  EXPECT_NE(rep.lines[2].find("SASS FFMA"), std::string::npos);

  std::mt19937 rng(static_cast<uint32_t>(test_seed()) + 1);
  const std::vector<float> x = sparse_weights(4 * 7 * 6, 0.0, rng);
  const auto want = run(src.g, target::registry().get("reference"), x);
  const auto got = run(fused, target::registry().get("cuda"), x);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o)
    for (size_t i = 0; i < got[o].size(); ++i)
      ASSERT_NEAR(got[o][i], want[o][i], 1e-5f * (1.f + std::abs(want[o][i]))) << "output " << o << " at " << i << " "
                                                                               << seed_note();
  // The same layers compiled again come from the process cache, not from ptxas.
  cuda::FuseSparseConvsReport again;
  cuda::fuse_sparse_convs(src.g, CompileOptions{}, "sm_80", -1, &again);
  EXPECT_EQ(again.reused, 3);
}

TEST(CudaTarget, DenseGraphIsLeftAlone) {
  EmulateEnv emu;
  TwoConvGraph dense(0.0);
  cuda::FuseSparseConvsReport rep;
  const Graph out = cuda::fuse_sparse_convs(dense.g, CompileOptions{}, "sm_80", -1, &rep);
  EXPECT_EQ(rep.kernels, 0);
  EXPECT_EQ(out.nodes().size(), dense.g.nodes().size());
}
