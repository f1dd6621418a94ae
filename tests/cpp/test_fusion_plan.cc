// Fusion planners on hand-built ECGs: Table 3 and its use by the DNNFusion planner (every cell,
// yellow answered both ways and unanswered), the constraint checks (cycles, Many-to-Many limit,
// unfusible nodes, block size and input budgets), TVM's dominator-tree fusion on its classic
// patterns, mode "none", the plan verifier, and a randomized check of all planners' postconditions.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.h"
#include "ecg/graph.h"
#include "ecg/op_registry.h"
#include "fusion/fusion_plan.h"
#include "fusion/plan_util.h"
#include "kernel_test_util.h"

using namespace dnnfusion;
using namespace dnnfusion::fusion;
using ecg::Graph;
using ecg::MappingType;

namespace {

// Builds graphs op by op; every helper returns the new node's output value (output 0).
struct Builder {
  Graph g;
  std::vector<std::vector<float>> weights;

  int input(std::vector<int64_t> shape) { return g.add_input(shape, DType::Float32); }
  int weight(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    weights.emplace_back(static_cast<size_t>(n), 0.5f);
    return g.add_weight(shape, DType::Float32, weights.back().data());
  }
  int op(const std::string& name, std::vector<int> inputs, std::vector<int64_t> shape, int n_outputs = 1) {
    std::vector<ecg::OutputSpec> outs(static_cast<size_t>(n_outputs), ecg::OutputSpec{shape, DType::Float32});
    for (int i = 1; i < n_outputs; ++i) outs[static_cast<size_t>(i)].shape = {0};
    int n = g.add_node(name, inputs, outs);
    return g.node(n).outputs[0];
  }
  int node(int value) const { return g.value(value).producer; }
};

bool same_block(const Plan& p, int a, int b) { return p.block_of[static_cast<size_t>(a)] == p.block_of[static_cast<size_t>(b)]; }
const Block& block_of(const Plan& p, int n) { return p.blocks[static_cast<size_t>(p.block_of[static_cast<size_t>(n)])]; }

bool log_has(const Plan& p, const std::string& needle) {
  for (const auto& l : p.log)
    if (l.find(needle) != std::string::npos) return true;
  return false;
}
std::string log_text(const Plan& p) {
  std::string s;
  for (const auto& l : p.log) s += l + "\n";
  return s;
}

const std::vector<int64_t> kS = {1, 16, 8, 8};

// One op of each mapping type (the planners only read the registry's classification).
const char* op_of(MappingType t) {
  switch (t) {
    case MappingType::OneToOne: return "relu";
    case MappingType::OneToMany: return "expand";
    case MappingType::ManyToMany: return "sum";
    case MappingType::Reorganize: return "view";
    case MappingType::Shuffle: return "permute";
  }
  return "?";
}

const MappingType kTypes[] = {MappingType::OneToOne, MappingType::OneToMany, MappingType::ManyToMany,
                              MappingType::Reorganize, MappingType::Shuffle};

}  // namespace

// ---------------- Table 3 and modes ----------------

TEST(FusionPlan, Table3MatchesTheDesignTable) {
  using M = MappingType;
  const Cell G = Cell::Green, Y = Cell::Yellow, R = Cell::Red;
  struct Row {
    M first;
    Cell cells[5];
    M results[5];  // results of red cells are not part of the paper's table: not checked
  };
  const Row rows[] = {
      {M::OneToOne, {G, G, G, G, G}, {M::OneToOne, M::OneToMany, M::ManyToMany, M::Reorganize, M::Shuffle}},
      {M::OneToMany, {G, Y, R, Y, Y}, {M::OneToMany, M::OneToMany, M::ManyToMany, M::OneToMany, M::OneToMany}},
      {M::ManyToMany, {G, Y, R, Y, Y}, {M::ManyToMany, M::ManyToMany, M::ManyToMany, M::ManyToMany, M::ManyToMany}},
      {M::Reorganize, {G, Y, Y, G, G}, {M::Reorganize, M::OneToMany, M::ManyToMany, M::Reorganize, M::Reorganize}},
      {M::Shuffle, {G, Y, Y, G, G}, {M::Shuffle, M::OneToMany, M::ManyToMany, M::Reorganize, M::Shuffle}},
  };
  for (const Row& r : rows) {
    for (int c = 0; c < 5; ++c) {
      FuseRule rule = table3(r.first, kTypes[c]);
      SCOPED_TRACE(std::string(ecg::mapping_type_name(r.first)) + " then " + ecg::mapping_type_name(kTypes[c]));
      EXPECT_EQ(rule.cell, r.cells[c]);
      if (rule.cell != Cell::Red) {
        EXPECT_EQ(rule.result, r.results[c]);
      }
    }
  }
  EXPECT_STREQ(cell_name(Cell::Yellow), "yellow");
}

TEST(FusionPlan, ModeNamesRoundTripAndUnknownNamesAreListed) {
  for (Mode m : {Mode::None, Mode::Tvm, Mode::DnnFusion}) EXPECT_EQ(parse_mode(mode_name(m)), m);
  try {
    parse_mode("greedy");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("greedy"), std::string::npos);
    EXPECT_NE(msg.find("none"), std::string::npos);
    EXPECT_NE(msg.find("tvm"), std::string::npos);
    EXPECT_NE(msg.find("dnnfusion"), std::string::npos);
  }
}

TEST(FusionPlan, NoneModeGivesOneBlockPerNode) {
  Builder b;
  int x = b.input(kS);
  int c = b.op("convolution", {x, b.weight({16, 16, 1, 1}), -1}, kS);
  int r = b.op("relu", {c}, kS);
  int a = b.op("add", {r, x}, kS);
  b.g.set_outputs({a});
  Plan p = plan_fusion(Mode::None, b.g, {});
  ASSERT_EQ(p.blocks.size(), 3u);
  for (int n = 0; n < 3; ++n) {
    EXPECT_EQ(p.block_of[static_cast<size_t>(n)], n);
    EXPECT_EQ(p.blocks[static_cast<size_t>(n)].nodes, std::vector<int>{n});
  }
  EXPECT_EQ(p.blocks[0].dominant, 0);
  EXPECT_EQ(p.blocks[0].type, MappingType::ManyToMany);
  EXPECT_EQ(p.blocks[1].dominant, -1);
  EXPECT_EQ(p.blocks[1].type, MappingType::OneToOne);
}

TEST(FusionPlan, VerifyPlanCatchesBrokenPlans) {
  Builder b;
  int x = b.input(kS);
  int c1 = b.op("convolution", {x, b.weight({16, 16, 1, 1}), -1}, kS);
  int r = b.op("relu", {c1}, kS);
  int c2 = b.op("convolution", {r, b.weight({16, 16, 1, 1}), -1}, kS);
  b.g.set_outputs({c2});
  PlanHooks hooks;
  const Plan good = plan_none(b.g);
  EXPECT_NO_THROW(verify_plan(b.g, good, hooks));

  auto expect_error = [&](const Plan& p, const std::string& needle) {
    try {
      verify_plan(b.g, p, hooks);
      ADD_FAILURE() << "expected verify_plan to reject the plan (" << needle << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Plan p = good;
  p.blocks[1].nodes.push_back(0);  // node 0 twice
  expect_error(p, "ascending");
  p = good;
  p.blocks.pop_back();
  p.block_of.back() = 0;
  expect_error(p, "in no block");
  p = good;
  std::swap(p.blocks[0], p.blocks[2]);  // reversed order: not topological
  std::swap(p.block_of[0], p.block_of[2]);
  expect_error(p, "topological");
  p = good;  // conv, relu, conv in one block: two Many-to-Many nodes
  p.blocks = {Block{{0, 1, 2}, MappingType::ManyToMany, 0}};
  p.block_of = {0, 0, 0};
  expect_error(p, "two Many-to-Many");
  p = good;
  p.blocks[1].dominant = 1;  // relu is no dominant
  expect_error(p, "dominant");
  p = good;
  p.block_of.pop_back();
  expect_error(p, "block_of");
  // A node the code generator rejects must be alone.
  p = good;
  p.blocks = {Block{{0, 1}, MappingType::ManyToMany, 0}, Block{{2}, MappingType::ManyToMany, 2}};
  p.block_of = {0, 0, 1};
  EXPECT_NO_THROW(verify_plan(b.g, p, hooks));
  PlanHooks strict;
  strict.fusible = [&](const Graph&, int n) { return n != 1; };
  try {
    verify_plan(b.g, p, strict);
    ADD_FAILURE() << "expected a rejection";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not fusible"), std::string::npos) << e.what();
  }
}

// ---------------- DNNFusion planner ----------------

// seed (relu, smallest IRS) -> A -> B: the seed's row of Table 3 is all green and hands over A's
// type, so whether B joins is decided by exactly the cell (type A, type B).
TEST(DnnFusion, EveryTable3CellDecidesAsItsColourSays) {
  for (MappingType ta : kTypes) {
    for (MappingType tb : kTypes) {
      const FuseRule rule = table3(ta, tb);
      SCOPED_TRACE(std::string(ecg::mapping_type_name(ta)) + " then " + ecg::mapping_type_name(tb) + " (" +
                   cell_name(rule.cell) + ")");
      for (int answer : {-1, 0, 1}) {  // no profiler, profiler says slower, profiler says faster
        Builder b;
        int x = b.input({4});
        int s = b.op("relu", {x}, {4});
        int a = b.op(op_of(ta), {s}, kS);
        int o = b.op(op_of(tb), {a}, kS);
        b.g.set_outputs({o});
        const int ns = b.node(s), na = b.node(a), nb = b.node(o);
        PlanHooks hooks;
        int asked = 0;
        if (answer >= 0) {
          hooks.yellow_is_faster = [&](const Graph&, const std::vector<int>& block, int cand) {
            ++asked;
            EXPECT_EQ(block, (std::vector<int>{ns, na}));
            EXPECT_EQ(cand, nb);
            return answer == 1;
          };
        }
        Plan p = plan_fusion(Mode::DnnFusion, b.g, hooks);
        ASSERT_TRUE(same_block(p, ns, na));
        const bool expect_fused = rule.cell == Cell::Green || (rule.cell == Cell::Yellow && answer == 1);
        EXPECT_EQ(same_block(p, na, nb), expect_fused) << log_text(p);
        EXPECT_EQ(asked, rule.cell == Cell::Yellow && answer >= 0 ? 1 : 0);
        if (expect_fused) {
          EXPECT_EQ(p.blocks.size(), 1u);
          EXPECT_EQ(block_of(p, nb).type, rule.result);
        } else {
          EXPECT_EQ(block_of(p, nb).nodes, std::vector<int>{nb});
          EXPECT_EQ(block_of(p, na).type, ta);
        }
        if (rule.cell == Cell::Red) {
          EXPECT_TRUE(log_has(p, "fuse_break")) << log_text(p);
        }
        if (rule.cell == Cell::Yellow && answer < 0) {
          EXPECT_TRUE(log_has(p, "profiling off")) << log_text(p);
        }
        if (rule.cell == Cell::Yellow && answer == 0) {
          EXPECT_TRUE(log_has(p, "fusing is slower")) << log_text(p);
        }
        if (rule.cell == Cell::Yellow && answer == 1) {
          EXPECT_TRUE(log_has(p, "fusing is not slower")) << log_text(p);
        }
      }
    }
  }
}

// Predecessors are looked up with the predecessor as Table 3's row: Expand then a One-to-One
// block is green; a Many-to-Many block's Expand predecessor is red.
TEST(DnnFusion, PredecessorsUseTheirOwnRowOfTable3) {
  Builder b;
  int x = b.input({1, 16, 1, 1});
  int e = b.op("expand", {x}, kS);
  int r = b.op("relu", {e}, kS);
  b.g.set_outputs({r});
  Plan p = plan_dnnfusion(b.g, {});
  ASSERT_EQ(p.blocks.size(), 1u);
  EXPECT_EQ(p.blocks[0].type, MappingType::OneToMany);

  Builder c;
  int y = c.input({1, 16, 1, 1});
  int e2 = c.op("expand", {y}, kS);
  int s = c.op("sum", {e2}, {1, 16, 1, 1});
  int r2 = c.op("relu", {s}, {1, 16, 1, 1});
  c.g.set_outputs({r2});
  Plan q = plan_dnnfusion(c.g, {});
  EXPECT_TRUE(same_block(q, c.node(s), c.node(r2)));
  EXPECT_FALSE(same_block(q, c.node(e2), c.node(s))) << log_text(q);
  EXPECT_EQ(block_of(q, c.node(s)).dominant, c.node(s));
}

TEST(DnnFusion, SeedIsTheOneToOneNodeWithTheSmallestIrs) {
  // Two independent chains; the planner starts from the small one, and the log/plan would differ
  // otherwise only in order: check that the first decision logged concerns the smaller seed.
  Builder b;
  int x = b.input(kS);
  int big = b.op("relu", {x}, kS);
  int bigv = b.op("view", {big}, {16, 64});
  int y = b.input({4});
  int small = b.op("relu", {y}, {4});
  int smallv = b.op("expand", {small}, {4, 4});
  int smallw = b.op("expand", {smallv}, {2, 4, 4});
  b.g.set_outputs({bigv, smallw});
  Plan p = plan_dnnfusion(b.g, {});
  ASSERT_FALSE(p.log.empty());
  EXPECT_NE(p.log.front().find("seed " + std::to_string(b.node(small)) + ":relu"), std::string::npos) << log_text(p);
  EXPECT_TRUE(same_block(p, b.node(big), b.node(bigv)));
  EXPECT_TRUE(same_block(p, b.node(small), b.node(smallv)));
  EXPECT_FALSE(same_block(p, b.node(smallv), b.node(smallw)));  // O2M then O2M: yellow, no profiler
}

// a -> b -> c and a -> c: a and c can share a block only together with b.
TEST(DnnFusion, ResidualSkipCannotBypassTheMiddleNode) {
  Builder b;
  int x = b.input(kS);
  int a = b.op("relu", {x}, kS);
  int m = b.op("exp", {a}, kS);
  int c = b.op("add", {m, a}, kS);
  b.g.set_outputs({c});
  const int na = b.node(a), nm = b.node(m), nc = b.node(c);

  Plan all = plan_dnnfusion(b.g, {});
  EXPECT_EQ(all.blocks.size(), 1u) << log_text(all);

  PlanHooks hooks;
  hooks.fusible = [&](const Graph&, int n) { return n != nm; };
  Plan p = plan_fusion(Mode::DnnFusion, b.g, hooks);
  EXPECT_FALSE(same_block(p, na, nc)) << log_text(p);
  EXPECT_EQ(block_of(p, nm).nodes, std::vector<int>{nm});
  EXPECT_TRUE(log_has(p, "cycle")) << log_text(p);
}

// Same shape with the middle op Many-to-Many (red after another Many-to-Many joined): the residual
// add takes the branch that does not create a cycle.
TEST(DnnFusion, ResidualBlockKeepsTheBlockDagAcyclic) {
  Builder b;
  int x = b.input(kS);
  int r0 = b.op("relu", {x}, kS);
  int c1 = b.op("convolution", {r0, b.weight({16, 16, 3, 3}), -1}, kS);
  int r1 = b.op("relu", {c1}, kS);
  int c2 = b.op("convolution", {r1, b.weight({16, 16, 3, 3}), -1}, kS);
  int add = b.op("add", {c2, r0}, kS);
  int r2 = b.op("relu", {add}, kS);
  b.g.set_outputs({r2});
  Plan p = plan_fusion(Mode::DnnFusion, b.g, {});
  for (const Block& blk : p.blocks) {
    int m2m = 0;
    for (int n : blk.nodes) m2m += ecg::find_op(b.g.node(n).op)->mapping == MappingType::ManyToMany;
    EXPECT_LE(m2m, 1);
  }
  EXPECT_FALSE(same_block(p, b.node(c1), b.node(c2)));
  EXPECT_TRUE(same_block(p, b.node(c2), b.node(add)));
  EXPECT_TRUE(same_block(p, b.node(add), b.node(r2)));
}

TEST(DnnFusion, MergeCycleTestSeesCyclesThroughOtherBlocks) {
  // a->b, y->b, y->c, c->d, a->x, d->x. Blocks {a,d,x} and {y,b,c} are each convex, yet together
  // they would form a cycle: a feeds b, c feeds d.
  Builder g;
  int in = g.input(kS);
  int a = g.op("relu", {in}, kS);
  int y = g.op("relu", {in}, kS);
  int bb = g.op("add", {a, y}, kS);
  int c = g.op("relu", {y}, kS);
  int d = g.op("relu", {c}, kS);
  int xx = g.op("add", {a, d}, kS);
  g.g.set_outputs({bb, xx});
  const auto adj = fusion::detail::build_adjacency(g.g);
  const int na = g.node(a), ny = g.node(y), nb = g.node(bb), nc = g.node(c), nd = g.node(d), nx = g.node(xx);
  {
    fusion::detail::UnitDag dag(adj);
    ASSERT_FALSE(dag.merge_creates_cycle({dag.unit(na), dag.unit(nd), dag.unit(nx)}));
    dag.merge({dag.unit(na), dag.unit(nd), dag.unit(nx)});
    EXPECT_EQ(dag.unit(na), dag.unit(nx));
    EXPECT_EQ(dag.members(dag.unit(nd)).size(), 3u);
    EXPECT_TRUE(dag.merge_creates_cycle({dag.unit(ny), dag.unit(nb), dag.unit(nc)}));
    EXPECT_TRUE(dag.merge_creates_cycle({dag.unit(ny), dag.unit(nb)}));  // y->c->{..d..}, whose a feeds b
    EXPECT_FALSE(dag.merge_creates_cycle({dag.unit(ny), dag.unit(nc)}));
    // After merging y and c, b still cannot join them.
    dag.merge({dag.unit(ny), dag.unit(nc)});
    EXPECT_TRUE(dag.merge_creates_cycle({dag.unit(ny), dag.unit(nb)}));
  }
  fusion::detail::UnitDag singletons(adj);
  auto u = [&](std::vector<int> nodes) {
    std::vector<int> r;
    for (int n : nodes) r.push_back(singletons.unit(n));
    return r;
  };
  EXPECT_FALSE(singletons.merge_creates_cycle(u({ny, nb, nc})));
  EXPECT_TRUE(singletons.merge_creates_cycle(u({ny, nx})));   // y->c->d->x runs outside
  EXPECT_FALSE(singletons.merge_creates_cycle(u({na, nx})));  // only the direct edge
  EXPECT_FALSE(singletons.merge_creates_cycle(u({nb, nx})));  // unrelated nodes
}

TEST(DnnFusion, ManyToManyNodeIsPickedUpByItsSuccessorsBlock) {
  Builder b;
  int x = b.input(kS);
  int c = b.op("convolution", {x, b.weight({16, 16, 3, 3}), -1}, kS);
  int r = b.op("relu", {c}, kS);
  b.g.set_outputs({r});
  Plan p = plan_dnnfusion(b.g, {});
  ASSERT_EQ(p.blocks.size(), 1u);
  EXPECT_EQ(p.blocks[0].dominant, b.node(c));
  EXPECT_EQ(p.blocks[0].type, MappingType::ManyToMany);
}

TEST(DnnFusion, IsolatedManyToManyNodesGetTheirOwnBlocks) {
  Builder b;
  int x = b.input({4, 32});
  int s = b.op("_softmax", {x}, {4, 32});
  int m = b.op("mm", {s, b.weight({32, 8})}, {4, 8});
  b.g.set_outputs({m});
  Plan p = plan_dnnfusion(b.g, {});
  ASSERT_EQ(p.blocks.size(), 2u);
  EXPECT_EQ(p.blocks[0].nodes, std::vector<int>{b.node(s)});
  EXPECT_EQ(p.blocks[1].nodes, std::vector<int>{b.node(m)});
}

// Two convolutions feed one add: the add's block takes one of them (a predecessor with several
// inputs may fuse with some), never both.
TEST(DnnFusion, PredecessorWithSeveralInputsFusesWithSome) {
  Builder b;
  int x = b.input(kS);
  int c1 = b.op("convolution", {x, b.weight({16, 16, 1, 1}), -1}, kS);
  int c2 = b.op("convolution", {x, b.weight({16, 16, 1, 1}), -1}, kS);
  int a = b.op("add", {c1, c2}, kS);
  int r = b.op("relu", {a}, kS);
  b.g.set_outputs({r});
  Plan p = plan_fusion(Mode::DnnFusion, b.g, {});
  EXPECT_TRUE(same_block(p, b.node(a), b.node(r)));
  EXPECT_TRUE(same_block(p, b.node(c1), b.node(a)));
  EXPECT_FALSE(same_block(p, b.node(c2), b.node(a)));
  EXPECT_EQ(p.blocks.size(), 2u);
  EXPECT_TRUE(log_has(p, "fuse_break")) << log_text(p);
}

TEST(DnnFusion, ManyToManyLimitHoldsOnAConvChain) {
  Builder b;
  int v = b.input(kS);
  for (int i = 0; i < 4; ++i) {
    v = b.op("convolution", {v, b.weight({16, 16, 3, 3}), -1}, kS);
    v = b.op("relu", {v}, kS);
    v = b.op("mul", {v, b.weight({1, 16, 1, 1})}, kS);
  }
  b.g.set_outputs({v});
  Plan p = plan_fusion(Mode::DnnFusion, b.g, {});
  for (const Block& blk : p.blocks) {
    int m2m = 0;
    for (int n : blk.nodes) m2m += ecg::find_op(b.g.node(n).op)->mapping == MappingType::ManyToMany;
    EXPECT_LE(m2m, 1);
  }
  EXPECT_LE(p.blocks.size(), 5u);  // every elementwise op joined some conv's block
  for (const Block& blk : p.blocks) EXPECT_TRUE(blk.dominant >= 0 || blk.nodes.size() > 1);
}

TEST(DnnFusion, UnfusibleNodesStayAlone) {
  Builder b;
  int x = b.input(kS);
  int r1 = b.op("relu", {x}, kS);
  int e = b.op("exp", {r1}, kS);
  int r2 = b.op("relu", {e}, kS);
  int r3 = b.op("relu", {r2}, kS);
  b.g.set_outputs({r3});
  PlanHooks hooks;
  const int ne = b.node(e);
  hooks.fusible = [&](const Graph&, int n) { return n != ne; };
  Plan p = plan_fusion(Mode::DnnFusion, b.g, hooks);
  EXPECT_EQ(block_of(p, ne).nodes, std::vector<int>{ne});
  EXPECT_TRUE(same_block(p, b.node(r2), b.node(r3)));
  EXPECT_EQ(p.blocks.size(), 3u);
  EXPECT_TRUE(log_has(p, "cannot fuse")) << log_text(p);
}

TEST(DnnFusion, MaxBlockOpsSplitsLongChains) {
  Builder b;
  int v = b.input(kS);
  for (int i = 0; i < 10; ++i) v = b.op("relu", {v}, kS);
  b.g.set_outputs({v});
  PlanHooks hooks;
  hooks.max_block_ops = 3;
  Plan p = plan_fusion(Mode::DnnFusion, b.g, hooks);
  ASSERT_EQ(p.blocks.size(), 4u) << log_text(p);
  for (const Block& blk : p.blocks) EXPECT_LE(blk.nodes.size(), 3u);
  EXPECT_TRUE(log_has(p, "max_block_ops")) << log_text(p);
  PlanHooks roomy;
  EXPECT_EQ(plan_dnnfusion(b.g, roomy).blocks.size(), 1u);
}

TEST(DnnFusion, MaxBlockInputsBoundsOutsideActivations) {
  Builder b;
  std::vector<int> ins;
  for (int i = 0; i < 6; ++i) ins.push_back(b.input(kS));
  int v = b.op("add", {ins[0], ins[1]}, kS);
  for (int i = 2; i < 6; ++i) v = b.op("add", {v, ins[static_cast<size_t>(i)]}, kS);
  v = b.op("mul", {v, b.weight(kS)}, kS);  // a weight is not an activation input
  b.g.set_outputs({v});
  PlanHooks hooks;
  hooks.max_block_inputs = 3;
  Plan p = plan_fusion(Mode::DnnFusion, b.g, hooks);
  EXPECT_GT(p.blocks.size(), 1u);
  for (const Block& blk : p.blocks) {
    std::set<int> outside;
    for (int n : blk.nodes)
      for (int val : b.g.node(n).inputs) {
        const auto& value = b.g.value(val);
        if (value.is_compile_time()) continue;
        if (value.producer >= 0 && std::count(blk.nodes.begin(), blk.nodes.end(), value.producer)) continue;
        outside.insert(val);
      }
    EXPECT_LE(outside.size(), 3u);
  }
  EXPECT_TRUE(log_has(p, "max_block_inputs")) << log_text(p);
  EXPECT_EQ(plan_dnnfusion(b.g, {}).blocks.size(), 1u);
}

// ---------------- TVM planner ----------------

TEST(Tvm, ConvBatchNormReluIsOneGroup) {
  Builder b;
  int x = b.input({1, 3, 8, 8});
  int c = b.op("convolution", {x, b.weight({16, 3, 3, 3}), -1}, kS);
  int bn = b.op("_native_batch_norm_legit_no_training",
                {c, b.weight({16}), b.weight({16}), b.weight({16}), b.weight({16})}, kS, 3);
  int r = b.op("relu", {bn}, kS);
  b.g.set_outputs({r});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  ASSERT_EQ(p.blocks.size(), 1u);
  EXPECT_EQ(p.blocks[0].dominant, b.node(c));
  EXPECT_EQ(p.blocks[0].nodes.size(), 3u);
}

// relu0 -> conv1 -> relu1 -> conv2 -> add(conv2, relu0) -> relu2: TVM fuses conv1+relu1 and
// conv2+add+relu2; relu0 feeds a conv (kOutEWiseFusable edge) and stays alone.
TEST(Tvm, ResidualBlock) {
  Builder b;
  int x = b.input(kS);
  int r0 = b.op("relu", {x}, kS);
  int c1 = b.op("convolution", {r0, b.weight({16, 16, 3, 3}), -1}, kS);
  int r1 = b.op("relu", {c1}, kS);
  int c2 = b.op("convolution", {r1, b.weight({16, 16, 3, 3}), -1}, kS);
  int add = b.op("add", {c2, r0}, kS);
  int r2 = b.op("relu", {add}, kS);
  b.g.set_outputs({r2});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  ASSERT_EQ(p.blocks.size(), 3u) << log_text(p);
  EXPECT_EQ(block_of(p, b.node(r0)).nodes, std::vector<int>{b.node(r0)});
  EXPECT_EQ(block_of(p, b.node(c1)).nodes, (std::vector<int>{b.node(c1), b.node(r1)}));
  EXPECT_EQ(block_of(p, b.node(c2)).nodes, (std::vector<int>{b.node(c2), b.node(add), b.node(r2)}));
  EXPECT_LT(p.block_of[static_cast<size_t>(b.node(r0))], p.block_of[static_cast<size_t>(b.node(c2))]);
}

TEST(Tvm, InjectiveChainsFuse) {
  Builder b;
  int x = b.input({4, 8});
  int r = b.op("relu", {x}, {4, 8});
  int v = b.op("view", {r}, {2, 16});
  int t = b.op("permute", {v}, {16, 2});
  int a = b.op("add", {t, b.weight({16, 2})}, {16, 2});
  int s = b.op("slice", {a}, {8, 2});
  b.g.set_outputs({s});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  ASSERT_EQ(p.blocks.size(), 1u) << log_text(p);
  EXPECT_EQ(p.blocks[0].type, MappingType::Reorganize);  // O2O, Reorg, Shuffle, O2O, O2O folded
}

TEST(Tvm, ElementwiseFusesIntoAReductionButNotOutOfIt) {
  Builder b;
  int x = b.input({4, 32});
  int e = b.op("exp", {x}, {4, 32});
  int s = b.op("sum", {e}, {4, 1});
  int r = b.op("relu", {s}, {4, 1});
  b.g.set_outputs({r});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  EXPECT_TRUE(same_block(p, b.node(e), b.node(s)));
  EXPECT_FALSE(same_block(p, b.node(s), b.node(r)));
  EXPECT_EQ(block_of(p, b.node(s)).dominant, b.node(s));
}

TEST(Tvm, OpaqueOpsStayAlone) {
  Builder b;
  int x = b.input({4, 32});
  int r = b.op("relu", {x}, {4, 32});
  int s = b.op("_softmax", {r}, {4, 32});
  int r2 = b.op("relu", {s}, {4, 32});
  b.g.set_outputs({r2});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  EXPECT_EQ(p.blocks.size(), 3u);
  EXPECT_EQ(block_of(p, b.node(s)).nodes, std::vector<int>{b.node(s)});
}

TEST(Tvm, UnfusibleNodesAreOpaque) {
  Builder b;
  int x = b.input(kS);
  int r0 = b.op("relu", {x}, kS);
  int r1 = b.op("exp", {r0}, kS);
  int r2 = b.op("relu", {r1}, kS);
  b.g.set_outputs({r2});
  EXPECT_EQ(plan_tvm(b.g, {}).blocks.size(), 1u);
  PlanHooks hooks;
  const int n1 = b.node(r1);
  hooks.fusible = [&](const Graph&, int n) { return n != n1; };
  Plan p = plan_fusion(Mode::Tvm, b.g, hooks);
  EXPECT_EQ(p.blocks.size(), 3u);
}

TEST(Tvm, GroupSizeCapSplitsChains) {
  Builder b;
  int v = b.input(kS);
  for (int i = 0; i < 10; ++i) v = b.op(i % 2 ? "relu" : "sigmoid", {v}, kS);
  b.g.set_outputs({v});
  PlanHooks hooks;
  hooks.tvm_max_group = 4;
  Plan p = plan_fusion(Mode::Tvm, b.g, hooks);
  ASSERT_EQ(p.blocks.size(), 3u) << log_text(p);
  EXPECT_EQ(p.blocks[0].nodes, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(p.blocks[1].nodes, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(p.blocks[2].nodes, (std::vector<int>{8, 9}));
  EXPECT_TRUE(log_has(p, "tvm_max_group")) << log_text(p);
  EXPECT_EQ(plan_tvm(b.g, {}).blocks.size(), 1u);  // the default cap is 256
}

// Relay feeds concatenate through a tuple: injective producers join it in phase 2, a conv does not
// (its path to the concatenate is not elementwise).
TEST(Tvm, ConcatenateTakesInjectiveProducersButNotConvolutions) {
  Builder b;
  int x = b.input(kS);
  int ra = b.op("relu", {x}, kS);
  int rb = b.op("sigmoid", {x}, kS);
  int c = b.op("convolution", {x, b.weight({16, 16, 1, 1}), -1}, kS);
  int cat = b.op("cat", {ra, rb, c}, {1, 48, 8, 8});
  int out = b.op("relu", {cat}, {1, 48, 8, 8});
  b.g.set_outputs({out});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  EXPECT_TRUE(same_block(p, b.node(cat), b.node(out)));
  EXPECT_TRUE(same_block(p, b.node(ra), b.node(cat)));
  EXPECT_TRUE(same_block(p, b.node(rb), b.node(cat)));
  EXPECT_FALSE(same_block(p, b.node(c), b.node(cat)));
  EXPECT_EQ(p.blocks.size(), 2u);
}

// A node whose value is a graph output may be a fusion target but is not fused into later nodes.
TEST(Tvm, GraphOutputsEndGroups) {
  Builder b;
  int x = b.input(kS);
  int r0 = b.op("relu", {x}, kS);
  int r1 = b.op("exp", {r0}, kS);
  int r2 = b.op("relu", {r1}, kS);
  b.g.set_outputs({r1, r2});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  EXPECT_TRUE(same_block(p, b.node(r0), b.node(r1)));
  EXPECT_FALSE(same_block(p, b.node(r1), b.node(r2)));
}

// Diamond below a conv: the post-dominator of the conv is the add where the branches meet.
TEST(Tvm, ConvFusesThroughADiamondIntoItsPostDominator) {
  Builder b;
  int x = b.input(kS);
  int c = b.op("convolution", {x, b.weight({16, 16, 3, 3}), -1}, kS);
  int l = b.op("relu", {c}, kS);
  int r = b.op("sigmoid", {c}, kS);
  int a = b.op("mul", {l, r}, kS);
  b.g.set_outputs({a});
  Plan p = plan_fusion(Mode::Tvm, b.g, {});
  ASSERT_EQ(p.blocks.size(), 1u) << log_text(p);
  // With an injective op on one branch the conv's path is no longer <= kBroadcast.
  Builder d;
  int y = d.input(kS);
  int c2 = d.op("convolution", {y, d.weight({16, 16, 3, 3}), -1}, kS);
  int l2 = d.op("relu", {c2}, kS);
  int r2 = d.op("permute", {c2}, kS);
  int a2 = d.op("mul", {l2, r2}, kS);
  d.g.set_outputs({a2});
  Plan q = plan_fusion(Mode::Tvm, d.g, {});
  EXPECT_EQ(block_of(q, d.node(c2)).nodes, std::vector<int>{d.node(c2)});
}

// ---------------- all planners on random graphs ----------------

TEST(FusionPlan, RandomGraphsMeetEveryPostcondition) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  const char* ops[] = {"relu", "add", "mul", "expand", "view", "permute", "sum", "convolution", "_softmax", "cat", "exp"};
  for (int trial = 0; trial < 300; ++trial) {
    Builder b;
    std::vector<int> vals = {b.input(kS), b.input(kS)};
    const int n_nodes = static_cast<int>(dnnfusion::testing::rand_int(rng, 1, 40));
    for (int i = 0; i < n_nodes; ++i) {
      const char* op = ops[dnnfusion::testing::rand_int(rng, 0, 10)];
      const bool binary = std::string(op) == "add" || std::string(op) == "mul" || std::string(op) == "cat";
      // Prefer recent values so chains and diamonds both appear.
      auto pick = [&] {
        const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(vals.size()) - 6);
        return vals[static_cast<size_t>(dnnfusion::testing::rand_int(rng, lo, static_cast<int64_t>(vals.size()) - 1))];
      };
      std::vector<int> in = {pick()};
      if (binary) in.push_back(pick());
      if (std::string(op) == "convolution") in = {in[0], b.weight({16, 16, 1, 1}), -1};
      vals.push_back(b.op(op, in, kS));
    }
    std::vector<int> outs;
    for (size_t i = 2; i < vals.size(); ++i)
      if (b.g.value(vals[i]).users.empty() || dnnfusion::testing::rand_int(rng, 0, 5) == 0) outs.push_back(vals[i]);
    b.g.set_outputs(outs);
    PlanHooks hooks;
    hooks.max_block_ops = static_cast<int>(dnnfusion::testing::rand_int(rng, 1, 12));
    hooks.max_block_inputs = static_cast<int>(dnnfusion::testing::rand_int(rng, 1, 5));
    hooks.tvm_max_group = static_cast<int>(dnnfusion::testing::rand_int(rng, 1, 12));
    const int64_t banned = dnnfusion::testing::rand_int(rng, -1, n_nodes - 1);
    hooks.fusible = [banned](const Graph&, int n) { return n != banned; };
    const uint64_t yellow_seed = rng();
    hooks.yellow_is_faster = [yellow_seed](const Graph&, const std::vector<int>& blk, int cand) {
      return ((yellow_seed >> ((blk.size() + static_cast<size_t>(cand)) % 64)) & 1) != 0;
    };
    for (Mode m : {Mode::None, Mode::Tvm, Mode::DnnFusion}) {
      SCOPED_TRACE(std::string("trial ") + std::to_string(trial) + " mode " + mode_name(m));
      Plan p;
      ASSERT_NO_THROW(p = plan_fusion(m, b.g, hooks)) << b.g.dump();
      for (const Block& blk : p.blocks) {
        if (m == Mode::DnnFusion) {
          EXPECT_LE(static_cast<int>(blk.nodes.size()), std::max(1, hooks.max_block_ops));
        }
        if (m == Mode::Tvm) {
          EXPECT_LE(static_cast<int>(blk.nodes.size()), std::max(1, hooks.tvm_max_group));
        }
        EXPECT_EQ(blk.type, fusion::detail::fold_block_type(b.g, blk.nodes));
      }
    }
  }
}

TEST(DnnFusion, FreeDataMovementFusesWithoutMeasuringAndKeepsTheBlockType) {
  // GEMM -> view -> relu -> view: the views are yellow cells (Many-to-Many then Reorganize). With
  // profiling off they stay apart, unless the free_merge hook says they are index arithmetic; a
  // free merge keeps the block's type, so relu still joins the GEMM through a green cell.
  Builder b;
  int x = b.input({8, 16});
  int m = b.op("mm", {x, b.weight({16, 32})}, {8, 32});
  int v1 = b.op("view", {m}, {2, 4, 32});
  int r = b.op("relu", {v1}, {2, 4, 32});
  int v2 = b.op("view", {r}, {8, 32});
  b.g.set_outputs({v2});
  Plan apart = plan_dnnfusion(b.g, {});
  EXPECT_FALSE(same_block(apart, b.node(m), b.node(r))) << log_text(apart);
  PlanHooks hooks;
  int asked = 0;
  hooks.free_merge = [&](const Graph& g, const std::vector<int>&, int cand) {
    ++asked;
    return g.node(cand).op == "view";
  };
  Plan p = plan_dnnfusion(b.g, hooks);
  EXPECT_GT(asked, 0);
  ASSERT_EQ(p.blocks.size(), 1u) << log_text(p);
  EXPECT_EQ(p.blocks[0].type, MappingType::ManyToMany);
  EXPECT_NO_THROW(verify_plan(b.g, p, hooks));
}

TEST(DnnFusion, DataMovementOfAValueWrittenAnywayStaysOutSoTheActivationJoinsItsProducer) {
  // conv -> relu -> {graph output, permute -> conv2}: the relu's output is written whatever the
  // plan, so relu + permute would run two loops in one block and leave conv without its epilogue.
  // The relu must join the conv; the permute is a block of its own.
  Builder b;
  const std::vector<int64_t> kT = {1, 8, 16, 8};
  int x = b.input(kS);
  int c = b.op("convolution", {x, b.weight({16, 16, 3, 3}), -1}, kS);
  int r = b.op("relu", {c}, kS);
  int pm = b.op("permute", {r}, kT);
  int c2 = b.op("convolution", {pm, b.weight({16, 8, 3, 3}), -1}, {1, 16, 16, 8});
  b.g.set_outputs({r, c2});
  Plan p = plan_dnnfusion(b.g, {});
  EXPECT_TRUE(same_block(p, b.node(c), b.node(r))) << log_text(p);
  EXPECT_FALSE(same_block(p, b.node(r), b.node(pm))) << log_text(p);
  EXPECT_TRUE(log_has(p, "materialized for other consumers")) << log_text(p);
  EXPECT_NO_THROW(verify_plan(b.g, p, {}));

  // When nothing else reads the relu's output it need not be written: relu + permute is one loop
  // and stays a legal (green) merge.
  b.g.set_outputs({c2});
  Plan p2 = plan_dnnfusion(b.g, {});
  EXPECT_TRUE(same_block(p2, b.node(r), b.node(pm))) << log_text(p2);
}
