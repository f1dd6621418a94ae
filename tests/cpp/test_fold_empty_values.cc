// rewrite/fold_empty_values: zero-size values become empty constants (IR in, IR out), and the
// folded graph computes what the original computes, including outputs read from empty operands.
#include <gtest/gtest.h>

#include "ecg/verifier.h"
#include "rewrite/fold_empty_values.h"
#include "rewrite_test_util.h"

using namespace dnnfusion;
using namespace dnnfusion::rewrite_test;

TEST(RewriteFoldEmptyValues, EmptyChainBecomesConstantsAndOutputsKeepTheirNodes) {
  std::mt19937_64 rng(5);  // replayable
  GraphBuilder b(rng);
  int x = b.input({3, 4});
  int e = b.node("slice", {x}, {0, 4}, {{"dim", int64_t{0}}, {"start", int64_t{0}}, {"end", int64_t{0}}, {"step", int64_t{1}}});
  int r = b.un("relu", e);                   // empty, not an output: folded
  int s = b.reduce("sum", r, {0}, false);    // [4] from an empty operand: stays, reads a constant
  int t = b.un("sigmoid", r);                // empty graph output: its node stays
  int y = b.bin("add", b.un("tanh", x), s);  // non-empty work downstream
  b.g.set_outputs({y, t});
  int folded = 0;
  ecg::Graph g = rewrite::fold_empty_values(b.g, &folded);
  EXPECT_EQ(folded, 2);  // slice and relu
  EXPECT_NO_THROW(ecg::verify_graph(g));
  EXPECT_EQ(count_op(g, "slice"), 0);
  EXPECT_EQ(count_op(g, "relu"), 0);
  EXPECT_EQ(count_op(g, "sum"), 1);
  EXPECT_EQ(count_op(g, "sigmoid"), 1);
  for (const auto& n : g.nodes()) {
    if (n.op == "sum") {
      EXPECT_EQ(g.value(n.inputs[0]).kind, ecg::ValueKind::Constant);
    }
  }
  // A second run finds nothing more (the sigmoid makes a graph output).
  int again = -1;
  rewrite::fold_empty_values(g, &again);
  EXPECT_EQ(again, 0);
  const Buffers in = random_inputs(b.g, rng, -2.f, 2.f);
  EXPECT_TRUE(outputs_close(b.g, run_graph(b.g, in), run_graph(g, in)));
}

TEST(RewriteFoldEmptyValues, GraphWithoutEmptyValuesIsUnchanged) {
  std::mt19937_64 rng(6);
  GraphBuilder b(rng);
  int x = b.input({2, 3});
  b.g.set_outputs({b.un("relu", x)});
  int folded = -1;
  ecg::Graph g = rewrite::fold_empty_values(b.g, &folded);
  EXPECT_EQ(folded, 0);
  EXPECT_EQ(g.nodes().size(), 1u);
}

TEST(RewriteFoldEmptyValues, GemmWithKZeroAndEmptyMatmulRunAfterFolding) {
  std::mt19937_64 rng(7);
  GraphBuilder b(rng);
  int x = b.input({3, 5});
  int a = b.node("slice", {x}, {3, 0}, {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{0}}, {"step", int64_t{1}}});
  int w = b.weight({0, 4});
  int y = b.mm(a, w);  // K = 0: zeros
  b.g.set_outputs({b.bin("add", y, b.cst(1.5f))});
  ecg::Graph g = rewrite::fold_empty_values(b.g);
  EXPECT_NO_THROW(ecg::verify_graph(g));
  const Buffers in = random_inputs(b.g, rng, -1.f, 1.f);
  const Buffers out = run_graph(g, in);
  const float* o = reinterpret_cast<const float*>(out[0].data());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(o[i], 1.5f) << i;
}
