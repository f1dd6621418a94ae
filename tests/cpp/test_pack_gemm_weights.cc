// pack_gemm_weights (csrc/target/cpu/layout): which GEMMs get a compile-time packed weight (IR in / IR out),
// that the packing folds away, and that the rewritten graph computes the same values through the
// runtime alone and through the whole pipeline in every fusion mode (where a GEMM with an
// element-wise tail runs the generated template reading the packed panels).
#include <gtest/gtest.h>

#include "ecg/verifier.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "target/cpu/layout/pack_gemm_weights.h"
#include "pipeline.h"
#include "rewrite_test_util.h"

namespace dnnfusion {
namespace {

using rewrite_test::count_op;
using rewrite_test::fold;
using rewrite_test::GraphBuilder;
using rewrite_test::outputs_close;
using rewrite_test::random_inputs;
using rewrite_test::run_graph;

// Linear layers (constant weights) next to GEMMs the pass must leave alone.
ecg::Graph linear_layers(GraphBuilder& B) {
  int x = B.input({37, 48});
  int rt = B.input({48, 5});                                             // B computed at run time
  int h = B.un("relu", B.addmm(B.weight({70}), x, B.weight({48, 70}, -0.2f, 0.2f)));  // packed
  int y = B.mm(h, B.weight({70, 33}, -0.2f, 0.2f));                      // packed
  int z = B.node("addmm", {B.weight({1, 33}), h, B.weight({70, 33}, -0.2f, 0.2f)}, {37, 33},
                 {{"beta", 1.0}, {"alpha", 0.5}});                        // packed (alpha kept)
  int s = B.node("addmm", {B.weight({37, 33}), h, B.weight({70, 33}, -0.2f, 0.2f)}, {37, 33},
                 {{"beta", 0.5}, {"alpha", 1.0}});                        // beta 0.5: stays
  int r = B.mm(x, rt);                                                    // runtime B: stays
  B.out({B.bin("add", B.bin("add", y, z), s), r});
  return B.g;
}

TEST(PackGemmWeights, ConstantWeightGemmsBecomePackedAndTheRestStay) {
  std::mt19937_64 rng(testing::test_seed());
  GraphBuilder B(rng);
  ecg::Graph g = linear_layers(B);
  int n = 0;
  ecg::Graph out = layout::pack_gemm_weights(g, {}, &n);
  ecg::verify_graph(out);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(count_op(out, "mm_packed"), 3);
  EXPECT_EQ(count_op(out, "gemm_pack_b"), 3);
  EXPECT_EQ(count_op(out, "addmm"), 1);
  EXPECT_EQ(count_op(out, "mm"), 1);
  for (const auto& node : out.nodes()) {
    if (node.op != "mm_packed") continue;
    EXPECT_EQ(node.attr_int("nr"), kernels::sgemm_panel_width());
    const int64_t K = out.value(node.inputs[0]).shape[1];
    EXPECT_EQ(out.value(node.inputs[1]).numel(),
              kernels::sgemm_packed_b_floats(K, node.attr_int("n"), kernels::sgemm_panel_width()));
  }
  // Nothing to pack: the graph comes back as it was.
  GraphBuilder B2(rng);
  int x = B2.input({4, 6});
  B2.out({B2.mm(x, B2.input({6, 3}))});
  int none = -1;
  ecg::Graph same = layout::pack_gemm_weights(B2.g, {}, &none);
  EXPECT_EQ(none, 0);
  EXPECT_EQ(count_op(same, "mm"), 1);
}

TEST(PackGemmWeights, PackingFoldsAndValuesMatch) {
  std::mt19937_64 rng(testing::test_seed() + 1);
  GraphBuilder B(rng);
  ecg::Graph g = linear_layers(B);
  ecg::Graph out = fold(layout::pack_gemm_weights(g));
  EXPECT_EQ(count_op(out, "gemm_pack_b"), 0) << "packing must fold at compile time";
  EXPECT_EQ(count_op(out, "mm_packed"), 3);
  auto in = random_inputs(g, rng, -1.f, 1.f);
  EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(out, in), 1e-5)) << testing::seed_note();
}

// Tall GEMMs (>= kBf16x6MinRows rows) of three shapes, one of them twice: which take the bf16x6
// packing under each AMX mode. Measure follows the verdict the timing gave each shape (one
// verdict per shape, so both layers of the repeated shape agree); without AMX nothing takes it.
TEST(PackGemmWeights, AmxModeDecidesWhichTallGemmsTakeTheBf16x6Packing) {
  std::mt19937_64 rng(testing::test_seed() + 3);
  GraphBuilder B(rng);
  int x = B.input({96, 64});
  int h1 = B.un("relu", B.addmm(B.weight({128}), x, B.weight({64, 128}, -0.2f, 0.2f)));
  int h2 = B.un("relu", B.addmm(B.weight({128}), x, B.weight({64, 128}, -0.2f, 0.2f)));
  int y = B.mm(B.bin("add", h1, h2), B.weight({128, 40}, -0.2f, 0.2f));
  int z = B.mm(B.input({8, 64}), B.weight({64, 40}, -0.2f, 0.2f));  // 8 rows: never AMX
  B.out({y, z});
  const ecg::Graph g = B.g;
  const bool amx = kernels::bf16x6_available();
  kernels::SerialParallel serial;
  auto taken = [](const ecg::Graph& out) {
    int n = 0;
    for (const auto& node : out.nodes()) n += node.op == "mm_packed" && node.has_attr("packing") && node.attr_str("packing") == "bf16x6";
    return n;
  };
  for (CompileOptions::Amx mode : {CompileOptions::Amx::Rule, CompileOptions::Amx::Off, CompileOptions::Amx::Measure}) {
    SCOPED_TRACE(amx_mode_name(mode));
    int packed = 0;
    layout::AmxChoiceStats st;
    const ecg::Graph out = layout::pack_gemm_weights(g, {mode, &serial}, &packed, &st);
    ecg::verify_graph(out);
    EXPECT_EQ(packed, 4);
    EXPECT_EQ(st.taken, taken(out));
    if (!amx || mode == CompileOptions::Amx::Off) {
      EXPECT_EQ(st.taken + st.declined, 0);
      continue;
    }
    if (mode == CompileOptions::Amx::Rule) {
      EXPECT_EQ(st.taken, 3);
      EXPECT_EQ(st.declined, 0);
      continue;
    }
    EXPECT_EQ(st.taken + st.declined, 3);
    EXPECT_LE(st.timed, 2);  // two distinct tall shapes (this process may have timed them already)
    const bool first = layout::measure_amx_gemm(96, 64, 128, serial).amx;
    const bool second = layout::measure_amx_gemm(96, 128, 40, serial).amx;
    EXPECT_EQ(st.taken, 2 * first + second);
    auto in = random_inputs(g, rng, -1.f, 1.f);
    EXPECT_TRUE(outputs_close(g, run_graph(g, in), run_graph(fold(out), in), 1e-5)) << testing::seed_note();
  }
}

TEST(PackGemmWeights, WholePipelineMatchesInEveryFusionMode) {
  std::mt19937_64 rng(testing::test_seed() + 2);
  GraphBuilder B(rng);
  ecg::Graph g = linear_layers(B);
  auto in = random_inputs(g, rng, -1.f, 1.f);
  const auto want = run_graph(g, in);
  for (fusion::Mode mode : {fusion::Mode::None, fusion::Mode::Tvm, fusion::Mode::DnnFusion}) {
    SCOPED_TRACE(fusion::mode_name(mode));
    CompileOptions opts;
    opts.threads = 2;
    opts.fusion = mode;
    opts.profile = false;
    opts.tuning_db = "";
    Compiled c = compile_graph(g, opts);
    // Rewriting may first merge y + z into one GEMM (mm(X,W1) + mm(X,W2) -> mm(X, W1+W2)).
    EXPECT_GE(c.stats.target_counters.at("gemms_packed"), 2);
    EXPECT_EQ(count_op(c.exe->graph(), "mm_packed"), c.stats.target_counters.at("gemms_packed"));
    if (mode != fusion::Mode::None) {  // relu(addmm) runs as the template with the relu inlined
      bool templated = false;
      for (const auto& b : c.blocks)
        for (const auto& st : b.steps) templated |= st == "gemm template+inlined epilogue";
      EXPECT_TRUE(templated);
    }
    rewrite_test::Buffers got;
    for (int o : c.exe->graph().outputs()) got.emplace_back(static_cast<size_t>(c.exe->graph().value(o).nbytes()));
    std::vector<const void*> ins;
    for (const auto& b : in) ins.push_back(b.data());
    std::vector<void*> outs;
    for (auto& b : got) outs.push_back(b.data());
    c.exe->run(ins, outs);
    EXPECT_TRUE(outputs_close(g, want, got, 1e-5)) << testing::seed_note();
  }
}

}  // namespace
}  // namespace dnnfusion
