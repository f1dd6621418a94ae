// Rewriting passes other than the math rules: the graph-editing utility, batch-norm folding,
// no-op removal and common-subexpression elimination — IR in / IR out, and equivalence.
#include <gtest/gtest.h>

#include <limits>

#include "common/error.h"
#include "ecg/verifier.h"
#include "rewrite/batchnorm_to_affine.h"
#include "rewrite/eliminate_common_subexpressions.h"
#include "rewrite/fold_batchnorm.h"
#include "rewrite/graph_edit.h"
#include "rewrite/merge_parallel_gemms.h"
#include "rewrite/remove_noops.h"
#include "rewrite/split_to_slices.h"
#include "rewrite_test_util.h"

using namespace dnnfusion;
using namespace dnnfusion::rewrite;
using namespace dnnfusion::rewrite_test;

namespace {

std::vector<std::string> ops_of(const Graph& g) {
  std::vector<std::string> r;
  for (const auto& n : g.nodes()) r.push_back(n.op);
  return r;
}

void expect_equivalent(const Graph& before, const Graph& after, std::mt19937_64& rng, float lo = -2.f, float hi = 2.f) {
  for (int trial = 0; trial < 2; ++trial) {
    Buffers in = random_inputs(before, rng, lo, hi);
    EXPECT_TRUE(outputs_close(before, run_graph(before, in), run_graph(fold(after), in)))
        << "before:\n" << before.dump() << "after:\n" << after.dump();
  }
}

}  // namespace

// ---------------- graph_edit ----------------
TEST(RewriteGraphEdit, RebuildKeepsInputsOutputsAndSharesLeafData) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({2, 3}), y = b.input({3});
  int w = b.weight({3});
  int c = b.cst(2.f);
  int dead = b.un("exp", x);  // unused
  int r = b.bin("mul", b.bin("add", x, w), c);
  b.out({r, b.un("relu", y)});
  (void)dead;
  int removed = -1;
  Graph g = remove_dead_nodes(b.g, &removed);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"add", "mul", "relu"}));
  ASSERT_EQ(g.inputs().size(), 2u);
  EXPECT_EQ(g.value(g.inputs()[0]).name, "x0");
  EXPECT_EQ(g.value(g.inputs()[1]).name, "x1");
  EXPECT_EQ(g.value(g.inputs()[1]).shape, Shape{3});
  // The weight keeps the caller's pointer; the constant shares the original graph's bytes.
  const auto& add = g.nodes()[0];
  const auto& mul = g.nodes()[1];
  EXPECT_EQ(g.value(add.inputs[1]).data, b.g.value(w).data);
  EXPECT_EQ(g.value(mul.inputs[1]).owned.get(), b.g.value(c).owned.get());
  EXPECT_EQ(g.value(mul.inputs[1]).shape, Shape{});
  std::mt19937_64 r2(dnnfusion::testing::test_seed());
  expect_equivalent(b.g, g, r2);
}

TEST(RewriteGraphEdit, CompileTimeValuesFollowWeightOnlyChains) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({3});
  int w = b.weight({3});
  int tw = b.un("neg", w);                                   // weight-only
  int ar = b.node("arange", {}, {3}, {{"start", int64_t{0}}, {"step", int64_t{1}}});  // no operand
  int s = b.bin("add", tw, ar);                              // still weight-only
  int a = b.bin("mul", x, s);                                // activation
  b.out({a});
  auto c = compile_time_values(b.g);
  EXPECT_TRUE(c[w] && c[tw] && c[ar] && c[s]);
  EXPECT_FALSE(c[x] || c[a]);
  EXPECT_EQ(broadcast_shapes({4, 1, 3}, {5, 1}), (Shape{4, 5, 3}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4}), Error);
  EXPECT_TRUE(broadcasts_to({3, 1}, {2, 3, 4}));
  EXPECT_FALSE(broadcasts_to({2, 3, 4}, {3, 4}));
}

// ---------------- fold_batchnorm ----------------
TEST(RewriteFoldBatchnorm, ConvBatchNormBecomesOneConv) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  for (bool conv_bias : {true, false})
    for (bool affine : {true, false}) {
      GraphBuilder b(rng);
      int x = b.input({2, 3, 7, 7});
      int c = b.conv(x, b.weight({4, 3, 3, 3}), conv_bias ? b.weight({4}) : -1, 2, 1);
      int bn = b.batch_norm(c, affine);
      b.out({b.un("relu", bn), bn});  // the BN result is also a graph output
      int folded = -1;
      Graph g = fold_batchnorm(b.g, &folded);
      ASSERT_NO_THROW(ecg::verify_graph(g));
      EXPECT_EQ(folded, 1);
      EXPECT_EQ(count_op(g, "_native_batch_norm_legit_no_training"), 0);
      EXPECT_EQ(count_op(g, "convolution"), 1);
      // The new weights are weight-only nodes: constant folding leaves conv + relu.
      Graph f = fold(g);
      EXPECT_EQ(ops_of(f), (std::vector<std::string>{"convolution", "relu"})) << f.dump();
      const auto& conv = f.nodes()[0];
      EXPECT_EQ(f.value(conv.inputs[1]).kind, ecg::ValueKind::Constant);
      ASSERT_GE(conv.inputs[2], 0);  // a bias appears even when the conv had none
      EXPECT_EQ(f.value(conv.inputs[2]).shape, Shape{4});
      expect_equivalent(b.g, g, rng);
    }
}

TEST(RewriteFoldBatchnorm, LinearBatchNorm1dFoldsIntoAddmm) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  for (bool bias : {true, false}) {
    GraphBuilder b(rng);
    int x = b.input({5, 6});
    int y = bias ? b.addmm(b.weight({4}), x, b.weight({6, 4})) : b.mm(x, b.weight({6, 4}));
    b.out({b.batch_norm(y)});
    int folded = 0;
    Graph g = fold_batchnorm(b.g, &folded);
    EXPECT_EQ(folded, 1);
    Graph f = fold(g);
    EXPECT_EQ(ops_of(f), (std::vector<std::string>{"addmm"})) << f.dump();
    expect_equivalent(b.g, g, rng);
  }
}

TEST(RewriteFoldBatchnorm, BatchNormsThatCannotFoldStay) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  auto folds = [&](const std::function<void(GraphBuilder&)>& build) {
    GraphBuilder b(rng);
    build(b);
    int folded = -1;
    Graph g = fold_batchnorm(b.g, &folded);
    EXPECT_NO_THROW(ecg::verify_graph(g));
    EXPECT_EQ(count_op(g, "_native_batch_norm_legit_no_training"), folded ? 0 : 1);
    expect_equivalent(b.g, g, rng);
    return folded;
  };
  // Not after a conv: a One-to-One op that stays.
  EXPECT_EQ(folds([](GraphBuilder& b) { b.out({b.batch_norm(b.un("relu", b.input({2, 3, 4, 4})))}); }), 0);
  // The conv result is used elsewhere too.
  EXPECT_EQ(folds([](GraphBuilder& b) {
    int c = b.conv(b.input({1, 3, 5, 5}), b.weight({4, 3, 3, 3}), -1);
    b.out({b.batch_norm(c), b.un("relu", c)});
  }), 0);
  // The conv weight is an activation (not known at compile time).
  EXPECT_EQ(folds([](GraphBuilder& b) {
    int c = b.conv(b.input({1, 3, 5, 5}), b.input({4, 3, 3, 3}), -1);
    b.out({b.batch_norm(c)});
  }), 0);
  // Running statistics that are activations.
  EXPECT_EQ(folds([](GraphBuilder& b) {
    int c = b.conv(b.input({1, 3, 5, 5}), b.weight({4, 3, 3, 3}), -1);
    int var = b.un("exp", b.input({4}));
    int n = b.g.add_node("_native_batch_norm_legit_no_training", {c, -1, -1, b.weight({4}), var},
                         {{{1, 4, 3, 3}, DType::Float32}, {{0}, DType::Float32}, {{0}, DType::Float32}},
                         {{"momentum", 0.1}, {"eps", 1e-5}});
    b.out({b.g.node(n).outputs[0]});
  }), 0);
  // And the positive case through the same helper, so the helper itself can tell the two apart.
  EXPECT_EQ(folds([](GraphBuilder& b) {
    b.out({b.batch_norm(b.conv(b.input({1, 3, 5, 5}), b.weight({4, 3, 3, 3}), -1))});
  }), 1);
}

// ---------------- batchnorm_to_affine ----------------
TEST(RewriteBatchnormToAffine, UnfoldableBatchNormBecomesPerChannelMulAdd) {
  // DenseNet's pre-activation: cat -> BN -> relu -> conv; the BN has no producer to fold into.
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  for (bool affine : {true, false}) {
    GraphBuilder b(rng);
    int x1 = b.input({1, 3, 5, 5}), x2 = b.input({1, 5, 5, 5});
    int cat = b.g.node(b.g.add_node("cat", {x1, x2}, {{{1, 8, 5, 5}, DType::Float32}}, {{"dim", int64_t{1}}})).outputs[0];
    int bn = b.batch_norm(cat, affine);
    b.out({b.conv(b.un("relu", bn), b.weight({4, 8, 3, 3}), -1, 1, 1)});
    ASSERT_EQ(fold_batchnorm(b.g).nodes().size(), b.g.nodes().size());  // nothing for fold_batchnorm
    int n = -1;
    Graph g = batchnorm_to_affine(b.g, &n);
    ASSERT_NO_THROW(ecg::verify_graph(g));
    EXPECT_EQ(n, 1);
    Graph f = fold(g);
    EXPECT_EQ(ops_of(f), (std::vector<std::string>{"cat", "mul", "add", "relu", "convolution"})) << f.dump();
    for (const auto& node : f.nodes())
      if (node.op == "mul" || node.op == "add") {
        EXPECT_EQ(f.value(node.inputs[1]).kind, ecg::ValueKind::Constant);
        EXPECT_EQ(f.value(node.inputs[1]).shape, (Shape{8, 1, 1}));
      }
    expect_equivalent(b.g, g, rng);
  }
  // BatchNorm1d on [N, K]: the constants are [K].
  GraphBuilder b(rng);
  b.out({b.batch_norm(b.un("tanh", b.input({6, 4})))});
  int n = -1;
  Graph g = batchnorm_to_affine(b.g, &n);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(ops_of(fold(g)), (std::vector<std::string>{"tanh", "mul", "add"}));
  expect_equivalent(b.g, g, rng);
}

TEST(RewriteBatchnormToAffine, LeavesBatchNormsWithRuntimeStatisticsOrUsedSideOutputs) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  {  // running variance computed from an input
    GraphBuilder b(rng);
    int var = b.un("exp", b.input({4}));
    int n = b.g.add_node("_native_batch_norm_legit_no_training", {b.input({1, 4, 3, 3}), -1, -1, b.weight({4}), var},
                         {{{1, 4, 3, 3}, DType::Float32}, {{0}, DType::Float32}, {{0}, DType::Float32}},
                         {{"momentum", 0.1}, {"eps", 1e-5}});
    b.out({b.g.node(n).outputs[0]});
    int rewritten = -1;
    Graph g = batchnorm_to_affine(b.g, &rewritten);
    EXPECT_EQ(rewritten, 0);
    EXPECT_EQ(count_op(g, "_native_batch_norm_legit_no_training"), 1);
  }
  {  // a side output (saved mean) is read
    GraphBuilder b(rng);
    int bn = b.batch_norm(b.input({1, 4, 3, 3}));
    const int side = b.g.node(b.g.value(bn).producer).outputs[1];
    b.out({bn, side});
    int rewritten = -1;
    Graph g = batchnorm_to_affine(b.g, &rewritten);
    EXPECT_EQ(rewritten, 0);
    EXPECT_EQ(count_op(g, "_native_batch_norm_legit_no_training"), 1);
  }
}

// ---------------- remove_noops ----------------
TEST(RewriteRemoveNoops, RemovesIdentityOpsAndKeepsValues) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  const Shape s = {2, 3, 4};
  int x = b.input(s);
  int v = b.un("clone", x);
  v = b.un("contiguous", v);
  v = b.view(v, s);
  v = b.bin("mul", v, b.cst(1.f));
  v = b.bin("add", b.weight_data({4}, {0, 0, 0, 0}), v);
  v = b.un("relu", v);
  v = b.bin("div", v, b.weight_data({1, 1}, {1}));
  v = b.bin("sub", v, b.cst(0.f));
  v = b.expand(v, s);
  v = b.node("slice", {v}, s, {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{INT64_MAX}}, {"step", int64_t{1}}});
  v = b.permute(v, {0, 1, 2});
  v = b.transpose(v, 1, 1);
  v = b.node("_to_copy", {v}, s, {{"dtype", std::string("float32")}});
  v = b.node("alias", {v}, s);
  b.out({v});
  int removed = -1;
  Graph g = remove_noops(b.g, &removed);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"relu"})) << g.dump();
  EXPECT_EQ(removed, 13);
  expect_equivalent(b.g, g, rng);
  int again = -1;
  Graph g2 = remove_noops(g, &again);
  EXPECT_EQ(again, 0);
  EXPECT_EQ(g2.dump(), g.dump());
}

TEST(RewriteRemoveNoops, KeepsOpsThatChangeShapeDtypeOrValues) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({4, 5});
  int y = b.input({5});
  std::vector<int> outs = {
      b.view(x, {20}),
      b.bin("mul", x, b.cst(2.f)),
      b.bin("mul", y, b.weight_data({4, 5}, std::vector<float>(20, 1.f))),  // broadcasting grows y
      b.node("_to_copy", {x}, {4, 5}, {{"dtype", std::string("float64")}}, DType::Float64),
      b.node("add", {b.cst(0.f), x}, {4, 5}, {{"alpha", int64_t{2}}}),  // 0 + 2x
      b.node("slice", {x}, {2, 5}, {{"dim", int64_t{0}}, {"start", int64_t{0}}, {"end", int64_t{4}}, {"step", int64_t{2}}}),
      b.permute(x, {1, 0}),
      b.bin("div", b.cst(1.f), x),
      b.bin("sub", b.cst(0.f), x),
  };
  b.out(outs);
  int removed = -1;
  Graph g = remove_noops(b.g, &removed);
  EXPECT_EQ(removed, 0) << g.dump();
  EXPECT_EQ(g.nodes().size(), b.g.nodes().size());
  expect_equivalent(b.g, g, rng);
}

// An attention mask of all zeros (float) or all true (bool) masks nothing: the attention stays,
// without it. A mask with one -inf, or one false, or one that is a graph input, stays.
TEST(RewriteRemoveNoops, AttentionMaskThatMasksNothingIsDropped) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  const int q = b.input({1, 2, 5, 4}), k = b.input({1, 2, 6, 4}), v = b.input({1, 2, 6, 4});
  std::vector<float> masking(30, 0.f);
  masking[7] = -std::numeric_limits<float>::infinity();
  const uint8_t all_true[6] = {1, 1, 1, 1, 1, 1}, one_false[6] = {1, 1, 0, 1, 1, 1};
  const int masks[] = {b.weight_data({1, 1, 5, 6}, std::vector<float>(30, 0.f)), b.weight_data({1, 1, 5, 6}, masking),
                       b.g.add_constant({1, 1, 1, 6}, DType::Bool, all_true, "all_true"),
                       b.g.add_constant({1, 1, 1, 6}, DType::Bool, one_false, "one_false"), b.input({1, 1, 5, 6})};
  std::vector<int> outs;
  for (int m : masks)
    outs.push_back(b.g.node(b.g.add_node("_scaled_dot_product_flash_attention_for_cpu", {q, k, v, m},
                                         {{{1, 2, 5, 4}, DType::Float32}, {{1, 2, 5}, DType::Float32}},
                                         {{"dropout_p", 0.0}, {"is_causal", int64_t{0}}, {"scale", 0.5}}))
                       .outputs[0]);
  b.out(outs);
  int removed = -1;
  Graph g = remove_noops(b.g, &removed);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  EXPECT_EQ(removed, 2) << g.dump();
  std::vector<int> with_mask;
  for (const auto& n : g.nodes())
    if (n.op == "_scaled_dot_product_flash_attention_for_cpu") with_mask.push_back(n.input_or_absent(3) >= 0);
  EXPECT_EQ(with_mask, (std::vector<int>{0, 1, 0, 1, 1}));
  expect_equivalent(b.g, g, rng);
}

TEST(RewriteRemoveNoops, OutputsNeverAliasInputsOrEachOther) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({3, 4});
  int r = b.un("relu", x);
  int c1 = b.un("clone", r), c2 = b.un("clone", r);
  int cx = b.un("clone", x);           // would alias the input
  int cr = b.un("contiguous", c1);     // would alias output c1... which itself may vanish
  b.out({c1, c2, cx, cr, r});
  Graph g = remove_noops(b.g);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  // r is an output itself, so every clone/contiguous of it must stay distinct, and clone(x) stays.
  EXPECT_EQ(count_op(g, "relu"), 1);
  EXPECT_EQ(count_op(g, "clone") + count_op(g, "contiguous"), 4) << g.dump();
  std::set<int> distinct(g.outputs().begin(), g.outputs().end());
  EXPECT_EQ(distinct.size(), 5u);
  expect_equivalent(b.g, g, rng);
  // Without r among the outputs one of the clones may take r's place, the others stay.
  GraphBuilder b2(rng);
  int x2 = b2.input({3, 4});
  int r2 = b2.un("relu", x2);
  b2.out({b2.un("clone", r2), b2.un("clone", r2)});
  int removed = 0;
  Graph g2 = remove_noops(b2.g, &removed);
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(ops_of(g2), (std::vector<std::string>{"relu", "clone"}));
  expect_equivalent(b2.g, g2, rng);
}

// ---------------- eliminate_common_subexpressions ----------------
TEST(RewriteCse, MergesDuplicatesTransitivelyInOneSweep) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({3, 4}), y = b.input({3, 4});
  int e1 = b.un("exp", b.un("relu", x)), e2 = b.un("exp", b.un("relu", x));  // chains merge
  int a1 = b.bin("add", x, y), a2 = b.bin("add", y, x);                     // commutative
  int s1 = b.bin("sub", x, y), s2 = b.bin("sub", y, x);                     // not commutative
  int m1 = b.bin("mul", x, b.cst(2.f)), m2 = b.bin("mul", x, b.cst(2.f));   // equal scalar constants
  int m3 = b.bin("mul", x, b.cst(3.f));
  int l1 = b.un("leaky_relu", x, {{"negative_slope", 0.1}}), l2 = b.un("leaky_relu", x, {{"negative_slope", 0.2}});
  int t1 = b.bin("add", b.bin("add", e1, a1), b.bin("add", e2, a2));
  int t2 = b.bin("add", b.bin("add", s1, s2), b.bin("add", b.bin("add", m1, m2), m3));
  b.out({t1, t2, b.bin("add", l1, l2)});
  int merged = -1;
  Graph g = eliminate_common_subexpressions(b.g, &merged);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  // relu, exp, add(x,y), mul(x,2) merged once each; then add(e, a) twice -> once.
  EXPECT_EQ(merged, 5) << g.dump();
  EXPECT_EQ(count_op(g, "relu"), 1);
  EXPECT_EQ(count_op(g, "exp"), 1);
  EXPECT_EQ(count_op(g, "sub"), 2);
  EXPECT_EQ(count_op(g, "mul"), 2);
  EXPECT_EQ(count_op(g, "leaky_relu"), 2);
  expect_equivalent(b.g, g, rng);
  int again = -1;
  Graph g2 = eliminate_common_subexpressions(g, &again);
  EXPECT_EQ(again, 0);
  EXPECT_EQ(g2.dump(), g.dump());
}

TEST(RewriteCse, MultiOutputNodesWeightsAndOutputs) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({1, 2, 4, 4});
  int p1 = b.maxpool(x, 2, 2), p2 = b.maxpool(x, 2, 2);
  int i1 = b.g.node(b.g.value(p1).producer).outputs[1];
  int i2 = b.g.node(b.g.value(p2).producer).outputs[1];
  std::vector<float> wd = {0.5f, -1.f};
  int w1 = b.g.add_weight({2, 1, 1}, DType::Float32, wd.data(), "wa");
  int w2 = b.g.add_weight({2, 1, 1}, DType::Float32, wd.data(), "wb");  // same storage
  int w3 = b.weight_data({2, 1, 1}, wd);                                 // same values, other storage
  int q1 = b.bin("mul", p1, w1), q2 = b.bin("mul", p2, w2), q3 = b.bin("mul", p1, w3);
  int r1 = b.un("relu", x), r2 = b.un("relu", x);  // both graph outputs: must stay distinct
  b.out({b.bin("add", q1, q2), q3, i1, i2, r1, r2});
  int merged = -1;
  Graph g = eliminate_common_subexpressions(b.g, &merged);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  // Merging the second pool would make its indices (an output) the first pool's indices (also an
  // output), so it stays — and so do the muls reading it. The two relus are both outputs: they stay.
  EXPECT_EQ(count_op(g, "max_pool2d_with_indices"), 2) << g.dump();
  EXPECT_EQ(count_op(g, "relu"), 2);
  EXPECT_EQ(merged, 0);
  expect_equivalent(b.g, g, rng);

  // Without the indices among the outputs the pools merge, and then the muls by one weight.
  GraphBuilder c(rng);
  int xc = c.input({1, 2, 4, 4});
  int pa = c.maxpool(xc, 2, 2), pb = c.maxpool(xc, 2, 2);
  int wa = c.g.add_weight({2, 1, 1}, DType::Float32, wd.data(), "wa");
  int wb = c.g.add_weight({2, 1, 1}, DType::Float32, wd.data(), "wb");
  int wc = c.weight_data({2, 1, 1}, wd);
  c.out({c.bin("add", c.bin("mul", pa, wa), c.bin("mul", pb, wb)), c.bin("mul", pa, wc)});
  Graph h = eliminate_common_subexpressions(c.g, &merged);
  EXPECT_EQ(merged, 2) << h.dump();
  EXPECT_EQ(count_op(h, "max_pool2d_with_indices"), 1);
  EXPECT_EQ(count_op(h, "mul"), 2);  // weights are merged by storage, not by value
  expect_equivalent(c.g, h, rng);
}

// ---------------- merge_parallel_gemms ----------------
TEST(RewriteMergeParallelGemms, QueryKeyValueProjectionsBecomeOneGemmAndSlices) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  GraphBuilder b(rng);
  int x = b.input({6, 8});
  std::vector<int> heads;
  for (int i = 0; i < 3; ++i) {  // q, k, v: each output only feeds the head split (data movement)
    int y = b.addmm(b.weight({4}), x, b.weight({8, 4}));
    int v = b.node("view", {y}, {6, 2, 2}, {{"size", Shape{6, 2, 2}}});
    heads.push_back(b.node("transpose", {v}, {2, 6, 2}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}}));
  }
  int other = b.addmm(b.weight({5}), x, b.weight({8, 5}));  // feeds relu: not data movement, stays
  int a = b.mm(b.input({6, 8}), b.weight({8, 3}));          // another activation: its own group of one
  b.out({b.bin("add", heads[0], heads[1]), heads[2], b.un("relu", other), a});
  int merged = -1;
  Graph g = merge_parallel_gemms(b.g, &merged);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  EXPECT_EQ(merged, 2);
  int addmms = 0, slices = 0, cats = 0;
  for (const auto& n : g.nodes()) {
    addmms += n.op == "addmm";
    slices += n.op == "slice";
    cats += n.op == "cat";
    if (n.op == "addmm" && g.value(n.outputs[0]).shape[1] == 12) {
      EXPECT_EQ(g.value(n.inputs[1]).id, g.inputs()[0]);
    }
  }
  EXPECT_EQ(addmms, 2);  // the merged q/k/v GEMM [6, 12] and the relu one
  EXPECT_EQ(slices, 3);
  EXPECT_EQ(cats, 2);    // weights and biases, folded at compile time
  std::mt19937_64 r2(dnnfusion::testing::test_seed());
  expect_equivalent(b.g, g, r2);
  int again = -1;
  merge_parallel_gemms(fold(g), &again);
  EXPECT_EQ(again, 0);  // idempotent: the merged GEMM has no partner left
}

TEST(RewriteMergeParallelGemms, LeavesUnfoldedWeightsAndScaledGemmsAlone) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({4, 8});
  int w1 = b.un("neg", b.weight({8, 4}));  // weight-only but not folded yet: the pass waits for fold_constants
  int y1 = b.addmm(b.weight({4}), x, w1);
  int y2 = b.addmm(b.weight({4}), x, b.weight({8, 4}));
  b.out({b.node("view", {y1}, {16}, {{"size", Shape{16}}}), b.node("view", {y2}, {16}, {{"size", Shape{16}}})});
  int merged = -1;
  Graph g = merge_parallel_gemms(b.g, &merged);
  EXPECT_EQ(merged, 0);
  Graph f = merge_parallel_gemms(fold(b.g), &merged);  // once folded, they merge
  EXPECT_EQ(merged, 1);
  std::mt19937_64 r2(dnnfusion::testing::test_seed());
  expect_equivalent(b.g, f, r2);
}

// ---------------- split_to_slices and empty cat ----------------
TEST(RewriteSplitToSlices, SplitAndUnbindBecomeSingleOutputViews) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  GraphBuilder b(rng);
  int x = b.input({3, 10});
  int sp = b.g.add_node("split_with_sizes", {x}, {{{3, 4}, DType::Float32}, {{3, 2}, DType::Float32}, {{3, 4}, DType::Float32}},
                        {{"split_sizes", Shape{4, 2, 4}}, {"dim", int64_t{-1}}});
  int y = b.input({3, 2, 5});
  int ub = b.g.add_node("unbind", {y}, {{{2, 5}, DType::Float32}, {{2, 5}, DType::Float32}, {{2, 5}, DType::Float32}},
                        {{"dim", int64_t{0}}});
  const std::vector<int> so = b.g.node(sp).outputs;  // copies: adding nodes moves the node list
  const std::vector<int> uo = b.g.node(ub).outputs;
  // The middle piece of the split is unused: no slice for it.
  b.out({b.bin("sub", so[0], so[2]), b.bin("mul", uo[2], uo[0]), uo[1]});
  int replaced = -1;
  Graph g = split_to_slices(b.g, &replaced);
  ASSERT_NO_THROW(ecg::verify_graph(g));
  EXPECT_EQ(replaced, 2);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"slice", "slice", "select", "select", "select", "sub", "mul"}));
  std::mt19937_64 r2(dnnfusion::testing::test_seed());
  expect_equivalent(b.g, g, r2);
}

TEST(RewriteNoops, CatWithOneNonEmptyPieceIsThatPiece) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input({1, 2, 3, 4});
  int t = b.un("relu", x);
  float none = 0.f;
  int empty = b.g.add_constant({1, 2, 0, 4}, DType::Float32, &none, "empty_cache");
  int c = b.node("cat", {empty, t}, {1, 2, 3, 4}, {{"dim", int64_t{-2}}});
  b.out({c, b.un("exp", c)});
  int removed = -1;
  Graph g = remove_noops(b.g, &removed);
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"relu", "exp"}));
  std::mt19937_64 r2(dnnfusion::testing::test_seed());
  expect_equivalent(b.g, g, r2);
}
