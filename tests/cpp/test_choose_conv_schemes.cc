// Conv scheme choice (csrc/target/cpu/layout/choose_conv_schemes): heuristic schemes follow the producer's
// block; tuning measures into the database and a second compile reads it back and runs the
// global search; local search and global search both give graphs that compute the same values.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "ecg/verifier.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/parallel.h"
#include "target/cpu/layout/choose_conv_schemes.h"
#include "target/cpu/layout/propagate_blocked_layout.h"
#include "target/cpu/layout/tuning_db.h"
#include "rewrite_test_util.h"
#include "test_env_util.h"

namespace dnnfusion {
namespace {

namespace fs = std::filesystem;
using rewrite_test::count_op;
using rewrite_test::fold;
using rewrite_test::GraphBuilder;
using rewrite_test::outputs_close;
using rewrite_test::random_inputs;
using rewrite_test::run_graph;

// conv 16->32, conv 32->32 + residual, conv 32->10 (10 channels: no vector block divides them).
ecg::Graph small_cnn(GraphBuilder& B) {
  int x = B.input({1, 16, 10, 10});
  int c1 = B.un("relu", B.conv(x, B.weight({32, 16, 3, 3}, 0.05f, 0.2f), B.weight({32}), 1, 1));
  int c2 = B.conv(c1, B.weight({32, 32, 3, 3}, 0.05f, 0.2f), B.weight({32}), 1, 1);
  int r = B.un("relu", B.bin("add", c2, c1));
  int c3 = B.conv(r, B.weight({10, 32, 1, 1}, 0.05f, 0.2f), B.weight({10}), 1, 0);
  B.out({c3});
  return B.g;
}

// A database path in a fresh directory /tmp/dnnfusion_choose_XXXXXX, removed with the object.
struct TempDb {
  test_util::TempDir dir{"/tmp/dnnfusion_choose_"};
  fs::path path = dir.path() / "tuning_db.txt";
};

void expect_same_values(const ecg::Graph& g, const layout::ConvSchemes& sc, std::mt19937_64& rng, bool propagate = true) {
  ecg::Graph out = fold(layout::propagate_blocked_layout(g, sc.fn(), nullptr, propagate));
  ecg::verify_graph(out);
  auto in = random_inputs(g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
}

TEST(ChooseConvSchemes, HeuristicFollowsTheProducerAndSkipsUnblockableConvs) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  ecg::Graph g = small_cnn(B);
  layout::ChooseOptions o;  // no database: heuristics
  const auto sc = layout::choose_conv_schemes(g, o);
  EXPECT_EQ(sc.report.convs, 2);  // the 10-channel conv stays NCHW
  EXPECT_EQ(sc.report.heuristic, 2);
  EXPECT_EQ(sc.report.method(), "heuristic");
  layout::LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(g, sc.fn(), &st);
  EXPECT_EQ(st.convs_blocked, 2);
  EXPECT_EQ(st.reblocked, 0);  // the second conv took the first one's output block
  EXPECT_EQ(count_op(out, "convolution"), 1);
  expect_same_values(g, sc, rng);
}

// Conv2d(5, 10, 3, groups=5): one input and two output channels per group, and neither 5 nor 10
// channels fit a vector block: the conv stays NCHW instead of getting a scheme that does not fit.
TEST(ChooseConvSchemes, NarrowGroupedConvWhoseChannelsFitNoBlockStaysNchw) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  int x = B.input({1, 5, 8, 8});
  int y = B.conv(x, B.weight({10, 1, 3, 3}, 0.05f, 0.2f), B.weight({10}), 1, 1, 5);
  B.out({y});
  const auto sc = layout::choose_conv_schemes(B.g, layout::ChooseOptions{});
  EXPECT_EQ(sc.report.convs, 0);
  layout::LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(B.g, sc.fn(), &st);
  EXPECT_EQ(st.convs_blocked, 0);
  expect_same_values(B.g, sc, rng);
}

TEST(ChooseConvSchemes, HeuristicDepthwiseTakesItsProducersBlockInsteadOfReblocking) {
  // An inverted-residual block (mobilenet_v2): expand 1x1 16->64, depthwise 3x3 on 64, project
  // 1x1 64->16. Whatever block the expand conv picks, the depthwise conv runs in it (and the
  // projection reads it): no re-blocking, under every ISA this CPU can run.
  for (auto isa : {kernels::Isa::Avx512, kernels::Isa::Avx2, kernels::Isa::Scalar}) {
    if (!kernels::isa_supported(isa)) continue;
    SCOPED_TRACE(kernels::isa_name(isa));
    kernels::force_isa(isa);
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    int x = B.input({1, 16, 12, 12});
    int e = B.un("relu", B.conv(x, B.weight({64, 16, 1, 1}, 0.05f, 0.2f), B.weight({64}), 1, 0));
    int d = B.un("relu", B.conv(e, B.weight({64, 1, 3, 3}, 0.05f, 0.2f), B.weight({64}), 1, 1, 64));
    B.out({B.conv(d, B.weight({16, 64, 1, 1}, 0.05f, 0.2f), B.weight({16}), 1, 0)});
    layout::ChooseOptions o;  // no database: heuristics
    const auto sc = layout::choose_conv_schemes(B.g, o);
    layout::LayoutStats st;
    ecg::Graph out = layout::propagate_blocked_layout(B.g, sc.fn(), &st);
    EXPECT_EQ(st.convs_blocked, 3);
    EXPECT_EQ(st.reblocked, 0);
    expect_same_values(B.g, sc, rng);
  }
  kernels::reset_isa();
}

TEST(ChooseConvSchemes, TuningFillsTheDatabaseAndTheNextCompileSearchesGlobally) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  ecg::Graph g = small_cnn(B);
  TempDb tmp;
  kernels::SerialParallel serial;
  layout::ConvSchemes first;
  {
    layout::TuningDb db(tmp.path.string());
    layout::ChooseOptions o;
    o.tune = true;
    o.db = &db;
    o.par = &serial;
    first = layout::choose_conv_schemes(g, o);
    EXPECT_GT(first.report.tuned_now, 0);
    EXPECT_TRUE(first.report.global);
    EXPECT_TRUE(first.report.exact);  // a chain with one residual: series-parallel
    EXPECT_GT(first.report.predicted_us, 0.0);
  }
  ASSERT_TRUE(fs::exists(tmp.path));
  layout::TuningDb db(tmp.path.string());
  layout::ChooseOptions o;
  o.db = &db;  // tune = false: read only
  o.par = &serial;
  const auto second = layout::choose_conv_schemes(g, o);
  EXPECT_EQ(second.report.tuned_now, 0);
  EXPECT_EQ(second.report.from_db, first.report.tuned_now);
  EXPECT_EQ(second.report.method(), "global (exact)");
  ASSERT_EQ(second.by_node.size(), first.by_node.size());
  for (const auto& [node, s] : first.by_node) {
    const auto& t = second.by_node.at(node);
    EXPECT_EQ(s.ic_bn, t.ic_bn);
    EXPECT_EQ(s.oc_bn, t.oc_bn);
    EXPECT_EQ(s.reg_n, t.reg_n);
    EXPECT_EQ(s.unroll_ker, t.unroll_ker);
  }
  expect_same_values(g, second, rng);

  o.global_search = false;
  const auto local = layout::choose_conv_schemes(g, o);
  EXPECT_EQ(local.report.method(), "local");
  expect_same_values(g, local, rng);
  expect_same_values(g, local, rng, /*propagate=*/false);
}

TEST(ChooseConvSchemes, TransformEliminationOffConvertsAroundEveryConv) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  ecg::Graph g = small_cnn(B);
  const auto sc = layout::choose_conv_schemes(g, layout::ChooseOptions{});
  layout::LayoutStats on, off;
  layout::propagate_blocked_layout(g, sc.fn(), &on, true);
  layout::propagate_blocked_layout(g, sc.fn(), &off, false);
  EXPECT_EQ(on.to_blocked, 1);
  EXPECT_EQ(off.to_blocked, 2);  // each blocked conv converts its input
  EXPECT_EQ(off.to_plain, 2);    // ... and its output
  EXPECT_EQ(off.ops_propagated, 0);
  EXPECT_GT(on.ops_propagated, 0);
}

}  // namespace
}  // namespace dnnfusion
