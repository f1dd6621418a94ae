// ECG graph building, op registry classification, and the verifier's invariants.
#include <gtest/gtest.h>

#include "target/target.h"
#include "common/error.h"
#include "ecg/graph.h"
#include "ecg/op_registry.h"
#include "ecg/verifier.h"
#include "runtime/op_kernels.h"

using namespace dnnfusion;
using namespace dnnfusion::ecg;

namespace {
std::vector<float> w(64 * 3 * 3 * 3, 0.5f);

Graph conv_relu_graph() {
  Graph g;
  int x = g.add_input({1, 3, 8, 8}, DType::Float32, "x");
  int wt = g.add_weight({64, 3, 3, 3}, DType::Float32, w.data(), "w");
  int c = g.add_node("convolution", {x, wt, -1}, {{{1, 64, 6, 6}, DType::Float32}},
                     {{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{0, 0}}, {"groups", int64_t{1}}});
  int r = g.add_node("relu", {g.node(c).outputs[0]}, {{{1, 64, 6, 6}, DType::Float32}});
  g.set_outputs({g.node(r).outputs[0]});
  return g;
}
}  // namespace

TEST(Ecg, BuildsValuesNodesAndUseLists) {
  Graph g = conv_relu_graph();
  EXPECT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.value(0).kind, ValueKind::Input);
  EXPECT_EQ(g.value(1).kind, ValueKind::Weight);
  EXPECT_TRUE(g.value(1).is_compile_time());
  const Value& conv_out = g.value(g.node(0).outputs[0]);
  EXPECT_EQ(conv_out.producer, 0);
  ASSERT_EQ(conv_out.users.size(), 1u);
  EXPECT_EQ(conv_out.users[0], 1);
  EXPECT_EQ(conv_out.nbytes(), 64 * 36 * 4);
  EXPECT_NO_THROW(verify_graph(g));
  EXPECT_NE(g.dump().find("convolution"), std::string::npos);
  EXPECT_EQ(g.describe_node(0), "convolution(1x3x8x8 float32, 64x3x3x3 float32 [weight], None) -> 1x64x6x6 float32");
}

TEST(Ecg, UnknownOpIsRejectedWithItsName) {
  Graph g;
  int x = g.add_input({2}, DType::Float32);
  try {
    g.add_node("frobnicate", {x}, {{{2}, DType::Float32}}, {}, "aten.frobnicate.default");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("frobnicate"), std::string::npos);
  }
}

TEST(Ecg, AttributeAccessorsConvertAndComplain) {
  Graph g;
  int x = g.add_input({2, 3}, DType::Float32);
  int n = g.add_node("permute", {x}, {{{3, 2}, DType::Float32}}, {{"dims", std::vector<int64_t>{1, 0}}, {"k", int64_t{3}}});
  const Node& node = g.node(n);
  EXPECT_EQ(node.attr_ints("dims"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(node.attr_ints("k"), (std::vector<int64_t>{3}));
  EXPECT_DOUBLE_EQ(node.attr_float("k"), 3.0);
  EXPECT_EQ(node.attr_int("missing", 7), 7);
  EXPECT_THROW(node.attr_int("missing"), Error);
  EXPECT_THROW(node.attr_str("dims"), Error);
}

TEST(OpRegistry, MappingTypesFollowDnnFusionTable2) {
  EXPECT_EQ(find_op("relu")->mapping, MappingType::OneToOne);
  EXPECT_EQ(find_op("add")->mapping, MappingType::OneToOne);
  EXPECT_EQ(find_op("_native_batch_norm_legit_no_training")->mapping, MappingType::OneToOne);
  EXPECT_EQ(find_op("cat")->mapping, MappingType::OneToOne);
  EXPECT_EQ(find_op("expand")->mapping, MappingType::OneToMany);
  EXPECT_EQ(find_op("embedding")->mapping, MappingType::OneToMany);
  EXPECT_EQ(find_op("convolution")->mapping, MappingType::ManyToMany);
  EXPECT_EQ(find_op("addmm")->mapping, MappingType::ManyToMany);
  EXPECT_EQ(find_op("_softmax")->mapping, MappingType::ManyToMany);
  EXPECT_EQ(find_op("view")->mapping, MappingType::Reorganize);
  EXPECT_EQ(find_op("unsqueeze")->mapping, MappingType::Reorganize);
  EXPECT_EQ(find_op("permute")->mapping, MappingType::Shuffle);
  EXPECT_EQ(find_op("transpose")->mapping, MappingType::Shuffle);
  EXPECT_EQ(find_op("no_such_op"), nullptr);
}

TEST(OpRegistry, TvmPatternKindsAndProperties) {
  EXPECT_EQ(find_op("relu")->pattern, PatternKind::ElemWise);
  EXPECT_EQ(find_op("add")->pattern, PatternKind::Broadcast);
  EXPECT_EQ(find_op("view")->pattern, PatternKind::Injective);
  EXPECT_EQ(find_op("sum")->pattern, PatternKind::CommReduce);
  EXPECT_EQ(find_op("convolution")->pattern, PatternKind::OutEWiseFusable);
  EXPECT_EQ(find_op("_softmax")->pattern, PatternKind::Opaque);
  EXPECT_LT(PatternKind::ElemWise, PatternKind::Broadcast);
  EXPECT_LT(PatternKind::CommReduce, PatternKind::OutEWiseFusable);
  EXPECT_TRUE(find_op("add")->props.associative && find_op("add")->props.commutative);
  EXPECT_TRUE(find_op("mul")->props.associative);
  EXPECT_FALSE(find_op("sub")->props.commutative);
  EXPECT_FALSE(find_op("convolution")->ir_removable);
  EXPECT_TRUE(find_op("relu")->ir_removable);
}

TEST(OpRegistry, EveryRegisteredOpHasACpuKernelAndViceVersa) {
  // A device target's own fused op is the one kind of registry op the cpu target need not run.
  for (const auto& op : all_ops()) {
    if (op.name == "sparse_conv2d") {
      EXPECT_NE(target::registry().get("cuda").find_kernel(op.name), nullptr);
      continue;
    }
    EXPECT_NE(target::registry().get("cpu").find_kernel(op.name), nullptr) << op.name << " has no CPU kernel";
  }
  for (const auto& name : target::registry().get("cpu").kernel_ops()) EXPECT_NE(find_op(name), nullptr) << name << " is not in the registry";
}

TEST(OpRegistry, FlopsAndIrs) {
  Graph g = conv_relu_graph();
  EXPECT_EQ(node_flops(g, g.node(0)), 2LL * 64 * 36 * 27);
  EXPECT_EQ(node_flops(g, g.node(1)), 64LL * 36);
  EXPECT_EQ(node_irs_bytes(g, g.node(0)), 64LL * 36 * 4);
  Graph m;
  int a = m.add_input({4, 8}, DType::Float32), b = m.add_input({8, 5}, DType::Float32);
  int n = m.add_node("mm", {a, b}, {{{4, 5}, DType::Float32}});
  EXPECT_EQ(node_flops(m, m.node(n)), 2LL * 4 * 5 * 8);
}

TEST(Verifier, AcceptsWellFormedAndRejectsBrokenGraphs) {
  Graph good = conv_relu_graph();
  EXPECT_NO_THROW(verify_graph(good));

  {  // I1: a node reading a value defined later
    Graph g = conv_relu_graph();
    g.node(0).inputs[0] = g.node(1).outputs[0];
    EXPECT_THROW(verify_graph(g), Error);
  }
  {  // I5: use list out of sync
    Graph g = conv_relu_graph();
    g.value(0).users.push_back(1);
    EXPECT_THROW(verify_graph(g), Error);
  }
  {  // I6: the same value returned twice
    Graph g = conv_relu_graph();
    int out = g.outputs()[0];
    g.set_outputs({out, out});
    EXPECT_THROW(verify_graph(g), Error);
  }
  {  // I2: weight without data
    Graph g = conv_relu_graph();
    g.value(1).data = nullptr;
    EXPECT_THROW(verify_graph(g), Error);
  }
  {  // I3: an output that does not point back to its producer
    Graph g = conv_relu_graph();
    g.value(g.node(1).outputs[0]).producer = 0;
    EXPECT_THROW(verify_graph(g), Error);
  }
  {  // wrong number of outputs for a fixed-arity op
    Graph g;
    int x = g.add_input({1, 4}, DType::Float32);
    g.add_node("native_layer_norm", {x, -1, -1}, {{{1, 4}, DType::Float32}}, {{"normalized_shape", std::vector<int64_t>{4}}, {"eps", 1e-5}});
    EXPECT_THROW(verify_graph(g), Error);
  }
}
