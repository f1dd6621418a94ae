// Cutting a region out of a whole-model ECG (ecg/extract_region): IR in, IR out, and the cut
// region computes what the same nodes compute in the whole graph.
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "ecg/extract_region.h"
#include "ecg/verifier.h"
#include "runtime/executor.h"

using namespace dnnfusion;
using namespace dnnfusion::ecg;

namespace {
// x -> conv(w) -> relu -> sigmoid -> add(scale const) ; the conv's bias is absent.
struct Whole {
  std::vector<float> w = std::vector<float>(4 * 3 * 3 * 3);
  Graph g;
  int x = -1, wt = -1, c = -1, conv = -1, relu = -1, sig = -1, add = -1;
  Whole() {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (auto& v : w) v = nd(rng);
    x = g.add_input({1, 3, 6, 6}, DType::Float32, "x");
    wt = g.add_weight({4, 3, 3, 3}, DType::Float32, w.data(), "w");
    const float half = 0.5f;
    c = g.add_constant({}, DType::Float32, &half, "half");
    conv = g.add_node("convolution", {x, wt, -1}, {{{1, 4, 4, 4}, DType::Float32}},
                      {{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{0, 0}},
                       {"dilation", std::vector<int64_t>{1, 1}}, {"transposed", int64_t{0}},
                       {"output_padding", std::vector<int64_t>{0, 0}}, {"groups", int64_t{1}}},
                      "aten.convolution.default");
    relu = g.add_node("relu", {out(conv)}, {{{1, 4, 4, 4}, DType::Float32}});
    sig = g.add_node("sigmoid", {out(relu)}, {{{1, 4, 4, 4}, DType::Float32}});
    add = g.add_node("add", {out(sig), c}, {{{1, 4, 4, 4}, DType::Float32}}, {{"alpha", int64_t{1}}});
  }
  int out(int node) const { return g.node(node).outputs[0]; }
};

std::vector<float> run(const Graph& g, const std::vector<std::vector<float>>& ins, int64_t out_numel) {
  runtime::Executable exe(g, runtime::ExecOptions{1, nullptr});
  std::vector<const void*> in_ptrs;
  for (const auto& v : ins) in_ptrs.push_back(v.data());
  std::vector<float> out(static_cast<size_t>(out_numel));
  std::vector<void*> out_ptrs{out.data()};
  exe.run(in_ptrs, out_ptrs);
  return out;
}
}  // namespace

TEST(ExtractRegion, BoundaryValuesBecomeInputsWeightsStayWeights) {
  Whole w;
  // The region conv -> relu, with x entering from outside.
  Graph r = extract_region(w.g, {w.conv, w.relu}, {w.x, w.wt}, {w.out(w.relu)});
  EXPECT_NO_THROW(verify_graph(r));
  ASSERT_EQ(r.nodes().size(), 2u);
  EXPECT_EQ(r.node(0).op, "convolution");
  EXPECT_EQ(r.node(0).origin, "aten.convolution.default");
  EXPECT_EQ(r.node(0).inputs[2], -1);  // absent bias stays absent
  ASSERT_EQ(r.inputs().size(), 1u);    // the weight is not an input
  EXPECT_EQ(r.value(r.inputs()[0]).name, "x");
  const Value& wv = r.value(r.node(0).inputs[1]);
  EXPECT_EQ(wv.kind, ValueKind::Weight);
  EXPECT_EQ(wv.data, w.w.data());  // borrowed, not copied
  ASSERT_EQ(r.outputs().size(), 1u);
  EXPECT_EQ(r.value(r.outputs()[0]).producer, 1);
}

TEST(ExtractRegion, ActivationProducedOutsideEntersAsAnInputAndConstantsAreCopied) {
  Whole w;
  // sigmoid -> add, fed by relu's output computed elsewhere; the scalar constant comes along.
  Graph r = extract_region(w.g, {w.sig, w.add}, {w.out(w.relu)}, {w.out(w.add)});
  EXPECT_NO_THROW(verify_graph(r));
  ASSERT_EQ(r.inputs().size(), 1u);
  EXPECT_EQ(r.value(r.inputs()[0]).shape, (std::vector<int64_t>{1, 4, 4, 4}));
  const Value& cv = r.value(r.node(1).inputs[1]);
  EXPECT_EQ(cv.kind, ValueKind::Constant);
  EXPECT_NE(cv.data, w.g.value(w.c).data);
  EXPECT_EQ(*static_cast<const float*>(cv.data), 0.5f);
}

TEST(ExtractRegion, TwoRegionsComputeWhatTheWholeChainComputes) {
  Whole w;
  std::vector<float> x(3 * 36);
  std::mt19937 rng(11);  // replayable
  std::uniform_real_distribution<float> ud(-1, 1);
  for (auto& v : x) v = ud(rng);
  Graph whole = extract_region(w.g, {w.conv, w.relu, w.sig, w.add}, {w.x, w.wt}, {w.out(w.add)});
  Graph first = extract_region(w.g, {w.conv, w.relu}, {w.x, w.wt}, {w.out(w.relu)});
  Graph second = extract_region(w.g, {w.sig, w.add}, {w.out(w.relu)}, {w.out(w.add)});
  const auto expect = run(whole, {x}, 64);
  const auto mid = run(first, {x}, 64);
  const auto got = run(second, {mid}, 64);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], expect[i]) << i;
}

TEST(ExtractRegion, RefusesARegionThatIsNotClosed) {
  Whole w;
  // relu reads the conv's output, which is neither in the region nor listed as an input.
  EXPECT_THROW(extract_region(w.g, {w.relu}, {w.x}, {w.out(w.relu)}), Error);
  // An output nobody in the region produces.
  EXPECT_THROW(extract_region(w.g, {w.relu}, {w.out(w.conv)}, {w.out(w.sig)}), Error);
  // Users before producers.
  EXPECT_THROW(extract_region(w.g, {w.relu, w.conv}, {w.x, w.wt}, {w.out(w.relu)}), Error);
  // The same input twice.
  EXPECT_THROW(extract_region(w.g, {w.conv}, {w.x, w.x, w.wt}, {w.out(w.conv)}), Error);
}
