// Block plans as data (csrc/codegen/block_plan): IR in, plan out, for the classic fused-block
// patterns — an element-wise chain, a non-viewable reshape, GEMM/conv with an epilogue, a
// normalization with a prologue, attention reading strided operands and storing through strides.
// No code is emitted here; the same plans drive the cpu emitter (tests/cpp/test_codegen.cc).
#include <gtest/gtest.h>

#include <vector>

#include "codegen/block_plan.h"
#include "ecg/graph.h"
#include "ecg/op_registry.h"
#include "target/target.h"

using namespace dnnfusion;
using codegen::BlockPlan;
using ecg::Graph;

namespace {

struct Builder {
  Graph g;
  std::vector<float> zeros = std::vector<float>(4096, 0.f);
  int in(std::vector<int64_t> s) { return g.add_input(s, DType::Float32, "x" + std::to_string(g.inputs().size())); }
  int w(std::vector<int64_t> s) { return g.add_weight(s, DType::Float32, zeros.data()); }
  int op(const char* name, std::vector<int> ins, std::vector<int64_t> s, ecg::AttrMap a = {}) {
    return g.node(g.add_node(name, ins, {{s, DType::Float32}}, a)).outputs[0];
  }
  int node_of(int v) const { return g.value(v).producer; }
};

// Plans the block made of the producers of `values` (the dominant op found by mapping type) with
// the cpu target's kernel for it, as the cpu emitter does.
BlockPlan plan(const Graph& g, const std::vector<int>& nodes) {
  fusion::Plan p;
  fusion::Block b;
  b.nodes = nodes;
  for (int n : nodes)
    if (g.node(n).info->mapping == ecg::MappingType::ManyToMany) b.dominant = n;
  p.blocks.push_back(b);
  const runtime::OpKernel* k =
      b.dominant >= 0 ? target::registry().get("cpu").find_kernel(g.node(b.dominant).op) : nullptr;
  return codegen::plan_block(g, p, 0, k);
}

std::vector<int> values_of(const std::vector<BlockPlan::Stage>& st) {
  std::vector<int> v;
  for (const auto& s : st) v.push_back(s.value);
  return v;
}

ecg::AttrMap conv_attrs() {
  return {{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
          {"dilation", std::vector<int64_t>{1, 1}}, {"transposed", int64_t{0}},
          {"output_padding", std::vector<int64_t>{0, 0}}, {"groups", int64_t{1}}};
}

TEST(BlockPlan, SingletonBlockHasNoStages) {
  Builder b;
  int x = b.in({4});
  b.op("relu", {x}, {4});
  b.g.set_outputs({1});
  BlockPlan p = plan(b.g, {0});
  EXPECT_TRUE(p.before.empty() && p.after.empty() && p.materialized.empty());
}

TEST(BlockPlan, ElementwiseChainIsOneLoopWritingOnlyTheBlockOutput) {
  Builder b;
  int x = b.in({3, 8});
  int r = b.op("relu", {x}, {3, 8});
  int v = b.op("view", {r}, {24}, {{"size", std::vector<int64_t>{24}}});
  int t = b.op("tanh", {v}, {24});
  b.g.set_outputs({t});
  BlockPlan p = plan(b.g, {0, 1, 2});
  EXPECT_EQ(p.dominant, -1);
  EXPECT_EQ(p.materialized, std::vector<int>{t});
  ASSERT_EQ(p.before.size(), 1u);
  EXPECT_FALSE(p.before[0].alias);
  EXPECT_EQ(p.internal_bytes, 0);
  EXPECT_EQ(p.edge_rules.at("One-to-One -> Reorganize: index arithmetic"), 1);
  EXPECT_EQ(p.edge_rules.at("Reorganize -> One-to-One: inline"), 1);
}

TEST(BlockPlan, NonViewableReshapeMaterializesItsOperandInsideTheBlock) {
  Builder b;
  int x = b.in({4, 6});
  int e = b.op("exp", {x}, {4, 6});
  int t = b.op("t", {e}, {6, 4});
  int v = b.op("view", {t}, {24}, {{"size", std::vector<int64_t>{24}}});  // merges permuted dims
  int n = b.op("neg", {v}, {24});
  b.g.set_outputs({n});
  BlockPlan p = plan(b.g, {0, 1, 2, 3});
  EXPECT_EQ(p.materialized, (std::vector<int>{t, n}));
  EXPECT_EQ(values_of(p.before), (std::vector<int>{t, n}));  // the transpose first, then the loop reading it
  EXPECT_EQ(p.internal_bytes, 24 * 4);
  EXPECT_EQ(p.edge_rules.at("Shuffle -> Reorganize: materialized"), 1);
}

TEST(BlockPlan, ValuesUsedOutsideAreWrittenAndAPureViewOfOneAliases) {
  Builder b;
  int x = b.in({3, 8});
  int r = b.op("relu", {x}, {3, 8});
  int u = b.op("unsqueeze", {r}, {3, 1, 8}, {{"dim", int64_t{1}}});
  int s = b.op("sum", {u}, {3, 8}, {{"dim", std::vector<int64_t>{1}}});  // another block reads u
  b.g.set_outputs({r, s});
  BlockPlan p = plan(b.g, {0, 1});
  EXPECT_EQ(p.materialized, (std::vector<int>{r, u}));
  ASSERT_EQ(p.before.size(), 2u);
  EXPECT_FALSE(p.before[0].alias);
  EXPECT_TRUE(p.before[1].alias);
  EXPECT_EQ(p.before[1].alias_of, r);
  EXPECT_EQ(p.before[1].elem_offset, 0);
}

TEST(BlockPlan, GemmWithElementwiseTailRunsItAsAnEpilogue) {
  Builder b;
  int x = b.in({6, 16}), res = b.in({6, 24});
  int mm = b.op("addmm", {b.w({24}), x, b.w({16, 24})}, {6, 24});
  int ad = b.op("add", {mm, res}, {6, 24});
  int ge = b.op("gelu", {ad}, {6, 24});
  b.g.set_outputs({ge});
  BlockPlan p = plan(b.g, {0, 1, 2});
  EXPECT_EQ(p.dominant, 0);
  EXPECT_EQ(p.epilogue_target, ge);
  EXPECT_EQ(p.prologue_value, -1);
  EXPECT_EQ(p.materialized, std::vector<int>{ge});
  EXPECT_TRUE(p.before.empty() && p.after.empty());  // one launch: the kernel with its epilogue
  EXPECT_EQ(p.edge_rules.at("Many-to-Many -> One-to-One: epilogue"), 1);
  EXPECT_EQ(p.internal_bytes, 0);
}

TEST(BlockPlan, SoftmaxComputesItsInputInAPrologueAndScalesInAnEpilogue) {
  Builder b;
  int x = b.in({6, 24});
  float scale = 0.25f;
  int c = b.g.add_constant({}, DType::Float32, &scale);
  int sc = b.op("mul", {x, c}, {6, 24});
  int am = b.op("add", {sc, b.w({24})}, {6, 24});
  int sm = b.op("_softmax", {am}, {6, 24}, {{"dim", int64_t{-1}}, {"half_to_float", int64_t{0}}});
  int s2 = b.op("mul", {sm, c}, {6, 24});
  b.g.set_outputs({s2});
  BlockPlan p = plan(b.g, {0, 1, 2, 3});
  EXPECT_EQ(p.dominant, 2);
  EXPECT_EQ(p.prologue_value, am);
  EXPECT_EQ(p.epilogue_target, s2);
  EXPECT_EQ(p.edge_rules.at("One-to-One -> Many-to-Many: prologue"), 1);
  EXPECT_EQ(p.edge_rules.at("One-to-One -> One-to-One: inline"), 1);
}

TEST(BlockPlan, ConvWithBatchNormAndReluIsOneKernelWithAnEpilogue) {
  Builder b;
  int img = b.in({2, 4, 9, 9});
  int cv = b.op("convolution", {img, b.w({8, 4, 3, 3}), b.w({8})}, {2, 8, 9, 9}, conv_attrs());
  int bn = b.g.node(b.g.add_node("_native_batch_norm_legit_no_training", {cv, b.w({8}), b.w({8}), b.w({8}), b.w({8})},
                                 {{{2, 8, 9, 9}, DType::Float32}, {{0}, DType::Float32}, {{0}, DType::Float32}},
                                 {{"momentum", 0.1}, {"eps", 1e-5}}))
               .outputs[0];
  int rl = b.op("relu", {bn}, {2, 8, 9, 9});
  b.g.set_outputs({rl});
  BlockPlan p = plan(b.g, {0, 1, 2});
  EXPECT_EQ(p.epilogue_target, rl);
  EXPECT_EQ(p.materialized, std::vector<int>{rl});
}

TEST(BlockPlan, ResidualTheEpilogueReadsIsMaterializedBeforeTheKernel) {
  // conv -> add(permuted+merged residual) -> relu: the residual's view has no strided form, so the
  // block writes it first (a "before" stage), and the conv's epilogue reads it.
  Builder b;
  int img = b.in({1, 4, 6, 6}), res = b.in({1, 2, 6, 6, 2});
  int cv = b.op("convolution", {img, b.w({4, 4, 3, 3}), b.w({4})}, {1, 4, 6, 6}, conv_attrs());
  int pm = b.op("permute", {res}, {1, 2, 2, 6, 6}, {{"dims", std::vector<int64_t>{0, 1, 4, 2, 3}}});
  int vw = b.op("view", {pm}, {1, 4, 6, 6}, {{"size", std::vector<int64_t>{1, 4, 6, 6}}});
  int ad = b.op("add", {cv, vw}, {1, 4, 6, 6});
  int rl = b.op("relu", {ad}, {1, 4, 6, 6});
  b.g.set_outputs({rl});
  BlockPlan p = plan(b.g, {0, 1, 2, 3, 4});
  EXPECT_EQ(p.epilogue_target, rl);
  EXPECT_EQ(values_of(p.before), std::vector<int>{pm});
  EXPECT_TRUE(p.after.empty());
  EXPECT_EQ(p.internal_bytes, 4 * 36 * 4);
}

TEST(BlockPlan, AttentionReadsHeadSplitsStridedAndStoresItsHeadMergeThroughStrides) {
  Builder b;
  int qkv = b.in({1, 7, 24});
  std::vector<int> heads, nodes;
  for (int i = 0; i < 3; ++i) {
    int s = b.op("slice", {qkv}, {1, 7, 8}, {{"dim", int64_t{2}}, {"start", int64_t{8 * i}}, {"end", int64_t{8 * i + 8}}});
    int v = b.op("view", {s}, {1, 7, 2, 4}, {{"size", std::vector<int64_t>{1, 7, 2, 4}}});
    heads.push_back(b.op("transpose", {v}, {1, 2, 7, 4}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}}));
  }
  int att = b.g.node(b.g.add_node("_scaled_dot_product_flash_attention_for_cpu", heads,
                                  {{{1, 2, 7, 4}, DType::Float32}, {{1, 2, 7}, DType::Float32}}, {{"dropout_p", 0.0}}))
                .outputs[0];
  int t = b.op("transpose", {att}, {1, 7, 2, 4}, {{"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
  b.g.set_outputs({t});
  for (int n = 0; n < static_cast<int>(b.g.nodes().size()); ++n) nodes.push_back(n);
  BlockPlan p = plan(b.g, nodes);
  ASSERT_EQ(p.strided_operands.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p.strided_operands[i].slot, i);
    EXPECT_EQ(p.strided_operands[i].value, qkv);
    EXPECT_EQ(p.strided_operands[i].offset, 8 * i);
  }
  EXPECT_EQ(p.store_target, t);
  EXPECT_FALSE(p.store_strides.empty());
  EXPECT_EQ(p.epilogue_target, -1);
  EXPECT_EQ(p.edge_rules.at("Many-to-Many -> Shuffle: strided store"), 1);
}

// The attention kernel stores whole rows: a permute that moves the innermost dim is no store
// strides (it is computed after the kernel instead).
TEST(BlockPlan, PermuteMovingTheInnermostDimIsNotAStoreStride) {
  Builder b;
  std::vector<int> qkv{b.in({2, 3, 4, 5}), b.in({2, 3, 4, 5}), b.in({2, 3, 4, 5})};
  int att = b.g.node(b.g.add_node("_scaled_dot_product_flash_attention_for_cpu", qkv,
                                  {{{2, 3, 4, 5}, DType::Float32}, {{2, 3, 4}, DType::Float32}}, {{"dropout_p", 0.0}}))
                .outputs[0];
  int t = b.op("permute", {att}, {2, 4, 5, 3}, {{"dims", std::vector<int64_t>{0, 2, 3, 1}}});
  b.g.set_outputs({t});
  BlockPlan p = plan(b.g, {0, 1});
  EXPECT_EQ(p.store_target, -1);
  EXPECT_TRUE(p.store_strides.empty());
}

}  // namespace
