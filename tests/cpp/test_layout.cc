// NCHW[x]c layout propagation (csrc/target/cpu/layout): IR in / IR out on small CNN graphs (where transforms
// go, what stays blocked) and numerical equivalence with the NCHW graph through the runtime.
#include <gtest/gtest.h>

#include "common/error.h"
#include "ecg/verifier.h"
#include "target/cpu/layout/fold_input_scale.h"
#include "target/cpu/layout/fuse_channel_mean.h"
#include "target/cpu/layout/fuse_depthwise_project.h"
#include "target/cpu/layout/fuse_expand_depthwise.h"
#include "target/cpu/layout/propagate_blocked_layout.h"
#include "target/cpu/layout/use_amx_convs.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "rewrite_test_util.h"

namespace dnnfusion {
namespace {

using layout::ConvScheme;
using layout::LayoutStats;
using rewrite_test::count_op;
using rewrite_test::fold;
using rewrite_test::GraphBuilder;
using rewrite_test::outputs_close;
using rewrite_test::random_inputs;
using rewrite_test::run_graph;

// The ISA the tests that pick 32- and 64-lane blocks run on: those blocks exist on AVX-512 and in
// the scalar kernels, not on AVX2, so without AVX-512 their graphs run on the scalar kernels.
kernels::Isa wide_block_isa() {
  return kernels::isa_supported(kernels::Isa::Avx512) ? kernels::Isa::Avx512 : kernels::Isa::Scalar;
}

// Blocks of `b` where they divide the channels (the input's block when it has one), else NCHW.
layout::ConvSchemeFn fixed_blocks(int b, int* asked_with_block = nullptr) {
  return [b, asked_with_block](const ecg::Graph& g, const ecg::Node& n, int input_block) -> std::optional<ConvScheme> {
    const int64_t C = g.value(n.inputs[0]).shape[1], K = g.value(n.outputs[0]).shape[1];
    if (asked_with_block && input_block) ++*asked_with_block;
    const int ic = input_block ? input_block : (C % b == 0 ? b : static_cast<int>(C));
    if (K % b || C % ic) return std::nullopt;
    return ConvScheme{n.attr_int("groups", 1) > 1 ? b : ic, b, 4, false};
  };
}

ecg::Graph residual_block(GraphBuilder& B) {
  int x = B.input({1, 16, 9, 9});
  int c1 = B.un("relu", B.conv(x, B.weight({32, 16, 3, 3}, 0.05f, 0.2f), B.weight({32}), 1, 1));
  int c2 = B.conv(c1, B.weight({32, 32, 3, 3}, 0.05f, 0.2f), B.weight({32}), 1, 1);
  int r = B.un("relu", B.bin("add", c2, c1));
  int m = B.reduce("mean", r, {2, 3}, true);
  B.out({B.view(m, {1, 32})});
  return B.g;
}

TEST(LayoutPropagate, ResidualBlockStaysBlockedBetweenConvs) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  ecg::Graph g = residual_block(B);
  int asked = 0;
  LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(g, fixed_blocks(16, &asked), &st);
  ecg::verify_graph(out);
  EXPECT_EQ(count_op(out, "convolution"), 0);
  EXPECT_EQ(count_op(out, "conv2d_nchwc"), 2);
  EXPECT_EQ(count_op(out, "conv2d_nchwc_pack_weight"), 2);
  EXPECT_EQ(st.convs_blocked, 2);
  EXPECT_EQ(st.to_blocked, 1);      // the graph input, once
  EXPECT_EQ(st.to_plain, 1);        // after the global pool: a [1, 32, 1, 1] tensor
  EXPECT_EQ(st.reblocked, 0);
  EXPECT_EQ(st.ops_propagated, 4);  // relu, add, relu, mean
  EXPECT_EQ(asked, 1);              // the second conv was offered its input's block
  // Everything between the convs is 5-D; graph inputs and outputs keep their shapes.
  for (const auto& n : out.nodes()) {
    if (n.op == "relu" || n.op == "add") {
      EXPECT_EQ(out.value(n.outputs[0]).shape, (std::vector<int64_t>{1, 2, 9, 9, 16}));
    }
  }
  EXPECT_EQ(out.value(out.inputs()[0]).shape, g.value(g.inputs()[0]).shape);
  EXPECT_EQ(out.value(out.outputs()[0]).shape, (std::vector<int64_t>{1, 32}));
}

TEST(LayoutPropagate, DecliningSchemeKeepsTheGraph) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  ecg::Graph g = residual_block(B);
  LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(
      g, [](const ecg::Graph&, const ecg::Node&, int) { return std::optional<ConvScheme>{}; }, &st);
  EXPECT_EQ(out.nodes().size(), g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) EXPECT_EQ(out.nodes()[i].op, g.nodes()[i].op);
  EXPECT_EQ(st.convs_blocked + st.to_blocked + st.to_plain + st.ops_propagated, 0);
}

TEST(LayoutPropagate, LayoutDependentConsumerGetsOnePlainCopy) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  int x = B.input({2, 8, 6, 6});
  int c = B.un("relu", B.conv(x, B.weight({16, 8, 1, 1}), B.weight({16})));
  int a = B.view(c, {2, 16 * 36});            // layout-dependent
  int p = B.maxpool(c, 2, 2);                 // runs blocked; a graph output, so converted back
  int s = B.reduce("sum", B.un("sigmoid", c), {1}, false);  // sigmoid blocked, the channel sum is not
  B.out({a, p, s});
  LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(B.g, fixed_blocks(8), &st);
  ecg::verify_graph(out);
  EXPECT_EQ(st.convs_blocked, 1);
  EXPECT_EQ(st.to_plain, 3);  // relu output once (for the view), the pool's and the sigmoid's outputs
  auto in = random_inputs(B.g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(B.g, run_graph(B.g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
}

TEST(LayoutPropagate, ChannelBroadcastOperandsAndConcatStayBlocked) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  int x = B.input({1, 16, 7, 7});
  int c1 = B.conv(x, B.weight({16, 16, 3, 3}, 0.05f, 0.2f), -1, 1, 1);
  // squeeze-and-excitation: a per-channel gate computed from the blocked tensor itself
  int gate = B.un("sigmoid", B.conv(B.reduce("mean", c1, {2, 3}, true), B.weight({16, 16, 1, 1}), B.weight({16})));
  int se = B.bin("mul", c1, gate);
  int scaled = B.bin("add", B.bin("mul", se, B.weight({16, 1, 1})), B.cst(0.25f));  // constant per-channel scale
  int dw = B.conv(scaled, B.weight({16, 1, 3, 3}), B.weight({16}), 1, 1, 16);    // depthwise
  int cat = B.node("cat", {dw, c1}, {1, 32, 7, 7}, {{"dim", int64_t{1}}});
  B.out({B.conv(cat, B.weight({8, 32, 1, 1}), -1)});
  LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(B.g, fixed_blocks(8), &st);
  ecg::verify_graph(out);
  EXPECT_EQ(st.convs_blocked, 4);
  EXPECT_EQ(st.to_blocked, 1);
  EXPECT_EQ(st.to_plain, 1);
  EXPECT_EQ(count_op(out, "convolution"), 0);
  auto in = random_inputs(B.g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(B.g, run_graph(B.g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
}

TEST(LayoutPropagate, ConvOfferedAnotherBlockIsReblocked) {
  testing::IsaGuard isa(wide_block_isa());
  // {first conv's oc_bn, second conv's ic_bn, permutes expected}: one permute each for the input
  // and the output transform; a re-block between blocks that divide each other is one more permute
  // (one loop), otherwise it goes through NCHW (two).
  const int cases[][3] = {{16, 8, 3}, {8, 16, 3}, {8, 32, 3}, {32, 8, 3}, {8, 12, 4}};
  for (const auto& c : cases) {
    SCOPED_TRACE("re-block " + std::to_string(c[0]) + " -> " + std::to_string(c[1]));
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    int x = B.input({1, 96, 5, 5});
    int c1 = B.conv(x, B.weight({96, 96, 3, 3}, 0.05f, 0.2f), -1, 1, 1);
    B.out({B.conv(c1, B.weight({24, 96, 3, 3}, 0.05f, 0.2f), -1, 1, 1)});
    int calls = 0;
    auto scheme = [&calls, &c](const ecg::Graph&, const ecg::Node&, int) -> std::optional<ConvScheme> {
      return ++calls == 1 ? ConvScheme{8, c[0], 4, false} : ConvScheme{c[1], 8, 2, true};
    };
    LayoutStats st;
    ecg::Graph out = layout::propagate_blocked_layout(B.g, scheme, &st);
    ecg::verify_graph(out);
    EXPECT_EQ(st.reblocked, 1);
    EXPECT_EQ(count_op(out, "permute"), c[2]);
    auto in = random_inputs(B.g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(B.g, run_graph(B.g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
  }
}

TEST(LayoutPropagate, SchemeThatDoesNotFitIsAnError) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  int x = B.input({1, 12, 5, 5});
  B.out({B.conv(x, B.weight({16, 12, 3, 3}), -1)});
  auto bad = [](const ecg::Graph&, const ecg::Node&, int) { return std::optional<ConvScheme>{ConvScheme{32, 16, 4, false}}; };
  try {
    layout::propagate_blocked_layout(B.g, bad);
    FAIL() << "expected an error: a 32-block pads 12 channels by more than half";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ic_bn=32"), std::string::npos) << e.what();
  }
}

TEST(LayoutPropagate, BlockFitsDividesOrPadsByAtMostHalf) {
  EXPECT_TRUE(layout::block_fits(32, 16));
  EXPECT_TRUE(layout::block_fits(24, 32));   // 32 <= 1.5 * 24
  EXPECT_TRUE(layout::block_fits(40, 16));   // 48
  EXPECT_FALSE(layout::block_fits(40, 32));  // 64 > 60
  EXPECT_FALSE(layout::block_fits(10, 16));
  EXPECT_TRUE(layout::block_fits(3, 3));
  EXPECT_FALSE(layout::block_fits(0, 8));
  EXPECT_FALSE(layout::block_fits(8, 0));
}

// An inverted-residual tail with 24 and 40 channels in padded blocks: conv 16->24 (one 32-block,
// 8 padded lanes), a per-channel gate whose padded lanes are not 0 (sigmoid(0) = 0.5, and a
// constant offset), a 1x1 conv 24->40 reading the padded 32-block (16-blocks out: 48 lanes), a
// depthwise conv on 40 channels, a residual add with a per-channel constant, the output in NCHW.
TEST(LayoutPropagate, PaddedBlocksComputeTheSameValues) {
  testing::IsaGuard isa(wide_block_isa());
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  int x = B.input({2, 16, 7, 6});
  int c1 = B.conv(x, B.weight({24, 16, 1, 1}, 0.05f, 0.2f), B.weight({24}));
  int gate = B.un("sigmoid", B.conv(B.reduce("mean", c1, {2, 3}, true), B.weight({24, 24, 1, 1}), B.weight({24})));
  int se = B.bin("add", B.bin("mul", c1, gate), B.cst(0.5f));
  int c2 = B.conv(se, B.weight({40, 24, 1, 1}, 0.05f, 0.2f), -1);
  int dw = B.conv(c2, B.weight({40, 1, 3, 3}), B.weight({40}), 1, 1, 40);
  B.out({B.bin("add", B.un("relu", dw), B.weight({40, 1, 1}))});
  auto scheme = [](const ecg::Graph& g, const ecg::Node& n, int input_block) -> std::optional<ConvScheme> {
    const int64_t K = g.value(n.outputs[0]).shape[1];
    const int ob = K == 24 ? 32 : 16;
    const int ib = input_block ? input_block : 16;
    return ConvScheme{n.attr_int("groups", 1) > 1 ? ob : ib, ob, 3, true};
  };
  LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(B.g, scheme, &st);
  ecg::verify_graph(out);
  EXPECT_EQ(st.convs_blocked, 4);
  EXPECT_EQ(st.to_blocked, 1);  // the 16-channel input: no padding
  EXPECT_EQ(st.to_plain, 1);    // the 40-channel output: drop lanes 40..47
  EXPECT_EQ(st.reblocked, 0);   // the 1x1 conv reads the padded 32-block as it is
  EXPECT_EQ(count_op(out, "convolution"), 0);
  EXPECT_EQ(count_op(out, "slice"), 1);
  int act_pads = 0;  // pads of activations (the per-channel constant's pad folds away)
  for (const auto& n : out.nodes())
    if (n.op == "constant_pad_nd" && !out.value(n.inputs[0]).is_compile_time()) ++act_pads;
  EXPECT_EQ(act_pads, 0);
  for (const auto& n : out.nodes())
    if (n.op == "conv2d_nchwc" && n.attr_ints("weight_shape")[0] == 40 && n.attr_int("groups", 1) == 1) {
      EXPECT_EQ(out.value(n.inputs[0]).shape, (std::vector<int64_t>{2, 1, 7, 6, 32}));
      EXPECT_EQ(out.value(n.outputs[0]).shape, (std::vector<int64_t>{2, 3, 7, 6, 16}));
    }
  auto in = random_inputs(B.g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(B.g, run_graph(B.g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
}

// A padded block at the graph's edges and between convs whose padded sizes differ: the NCHW input
// is padded (constant_pad_nd) into its block, and re-blocking 24 channels from 32 (one block) to
// 8 (three) goes through NCHW, from 32 to 16 (two blocks, the same 32 lanes) through one permute.
TEST(LayoutPropagate, PaddedBlocksAtTheEdgesAndReblocked) {
  testing::IsaGuard isa(wide_block_isa());
  for (int second_ic : {8, 16}) {
    SCOPED_TRACE("re-block 32 -> " + std::to_string(second_ic));
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    int x = B.input({1, 24, 5, 6});
    int c1 = B.conv(x, B.weight({24, 24, 3, 3}, 0.05f, 0.2f), B.weight({24}), 1, 1);
    B.out({B.conv(c1, B.weight({12, 24, 3, 3}, 0.05f, 0.2f), -1, 1, 1)});
    int calls = 0;
    auto scheme = [&calls, second_ic](const ecg::Graph&, const ecg::Node&, int) -> std::optional<ConvScheme> {
      return ++calls == 1 ? ConvScheme{32, 32, 4, false} : ConvScheme{second_ic, 16, 2, true};
    };
    LayoutStats st;
    ecg::Graph out = layout::propagate_blocked_layout(B.g, scheme, &st);
    ecg::verify_graph(out);
    EXPECT_EQ(st.reblocked, 1);
    EXPECT_EQ(count_op(out, "constant_pad_nd"), 1);  // the input into its 32-block
    EXPECT_EQ(count_op(out, "slice"), second_ic == 8 ? 2 : 1);  // via NCHW; the 12-channel output
    auto in = random_inputs(B.g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(B.g, run_graph(B.g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
  }
}

// A squeeze-and-excitation tail: mul(x, gate) feeding a 1x1 projection conv folds into it (the
// conv scales its weights per image); not when the product has another user or the image is so
// small that the weights outweigh it.
ecg::Graph se_tail(GraphBuilder& B, int64_t hw, bool product_is_output) {
  int x = B.input({2, 24, hw, hw});
  int c1 = B.un("relu", B.conv(x, B.weight({48, 24, 1, 1}, 0.05f, 0.2f), B.weight({48})));
  int gate = B.un("sigmoid", B.conv(B.reduce("mean", c1, {2, 3}, true), B.weight({48, 48, 1, 1}), B.weight({48})));
  int se = B.bin("mul", c1, gate);
  int proj = B.conv(se, B.weight({16, 48, 1, 1}, 0.05f, 0.2f), B.weight({16}));
  if (product_is_output) B.out({proj, se});
  else B.out({proj});
  return B.g;
}

TEST(LayoutFoldInputScale, SqueezeExcitationGateFoldsIntoTheProjection) {
  auto blocks16 = [](const ecg::Graph& g, const ecg::Node& n, int input_block) -> std::optional<ConvScheme> {
    const int64_t C = g.value(n.inputs[0]).shape[1];
    return ConvScheme{input_block ? input_block : (C % 16 == 0 ? 16 : 8), 16, 4, true};
  };
  struct Case {
    int64_t hw;
    bool product_is_output;
    int folded;
  };
  for (const Case c : {Case{8, false, 1}, Case{8, true, 0}, Case{3, false, 0}}) {
    SCOPED_TRACE("hw=" + std::to_string(c.hw) + " product_is_output=" + std::to_string(c.product_is_output));
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    ecg::Graph g = se_tail(B, c.hw, c.product_is_output);
    ecg::Graph blocked = fold(layout::propagate_blocked_layout(g, blocks16));
    int folded = -1;
    ecg::Graph out = layout::fold_input_scale(blocked, &folded);
    ecg::verify_graph(out);
    EXPECT_EQ(folded, c.folded);
    EXPECT_EQ(count_op(out, "mul"), count_op(blocked, "mul") - c.folded);
    int scaled_convs = 0;
    for (const auto& n : out.nodes())
      if (n.op == "conv2d_nchwc" && n.input_or_absent(3) >= 0) {
        ++scaled_convs;
        EXPECT_EQ(out.value(n.inputs[3]).shape, (std::vector<int64_t>{2, 3, 1, 1, 16}));  // per-image gate
      }
    EXPECT_EQ(scaled_convs, c.folded);
    auto in = random_inputs(g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
  }
}

// An inverted residual front: 1x1 expand -> activation -> depthwise 3x3 (-> relu6 and a residual
// add the fusion planner keeps as the fused node's epilogue). Fuses into one conv2d_nchwc_expand_dw
// for each activation the kernel runs and for none, and for a first conv of another kernel size
// or stride (a stem); not when the expanded value has a second user or the activation is another
// op. (A grouped first conv is refused by the pass's groups == 1 test and the kernel's check.)
struct InvertedResidual {
  std::string act = "relu6";  // hardtanh(0, 6); "" = none
  bool second_user = false;
  int64_t expand_k = 1;
  int64_t stride = 1;
  int64_t expand_stride = 1;
};

ecg::Graph inverted_residual(GraphBuilder& B, const InvertedResidual& c) {
  int x = B.input({2, 16, 10, 11});
  int e = B.conv(x, B.weight({40, 16, c.expand_k, c.expand_k}, 0.05f, 0.2f), B.weight({40}), c.expand_stride,
                 c.expand_k / 2);
  if (c.act == "relu6") e = B.un("hardtanh", e, {{"min_val", 0.0}, {"max_val", 6.0}});
  else if (!c.act.empty()) e = B.un(c.act, e);
  int d = B.conv(e, B.weight({40, 1, 3, 3}, -0.5f, 0.5f), B.weight({40}), c.stride, 1, 40);
  int y = B.un("hardtanh", d, {{"min_val", 0.0}, {"max_val", 6.0}});
  if (c.second_user) B.out({y, B.reduce("mean", e, {2, 3}, true)});
  else B.out({y});
  return B.g;
}

TEST(LayoutFuseExpandDepthwise, InvertedResidualFrontBecomesOneKernel) {
  struct Case {
    InvertedResidual ir;
    int fused;
  };
  const Case cases[] = {{{"relu6"}, 1},         {{"relu"}, 1},          {{"hardswish"}, 1}, {{"silu", false, 1, 2}, 1},
                        {{""}, 1},              {{"gelu"}, 0},          {{"relu6", true}, 0},
                        {{"relu6", false, 3}, 1}, {{"hardswish", false, 3, 1, 2}, 1},
                        {{"relu", false, 1, 2, 2}, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE("act=" + c.ir.act + " second_user=" + std::to_string(c.ir.second_user) +
                 " expand_k=" + std::to_string(c.ir.expand_k) + " stride=" + std::to_string(c.ir.stride) +
                 " expand_stride=" + std::to_string(c.ir.expand_stride));
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    ecg::Graph g = inverted_residual(B, c.ir);
    ecg::Graph blocked = fold(layout::propagate_blocked_layout(g, fixed_blocks(8)));
    int fused = -1;
    ecg::Graph out = layout::fuse_expand_depthwise(blocked, &fused);
    ecg::verify_graph(out);
    EXPECT_EQ(fused, c.fused);
    EXPECT_EQ(count_op(out, "conv2d_nchwc_expand_dw"), c.fused);
    EXPECT_EQ(count_op(out, "conv2d_nchwc"), 2 - 2 * c.fused);
    if (c.fused) {
      for (const auto& n : out.nodes())
        if (n.op == "conv2d_nchwc_expand_dw") {
          EXPECT_EQ(n.attr_str("expand_act"), c.ir.act.empty() ? "none" : c.ir.act);
          EXPECT_EQ(n.attr_str("dw_act"), "relu6");  // the depthwise conv's hardtanh(0, 6) too
          EXPECT_EQ(n.attr_ints("expand_weight_shape"), (std::vector<int64_t>{40, 16, c.ir.expand_k, c.ir.expand_k}));
          EXPECT_EQ(n.attr_ints("expand_stride", {1}).at(0), c.ir.expand_stride);
          EXPECT_EQ(n.attr_ints("expand_padding", {0}).at(0), c.ir.expand_k / 2);
          EXPECT_EQ(n.attr_int("groups"), 40);
        }
      EXPECT_EQ(count_op(out, "hardtanh") + count_op(out, c.ir.act.empty() ? "hardtanh" : c.ir.act), 0)
          << "both activations run in the kernel";
    }
    auto in = random_inputs(g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
  }
}

// A whole inverted residual block (MobileNet-V2): expand, relu6, depthwise, relu6, 1x1 projection,
// residual add. The projection fuses into the expand + depthwise kernel when it is a 1x1 stride-1
// unpadded conv reading the depthwise output alone, and the depthwise output reaches the size
// threshold (0 here; the default one, 8 MiB, leaves this small graph alone). The residual add
// stays a node (the fusion planner makes it the kernel's epilogue).
struct FullBlock {
  int64_t project_k = 1, project_stride = 1;
  bool second_user = false;
  int64_t min_bytes = 0;
};

ecg::Graph full_block(GraphBuilder& B, const FullBlock& c) {
  int x = B.input({2, 16, 10, 11});
  int e = B.un("hardtanh", B.conv(x, B.weight({40, 16, 1, 1}, 0.05f, 0.2f), B.weight({40})),
               {{"min_val", 0.0}, {"max_val", 6.0}});
  int d = B.un("hardtanh", B.conv(e, B.weight({40, 1, 3, 3}, -0.5f, 0.5f), B.weight({40}), 1, 1, 40),
               {{"min_val", 0.0}, {"max_val", 6.0}});
  int p = B.conv(d, B.weight({16, 40, c.project_k, c.project_k}, 0.05f, 0.2f), B.weight({16}), c.project_stride,
                 c.project_k / 2);
  int y = c.project_stride == 1 ? B.bin("add", p, x) : p;
  if (c.second_user) B.out({y, B.reduce("mean", d, {2, 3}, true)});
  else B.out({y});
  return B.g;
}

TEST(LayoutFuseDepthwiseProject, WholeInvertedResidualBlockBecomesOneKernel) {
  struct Case {
    FullBlock b;
    int fused;
  };
  const Case cases[] = {{{}, 1}, {{3}, 0}, {{1, 2}, 0}, {{1, 1, true}, 0},
                        {{1, 1, false, layout::kMinDepthwiseProjectBytes}, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE("project_k=" + std::to_string(c.b.project_k) + " stride=" + std::to_string(c.b.project_stride) +
                 " second_user=" + std::to_string(c.b.second_user) + " min_bytes=" + std::to_string(c.b.min_bytes));
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    ecg::Graph g = full_block(B, c.b);
    ecg::Graph front = layout::fuse_expand_depthwise(fold(layout::propagate_blocked_layout(g, fixed_blocks(8))));
    ASSERT_EQ(count_op(front, "conv2d_nchwc_expand_dw"), 1);
    int fused = -1;
    ecg::Graph out = layout::fuse_depthwise_project(front, &fused, c.b.min_bytes);
    ecg::verify_graph(out);
    EXPECT_EQ(fused, c.fused);
    EXPECT_EQ(count_op(out, "conv2d_nchwc_expand_dw_project"), c.fused);
    EXPECT_EQ(count_op(out, "conv2d_nchwc_expand_dw"), 1 - c.fused);
    EXPECT_EQ(count_op(out, "conv2d_nchwc"), 1 - c.fused);
    for (const auto& n : out.nodes())
      if (n.op == "conv2d_nchwc_expand_dw_project") {
        EXPECT_EQ(n.inputs.size(), 7u);
        EXPECT_EQ(n.attr_ints("project_weight_shape"), (std::vector<int64_t>{16, 40, 1, 1}));
        EXPECT_EQ(n.attr_int("project_in_channels"), 40);
        EXPECT_EQ(n.attr_int("project_oc_bn"), 8);
        EXPECT_EQ(out.value(n.outputs[0]).shape, (std::vector<int64_t>{2, 2, 10, 11, 8}));
      }
    auto in = random_inputs(g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
  }
}

// MobileNet-V3's first block: stem conv (3 -> 16, 3x3 stride 2), hardswish, depthwise 3x3, relu,
// 1x1 projection, add of the stem's activated output. The whole block becomes one
// conv2d_nchwc_expand_dw_project whose kernel adds the stem rows itself (project_add_expand);
// refused where the add reads the stem's output before its activation, where that output has a
// third user, and under the size threshold.
struct SkipCase {
  bool stem_act = true, add_pre_act = false, third_user = false;
  int64_t min_bytes = 0;
};

ecg::Graph skip_block(GraphBuilder& B, const SkipCase& c) {
  int x = B.input({2, 3, 20, 22});
  int s = B.conv(x, B.weight({16, 3, 3, 3}, -0.5f, 0.5f), B.weight({16}), 2, 1);
  int e = c.stem_act ? B.un("hardswish", s) : s;
  int d = B.un("relu", B.conv(e, B.weight({16, 1, 3, 3}, -0.5f, 0.5f), B.weight({16}), 1, 1, 16));
  int p = B.conv(d, B.weight({16, 16, 1, 1}, -0.3f, 0.3f), B.weight({16}));
  int y = B.bin("add", p, c.add_pre_act ? s : e);
  if (c.third_user) B.out({y, B.reduce("mean", e, {2, 3}, true)});
  else B.out({y});
  return B.g;
}

TEST(LayoutFuseDepthwiseProject, BlockWithSkipFromTheFirstConvBecomesOneKernel) {
  struct Case {
    SkipCase c;
    int fused;
  };
  const Case cases[] = {{{}, 1}, {{false}, 1}, {{true, true}, 0}, {{true, false, true}, 0},
                        {{true, false, false, int64_t{1} << 30}, 0}};
  for (const Case& k : cases) {
    SCOPED_TRACE("stem_act=" + std::to_string(k.c.stem_act) + " add_pre_act=" + std::to_string(k.c.add_pre_act) +
                 " third_user=" + std::to_string(k.c.third_user) + " min_bytes=" + std::to_string(k.c.min_bytes));
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    ecg::Graph g = skip_block(B, k.c);
    ecg::Graph front = layout::fuse_expand_depthwise(fold(layout::propagate_blocked_layout(g, fixed_blocks(8))));
    ASSERT_EQ(count_op(front, "conv2d_nchwc_expand_dw"), 0) << "the stem's output has two users";
    int fused = -1;
    ecg::Graph out = layout::fuse_depthwise_project(front, &fused, layout::kMinDepthwiseProjectBytes, k.c.min_bytes);
    ecg::verify_graph(out);
    EXPECT_EQ(fused, k.fused);
    EXPECT_EQ(count_op(out, "conv2d_nchwc_expand_dw_project"), k.fused);
    EXPECT_EQ(count_op(out, "conv2d_nchwc"), 3 - 3 * k.fused);
    EXPECT_EQ(count_op(out, "add"), 1 - k.fused);
    for (const auto& n : out.nodes())
      if (n.op == "conv2d_nchwc_expand_dw_project") {
        EXPECT_EQ(n.attr_int("project_add_expand"), 1);
        EXPECT_EQ(n.attr_str("expand_act"), k.c.stem_act ? "hardswish" : "none");
        EXPECT_EQ(n.attr_str("dw_act"), "relu");
        EXPECT_EQ(n.attr_ints("expand_stride"), (std::vector<int64_t>{2, 2}));
        EXPECT_EQ(out.value(n.outputs[0]).shape, (std::vector<int64_t>{2, 2, 10, 11, 8}));
      }
    auto in = random_inputs(g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
  }
}

// A squeeze-excitation block after an expand + depthwise front (EfficientNet): the mean over H and
// W of the depthwise output becomes the fused kernel's second output; the depthwise output keeps
// its other user (the gate's multiply, folded into the projection's input scale). A mean over
// other dims, or without keepdim, stays a mean node.
ecg::Graph squeeze_excitation(GraphBuilder& B, std::vector<int64_t> dims, bool keepdim) {
  int x = B.input({2, 16, 9, 10});
  int e = B.un("silu", B.conv(x, B.weight({40, 16, 1, 1}, 0.05f, 0.2f), B.weight({40})));
  int d = B.un("silu", B.conv(e, B.weight({40, 1, 3, 3}, -0.5f, 0.5f), B.weight({40}), 1, 1, 40));
  int m = B.reduce("mean", d, dims, keepdim);
  if (!keepdim || dims.size() != 2) {
    B.out({B.conv(d, B.weight({8, 40, 1, 1}, 0.05f, 0.2f), -1), m});
    return B.g;
  }
  int s = B.un("sigmoid", B.conv(B.un("relu", B.conv(m, B.weight({8, 40, 1, 1}), B.weight({8}))),
                                 B.weight({40, 8, 1, 1}), B.weight({40})));
  B.out({B.conv(B.bin("mul", d, s), B.weight({24, 40, 1, 1}, 0.05f, 0.2f), -1)});
  return B.g;
}

TEST(LayoutFuseChannelMean, SqueezeOfTheDepthwiseOutputRunsInTheKernel) {
  struct Case {
    std::vector<int64_t> dims;
    bool keepdim;
    int fused;
  };
  for (const Case& c : {Case{{2, 3}, true, 1}, Case{{-1, -2}, true, 1}, Case{{2, 3}, false, 0}, Case{{1}, true, 0}}) {
    SCOPED_TRACE("dims=" + std::to_string(c.dims[0]) + " keepdim=" + std::to_string(c.keepdim));
    std::mt19937_64 rng(testing::test_seed());
    GraphBuilder B(rng);
    ecg::Graph g = squeeze_excitation(B, c.dims, c.keepdim);
    ecg::Graph blocked = fold(layout::propagate_blocked_layout(g, fixed_blocks(8)));
    blocked = layout::fold_input_scale(blocked);
    blocked = layout::fuse_expand_depthwise(blocked);
    ASSERT_EQ(count_op(blocked, "conv2d_nchwc_expand_dw"), 1);
    const int means_before = count_op(blocked, "mean");
    int fused = -1;
    ecg::Graph out = layout::fuse_channel_mean(blocked, &fused);
    ecg::verify_graph(out);
    EXPECT_EQ(fused, c.fused);
    EXPECT_EQ(count_op(out, "mean"), means_before - c.fused);
    for (const auto& n : out.nodes()) {
      if (n.op == "conv2d_nchwc_expand_dw") {
        EXPECT_EQ(n.outputs.size(), static_cast<size_t>(1 + c.fused));
      }
    }
    auto in = random_inputs(g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
  }
}

// A dense block's concatenation of a 64-wide-block tensor (a stem conv) and 32-wide-block ones
// (growth convs) runs in 32-wide blocks: the stem output is re-blocked once, nothing goes to NCHW.
// Convs go to AMX where the CPU has it: the eligible ones (any kernel and stride, >= 128 outputs,
// >= 256 output positions) read the repacked weight with amx = 1; a 1x1 conv with 64 outputs and
// a strided 3x3 conv onto 72 positions stay. Without AMX the pass leaves the graph alone.
TEST(LayoutUseAmxConvs, LargeConvsRunOnAmxWithTheSameValues) {
  std::mt19937_64 rng(testing::test_seed() + 3);
  GraphBuilder B(rng);
  int x = B.input({2, 64, 24, 24});
  // Taken: c1, c2 (3x3), c3, c5 (strided 1x1), c6 (strided 3x3); c4 has 64 outputs, c7 72 positions.
  int c1 = B.un("relu", B.conv(x, B.weight({128, 64, 1, 1}, -0.2f, 0.2f), B.weight({128}), 1, 0));
  int c2 = B.un("relu", B.conv(c1, B.weight({128, 128, 3, 3}, -0.05f, 0.05f), B.weight({128}), 1, 1));
  int c3 = B.conv(c2, B.weight({256, 128, 1, 1}, -0.2f, 0.2f), B.weight({256}), 1, 0);
  int c4 = B.conv(c3, B.weight({64, 256, 1, 1}, -0.2f, 0.2f), B.weight({64}), 1, 0);
  int c5 = B.conv(c3, B.weight({128, 256, 1, 1}, -0.2f, 0.2f), B.weight({128}), 2, 0);
  int c6 = B.conv(c2, B.weight({128, 128, 3, 3}, -0.05f, 0.05f), B.weight({128}), 2, 1);
  int c7 = B.conv(c5, B.weight({128, 128, 3, 3}, -0.05f, 0.05f), B.weight({128}), 2, 1);
  B.out({c4, c6, c7});
  const ecg::Graph g = B.g;
  const ecg::Graph blocked = fold(layout::propagate_blocked_layout(g, fixed_blocks(16)));
  layout::AmxChoiceStats st;
  const ecg::Graph out = layout::use_amx_convs(blocked, {}, &st);  // the shape rules alone
  ecg::verify_graph(out);
  const int expected = kernels::bf16x6_available() ? 5 : 0;
  EXPECT_EQ(st.taken, expected);
  EXPECT_EQ(st.declined, 0);
  EXPECT_EQ(count_op(out, "conv2d_nchwc_repack_bf16x6"), expected);
  int amx = 0;
  for (const auto& n : out.nodes())
    if (n.op == "conv2d_nchwc" && n.attr_int("amx", 0)) {
      ++amx;
      EXPECT_GE(n.attr_ints("weight_shape")[0], layout::kAmxConvMinOutChannels);
      EXPECT_EQ(out.value(n.inputs[1]).producer >= 0 ? out.node(out.value(n.inputs[1]).producer).op : "",
                "conv2d_nchwc_repack_bf16x6");
    }
  EXPECT_EQ(amx, expected);
  if (!expected) {
    EXPECT_EQ(out.nodes().size(), blocked.nodes().size());
    return;
  }
  auto in = random_inputs(g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
}

TEST(LayoutUseAmxConvs, TakesLayersWhoseSplitIsSharedByEnoughProducts) {
  auto conv = [](int64_t N, int64_t C, int64_t HW, int64_t K, int64_t RS, int64_t stride) {
    return kernels::Conv2dShape{N, C, HW, HW, K, RS, RS, stride, stride, RS / 2, RS / 2, 1, 1, 1};
  };
  EXPECT_TRUE(layout::amx_conv_pays_off(conv(1, 64, 16, 128, 1, 1)));     // 256 positions
  EXPECT_FALSE(layout::amx_conv_pays_off(conv(1, 64, 15, 128, 1, 1)));    // 225
  EXPECT_FALSE(layout::amx_conv_pays_off(conv(1, 64, 16, 64, 1, 1)));     // 64 outputs
  EXPECT_FALSE(layout::amx_conv_pays_off(conv(1, 16, 16, 128, 1, 1)));    // 16 inputs
  EXPECT_TRUE(layout::amx_conv_pays_off(conv(8, 128, 14, 128, 3, 2)));    // strided: 8 x 7 x 7 outputs
  EXPECT_FALSE(layout::amx_conv_pays_off(conv(1, 128, 14, 128, 3, 2)));   // 49
  EXPECT_TRUE(layout::amx_conv_pays_off(conv(1, 256, 14, 1024, 1, 1)));   // wide: 196 positions
  EXPECT_FALSE(layout::amx_conv_pays_off(conv(1, 256, 14, 512, 1, 1)));
  EXPECT_FALSE(layout::amx_conv_pays_off(conv(1, 512, 7, 2048, 1, 1)));   // wide, 49 positions
}

TEST(LayoutPropagate, ConcatOfMixedBlocksUsesTheNarrowest) {
  testing::IsaGuard isa(wide_block_isa());
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  int x = B.input({1, 8, 6, 6});
  int stem = B.conv(x, B.weight({64, 8, 3, 3}, 0.05f, 0.2f), -1, 1, 1);
  int g1 = B.conv(stem, B.weight({32, 64, 3, 3}, 0.05f, 0.2f), -1, 1, 1);
  int cat1 = B.node("cat", {stem, g1}, {1, 96, 6, 6}, {{"dim", int64_t{1}}});
  int g2 = B.conv(cat1, B.weight({32, 96, 1, 1}, 0.05f, 0.2f), -1);
  int cat2 = B.node("cat", {stem, g1, g2}, {1, 128, 6, 6}, {{"dim", int64_t{1}}});
  B.out({B.conv(cat2, B.weight({16, 128, 1, 1}, 0.05f, 0.2f), -1)});
  auto scheme = [](const ecg::Graph& g, const ecg::Node& n, int input_block) -> std::optional<ConvScheme> {
    const int64_t K = g.value(n.outputs[0]).shape[1];
    return ConvScheme{input_block ? input_block : 8, K == 64 ? 64 : K == 16 ? 16 : 32, 4, true};
  };
  LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(B.g, scheme, &st);
  ecg::verify_graph(out);
  EXPECT_EQ(count_op(out, "cat"), 2);
  EXPECT_EQ(st.to_blocked, 1);  // the graph input
  EXPECT_EQ(st.to_plain, 1);    // the graph output
  EXPECT_EQ(st.reblocked, 1);   // the stem's 64-blocks into 32-blocks, once for both cats
  for (const auto& n : out.nodes()) {
    if (n.op == "cat") {
      EXPECT_EQ(out.value(n.outputs[0]).shape.back(), 32);
    }
  }
  auto in = random_inputs(B.g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(B.g, run_graph(B.g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
}

TEST(LayoutPropagate, ResidualBlockComputesTheSameValues) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  ecg::Graph g = residual_block(B);
  ecg::Graph out = fold(layout::propagate_blocked_layout(g, fixed_blocks(16)));
  EXPECT_EQ(count_op(out, "conv2d_nchwc_pack_weight"), 0) << "packing must fold at compile time";
  auto in = random_inputs(g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
}

}  // namespace
}  // namespace dnnfusion

namespace dnnfusion {
namespace {

// conv -> max-pool -> conv -> avg-pool -> conv: the pools run blocked, so only the graph input
// and output are transformed.
TEST(LayoutPropagate, PoolsStayBlockedBetweenConvs) {
  std::mt19937_64 rng(testing::test_seed());
  rewrite_test::GraphBuilder B(rng);
  int x = B.input({1, 8, 17, 17});
  int c1 = B.un("relu", B.conv(x, B.weight({16, 8, 3, 3}, 0.05f, 0.2f), B.weight({16}), 1, 1));
  int p1 = B.maxpool(c1, 3, 2);
  int c2 = B.conv(p1, B.weight({16, 16, 3, 3}, 0.05f, 0.2f), B.weight({16}), 1, 1);
  int p2 = B.avgpool(c2, 2, 2);
  int c3 = B.conv(p2, B.weight({16, 16, 1, 1}, 0.05f, 0.2f), B.weight({16}), 1, 0);
  B.out({c3});
  ecg::Graph g = B.g;
  layout::LayoutStats st;
  ecg::Graph out = layout::propagate_blocked_layout(g, fixed_blocks(8), &st);
  ecg::verify_graph(out);
  EXPECT_EQ(rewrite_test::count_op(out, "max_pool2d_nchwc"), 1);
  EXPECT_EQ(rewrite_test::count_op(out, "avg_pool2d_nchwc"), 1);
  EXPECT_EQ(st.to_blocked, 1);
  EXPECT_EQ(st.to_plain, 1);
  EXPECT_EQ(st.reblocked, 0);
  auto in = rewrite_test::random_inputs(g, rng, -1.f, 1.f);
  ecg::Graph folded = rewrite_test::fold(out);
  EXPECT_TRUE(rewrite_test::outputs_close(g, rewrite_test::run_graph(g, in), rewrite_test::run_graph(folded, in), 1e-5))
      << testing::seed_note();
}

}  // namespace
}  // namespace dnnfusion
