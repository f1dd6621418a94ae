// Math-property rules (csrc/rewrite/math_rules.h) and their engine (apply_math_rules.h): the
// table's shape, one equivalence test per rule on a graph it matches, engine behaviour (greedy
// choice, fixpoint, I6, partitions) and a fuzz test over random graphs and rule compositions.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "common/error.h"
#include "ecg/verifier.h"
#include "rewrite/apply_math_rules.h"
#include "rewrite/eliminate_common_subexpressions.h"
#include "rewrite/fold_batchnorm.h"
#include "rewrite/math_rules.h"
#include "rewrite/remove_noops.h"
#include "rewrite_test_util.h"

using namespace dnnfusion;
using namespace dnnfusion::rewrite;
using namespace dnnfusion::rewrite_test;

namespace {

struct Example {
  std::function<void(GraphBuilder&)> build;  // builds a graph the rule matches and sets its outputs
  float lo = -2.f, hi = 2.f;                 // input range
};

const Shape X4 = {2, 3, 4, 5};

// One example per rule of the table (a rule without one fails MathRule.EveryRuleHasAnExample).
std::map<std::string, Example> examples() {
  std::map<std::string, Example> e;
  auto chain = [](const char* outer, const char* inner, bool pos = false) {
    return Example{[=](GraphBuilder& b) {
                     int x = b.input(X4);
                     int c1 = b.cst(1.75f), c2 = b.weight({5});
                     b.out({b.bin(outer, b.bin(inner, x, c1), c2)});
                   },
                   pos ? 0.5f : -2.f, 2.f};
  };
  // ---- associative ----
  e["mul_const_chain"] = chain("mul", "mul");
  e["add_const_chain"] = chain("add", "add");
  e["sub_const_chain"] = chain("sub", "sub");
  e["add_then_sub_const"] = chain("sub", "add");
  e["sub_then_add_const"] = {[](GraphBuilder& b) {  // constant on the left of the commuting op
    int x = b.input(X4);
    b.out({b.bin("add", b.weight({4, 1}), b.bin("sub", x, b.cst(0.5f)))});
  }};
  e["div_const_chain"] = chain("div", "div");
  e["mul_then_div_const"] = chain("div", "mul");
  e["div_then_mul_const"] = chain("mul", "div");
  e["const_minus_add_const"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("sub", b.weight({5}), b.bin("add", b.cst(2.f), x))});
  }};
  e["const_minus_sub_const"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("sub", b.cst(3.f), b.bin("sub", b.weight({4, 5}), x))});
  }};
  e["const_minus_sub_from"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("sub", b.cst(3.f), b.bin("sub", x, b.weight({5})))});
  }};
  e["const_div_mul_const"] = {[](GraphBuilder& b) {
                                int x = b.input(X4);
                                b.out({b.bin("div", b.weight({5}), b.bin("mul", x, b.cst(0.75f)))});
                              },
                              0.5f, 2.f};
  e["div_by_const"] = {[](GraphBuilder& b) { b.out({b.bin("div", b.input(X4), b.weight({3, 1, 1}))}); }};
  e["recip_product"] = {[](GraphBuilder& b) {
                          int a = b.input(X4), c = b.input({5});
                          b.out({b.bin("mul", b.un("reciprocal", a), b.un("reciprocal", b.bin("mul", a, c)))});
                        },
                        0.5f, 2.f};
  e["sqrt_pair_product"] = {[](GraphBuilder& b) {
    int a = b.input(X4), y = b.input(X4), c = b.input(X4);
    int B = b.un("relu", y);
    int p = b.bin("mul", a, b.un("sqrt", B)), q = b.bin("mul", b.un("sqrt", B), c);
    b.out({b.bin("mul", p, q)});
  }};
  e["sqrt_times_sqrt"] = {[](GraphBuilder& b) {
    int B = b.un("exp", b.input(X4));
    int s = b.un("sqrt", B);
    b.out({b.bin("add", b.bin("mul", s, s), b.input(X4))});
  }};
  e["recip_times_recip"] = {[](GraphBuilder& b) {
                              b.out({b.bin("mul", b.un("reciprocal", b.input(X4)), b.un("reciprocal", b.input({4, 5})))});
                            },
                            0.5f, 2.f};
  e["mul_by_recip"] = {[](GraphBuilder& b) {
                         b.out({b.bin("mul", b.un("reciprocal", b.input({5})), b.input(X4))});
                       },
                       0.5f, 2.f};
  e["div_by_recip"] = {[](GraphBuilder& b) {
                         b.out({b.bin("div", b.input(X4), b.un("reciprocal", b.input(X4)))});
                       },
                       0.5f, 2.f};
  e["neg_neg"] = {[](GraphBuilder& b) { b.out({b.un("neg", b.un("neg", b.un("relu", b.input(X4))))}); }};
  e["recip_recip"] = {[](GraphBuilder& b) {
                        int x = b.input(X4);
                        b.out({b.bin("add", b.un("reciprocal", b.un("reciprocal", x)), b.input(X4))});
                      },
                      0.5f, 2.f};
  e["shuffle_shuffle"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    int t = b.transpose(x, 1, 2);                  // [2,4,3,5]
    b.out({b.un("relu", b.permute(t, {0, 3, 1, 2}))});  // -> x dims [0,3,2,1]
  }};
  e["reshape_reshape"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    int u = b.node("unsqueeze", {x}, {1, 2, 3, 4, 5}, {{"dim", int64_t{0}}});
    b.out({b.un("relu", b.view(u, {6, 20}))});
  }};
  e["reduce_reduce"] = {[](GraphBuilder& b) {
    int s = b.reduce("sum", b.input(X4), {1}, false);  // [2,4,5]
    b.out({b.reduce("sum", s, {-1}, false)});         // [2,4]: dims {1,3} of X4
  }};
  // ---- distributive ----
  e["factor_mul_add"] = {[](GraphBuilder& b) {
    int x = b.input(X4), y = b.input(X4), c = b.weight({5});
    b.out({b.bin("add", b.bin("mul", x, c), b.bin("mul", c, y))});
  }};
  e["factor_mul_sub"] = {[](GraphBuilder& b) {
    int x = b.input(X4), y = b.input(X4), z = b.input(X4);
    b.out({b.bin("sub", b.bin("mul", x, y), b.bin("mul", z, x))});
  }};
  e["factor_div_add"] = {[](GraphBuilder& b) {
                           int x = b.input(X4), y = b.input(X4), z = b.input(X4);
                           b.out({b.bin("add", b.bin("div", x, z), b.bin("div", y, z))});
                         },
                         0.5f, 2.f};
  e["factor_div_sub"] = {[](GraphBuilder& b) {
                           int x = b.input(X4), y = b.input(X4), z = b.input(X4);
                           b.out({b.bin("sub", b.bin("div", x, z), b.bin("div", y, z))});
                         },
                         0.5f, 2.f};
  e["factor_self_add"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("add", b.bin("mul", b.weight({5}), x), x)});
  }};
  e["factor_self_sub_left"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("sub", x, b.bin("mul", x, b.cst(0.25f)))});
  }};
  e["factor_self_sub_right"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("sub", b.bin("mul", x, b.weight({4, 5})), x)});
  }};
  e["affine_collapse"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("mul", b.bin("add", b.bin("mul", x, b.cst(1.5f)), b.weight({5})), b.weight({3, 1, 1}))});
  }};
  e["shift_scale_shift"] = {[](GraphBuilder& b) {
    int x = b.input(X4);
    b.out({b.bin("add", b.weight({5}), b.bin("mul", b.bin("add", x, b.cst(0.5f)), b.weight({4, 1})))});
  }};
  auto conv_pair = [](const char* op, bool b1, bool b2) {
    return Example{[=](GraphBuilder& b) {
      int x = b.input({1, 3, 8, 8});
      int p = b.conv(x, b.weight({4, 3, 3, 3}), b1 ? b.weight({4}) : -1, 1, 1);
      int q = b.conv(x, b.weight({4, 3, 3, 3}), b2 ? b.weight({4}) : -1, 1, 1);
      b.out({b.bin(op, p, q)});
    }};
  };
  e["conv_add_conv"] = conv_pair("add", true, true);
  e["conv_sub_conv"] = conv_pair("sub", false, true);
  e["mm_add_mm"] = {[](GraphBuilder& b) {
    int x = b.input({4, 6});
    b.out({b.bin("add", b.mm(x, b.weight({6, 5})), b.mm(x, b.weight({6, 5})))});
  }};
  e["mm_sub_mm"] = {[](GraphBuilder& b) {
    int x = b.input({4, 6});
    b.out({b.bin("sub", b.mm(x, b.weight({6, 5})), b.mm(x, b.weight({6, 5})))});
  }};
  e["addmm_add_addmm"] = {[](GraphBuilder& b) {
    int x = b.input({4, 6});
    b.out({b.bin("add", b.addmm(b.weight({5}), x, b.weight({6, 5})), b.addmm(b.weight({5}), x, b.weight({6, 5})))});
  }};
  e["conv_channel_scale"] = {[](GraphBuilder& b) {
    int c = b.conv(b.input({2, 3, 6, 6}), b.weight({4, 3, 3, 3}), b.weight({4}), 1, 1);
    b.out({b.bin("mul", b.weight({4, 1, 1}), c)});
  }};
  e["conv_channel_div"] = {[](GraphBuilder& b) {
    int c = b.conv(b.input({2, 3, 6, 6}), b.weight({4, 3, 3, 3}), -1, 2, 1);
    b.out({b.bin("div", c, b.weight({1, 4, 1, 1}))});
  }};
  e["conv_channel_shift"] = {[](GraphBuilder& b) {
    int c = b.conv(b.input({2, 3, 6, 6}), b.weight({4, 3, 1, 1}), -1);
    b.out({b.bin("add", c, b.weight({4, 1, 1}))});
  }};
  e["conv_channel_unshift"] = {[](GraphBuilder& b) {
    int c = b.conv(b.input({1, 4, 5}), b.weight({6, 2, 3}), b.weight({6}), 1, 1, 2);  // grouped 1-D conv
    b.out({b.bin("sub", c, b.cst(0.5f))});
  }};
  e["linear_col_scale"] = {[](GraphBuilder& b) {
    int y = b.addmm(b.weight({5}), b.input({4, 6}), b.weight({6, 5}));
    b.out({b.bin("mul", y, b.weight({5}))});
  }};
  e["linear_bias_add"] = {[](GraphBuilder& b) {
    int y = b.mm(b.input({4, 6}), b.weight({6, 5}));
    b.out({b.bin("add", b.weight({1, 5}), y)});
  }};
  e["exp_mul_exp"] = {[](GraphBuilder& b) {
    b.out({b.bin("mul", b.un("exp", b.input(X4)), b.un("exp", b.input({5})))});
  }};
  e["exp_div_exp"] = {[](GraphBuilder& b) {
    b.out({b.bin("div", b.un("exp", b.input(X4)), b.un("exp", b.input(X4)))});
  }};
  e["neg_add_neg"] = {[](GraphBuilder& b) {
    b.out({b.bin("add", b.un("neg", b.input(X4)), b.un("neg", b.input(X4)))});
  }};
  e["neg_sub_neg"] = {[](GraphBuilder& b) {
    b.out({b.bin("sub", b.un("neg", b.input(X4)), b.un("neg", b.input({5})))});
  }};
  // ---- commutative ----
  auto reduce_of = [](const char* red, const char* op, Shape c, Shape dims, bool keep) {
    return Example{[=](GraphBuilder& b) {
                     int x = b.input(X4);
                     b.out({b.reduce(red, b.bin(op, x, b.weight(c)), dims, keep)});
                   }};
  };
  e["sum_of_scaled"] = reduce_of("sum", "mul", {3, 1, 1}, {2, 3}, false);
  e["mean_of_scaled"] = reduce_of("mean", "mul", {}, {1}, true);
  e["sum_of_divided"] = reduce_of("sum", "div", {1}, {}, false);
  e["mean_of_divided"] = reduce_of("mean", "div", {4, 1}, {0, -1}, false);
  e["mean_of_shifted"] = reduce_of("mean", "add", {5}, {0, 1, 2}, false);
  e["sum_of_shifted"] = reduce_of("sum", "add", {4, 1}, {3}, false);
  e["sum_of_neg"] = {[](GraphBuilder& b) { b.out({b.reduce("sum", b.un("neg", b.input(X4)), {1, 2}, true)}); }};
  e["mean_of_neg"] = {[](GraphBuilder& b) { b.out({b.reduce("mean", b.un("neg", b.input(X4)), {}, false)}); }};
  e["prod_of_exp"] = {[](GraphBuilder& b) {
                        int x = b.input(X4);
                        b.out({b.node("prod", {b.un("exp", x)}, {2, 4, 5}, {{"dim", int64_t{1}}, {"keepdim", int64_t{0}}})});
                      },
                      -0.5f, 0.5f};
  e["monotone_after_maxpool"] = {[](GraphBuilder& b) { b.out({b.maxpool(b.un("relu", b.input({2, 3, 8, 8})), 2, 2)}); }};
  e["monotone_after_amax"] = {[](GraphBuilder& b) { b.out({b.reduce("amax", b.un("sigmoid", b.input(X4)), {2, 3}, false)}); }};
  e["monotone_after_amin"] = {[](GraphBuilder& b) {
    b.out({b.reduce("amin", b.un("leaky_relu", b.input(X4), {{"negative_slope", 0.1}}), {1}, true)});
  }};
  e["avgpool_of_scaled"] = {[](GraphBuilder& b) {
    b.out({b.avgpool(b.bin("mul", b.input({2, 3, 8, 8}), b.weight({3, 1, 1})), 2, 2)});
  }};
  e["adaptive_avgpool_of_scaled"] = {[](GraphBuilder& b) {
    int x = b.bin("mul", b.cst(0.5f), b.input({2, 3, 8, 8}));
    b.out({b.node("_adaptive_avg_pool2d", {x}, {2, 3, 1, 1}, {{"output_size", Shape{1, 1}}})});
  }};
  e["unary_before_expand"] = {[](GraphBuilder& b) { b.out({b.un("tanh", b.expand(b.input({3, 1}), {2, 3, 8}))}); }};
  e["binary_before_expand"] = {[](GraphBuilder& b) {
    int x = b.input({3, 1}), y = b.input({3, 1});
    b.out({b.bin("sub", y, b.expand(x, {2, 3, 8}))});
  }};
  e["scale_into_mm"] = {[](GraphBuilder& b) {
    b.out({b.mm(b.bin("mul", b.input({4, 6}), b.weight({6})), b.weight({6, 5}))});
  }};
  e["scale_into_conv"] = {[](GraphBuilder& b) {
    int x = b.bin("mul", b.input({2, 3, 6, 6}), b.weight({3, 1, 1}));
    b.out({b.conv(x, b.weight({4, 3, 3, 3}), b.weight({4}), 1, 1)});
  }};
  e["neg_into_mm"] = {[](GraphBuilder& b) {
    b.out({b.addmm(b.weight({5}), b.un("neg", b.input({4, 6})), b.weight({6, 5}))});
  }};
  e["neg_into_conv"] = {[](GraphBuilder& b) {
    b.out({b.conv(b.un("neg", b.input({2, 3, 6, 6})), b.weight({4, 3, 3, 3}), b.weight({4}))});
  }};
  e["neg_times_const"] = {[](GraphBuilder& b) { b.out({b.bin("mul", b.weight({5}), b.un("neg", b.input(X4)))}); }};
  e["neg_times_neg"] = {[](GraphBuilder& b) {
    b.out({b.bin("mul", b.un("neg", b.input(X4)), b.un("neg", b.input(X4)))});
  }};
  e["sub_of_neg"] = {[](GraphBuilder& b) { b.out({b.bin("sub", b.input(X4), b.un("neg", b.input(X4)))}); }};
  e["add_of_neg"] = {[](GraphBuilder& b) { b.out({b.bin("add", b.un("neg", b.input({5})), b.input(X4))}); }};
  e["log_of_exp"] = {[](GraphBuilder& b) {
    b.out({b.bin("mul", b.un("log", b.un("exp", b.input(X4))), b.input(X4))});
  }};
  e["exp_of_log"] = {[](GraphBuilder& b) {
    int r = b.un("relu", b.input(X4));
    b.out({b.un("exp", b.un("log", r))});
  }};
  e["sqrt_of_square"] = {[](GraphBuilder& b) { b.out({b.un("sqrt", b.un("square", b.input(X4)))}); }};
  e["square_of_sqrt"] = {[](GraphBuilder& b) {
    b.out({b.un("square", b.un("sqrt", b.un("abs", b.input(X4))))});
  }};
  return e;
}

const MathRule& rule_named(const std::string& name) {
  for (const auto& r : math_rules())
    if (r.name == name) return r;
  throw std::runtime_error("no rule " + name);
}

}  // namespace

// ---------------- the table ----------------
TEST(MathRule, TableHasFortyRulesOverAllThreeProperties) {
  const auto& t = math_rules();
  EXPECT_GE(t.size(), 40u);
  std::map<Property, int> by;
  std::set<std::string> names;
  for (const auto& r : t) {
    ++by[r.property];
    EXPECT_TRUE(names.insert(r.name).second) << "duplicate rule name " << r.name;
    EXPECT_FALSE(r.pattern.empty()) << r.name;
    EXPECT_FALSE(r.ops.empty()) << r.name;
    for (const auto& op : r.ops) EXPECT_NE(ecg::find_op(op), nullptr) << r.name << " names unknown op " << op;
  }
  EXPECT_GE(by[Property::Associative], 10);
  EXPECT_GE(by[Property::Distributive], 10);
  EXPECT_GE(by[Property::Commutative], 10);
  std::printf("[ rules    ] %zu rules: %d associative, %d distributive, %d commutative\n", t.size(),
              by[Property::Associative], by[Property::Distributive], by[Property::Commutative]);
}

TEST(MathRule, EveryRuleHasAnExample) {
  auto ex = examples();
  for (const auto& r : math_rules()) EXPECT_TRUE(ex.count(r.name)) << "rule " << r.name << " has no example graph";
  for (const auto& [name, e] : ex) EXPECT_NO_THROW(rule_named(name)) << "example for unknown rule " << name;
}

// ---------------- one equivalence test per rule ----------------
class MathRuleEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(MathRuleEquivalence, FiresReducesCostAndKeepsValues) {
  const std::string name = GetParam();
  const MathRule& rule = rule_named(name);
  auto ex = examples();
  ASSERT_TRUE(ex.count(name)) << "no example for " << name;
  std::mt19937_64 rng(dnnfusion::testing::test_seed() ^ std::hash<std::string>()(name));
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  GraphBuilder b(rng);
  ex[name].build(b);
  ecg::verify_graph(b.g);

  RuleStats st;
  Graph after = apply_math_rules(b.g, &st, {name});
  ASSERT_NO_THROW(ecg::verify_graph(after)) << after.dump();
  ASSERT_TRUE(st.rules.count(name) && st.rules[name].applied >= 1) << name << " did not fire on\n" << b.g.dump();
  EXPECT_EQ(st.rules.size(), 1u);

  // The claimed effect is the effect on the graph the runtime sees (after constant folding).
  Graph ref = fold(b.g), got = fold(after);
  EXPECT_EQ(total_flops(ref), st.flops_before);
  EXPECT_EQ(total_flops(got), st.flops_after);
  EXPECT_EQ(static_cast<int>(ref.nodes().size()), st.nodes_before);
  EXPECT_EQ(static_cast<int>(got.nodes().size()), st.nodes_after);
  EXPECT_EQ(st.flops_before - st.flops_after, st.rules[name].flops_saved);
  const bool cheaper = st.flops_after < st.flops_before ||
                       (st.flops_after == st.flops_before && st.nodes_after < st.nodes_before) ||
                       (rule.canonical && st.flops_after == st.flops_before && count_op(got, "div") < count_op(ref, "div"));
  EXPECT_TRUE(cheaper) << name << ": FLOPs " << st.flops_before << " -> " << st.flops_after << ", nodes "
                       << st.nodes_before << " -> " << st.nodes_after << "\n" << got.dump();

  const Example& e = ex[name];
  for (int trial = 0; trial < 3; ++trial) {
    Buffers in = random_inputs(b.g, rng, e.lo, e.hi);
    EXPECT_TRUE(outputs_close(b.g, run_graph(b.g, in), run_graph(got, in))) << name << "\nbefore:\n"
                                                                             << b.g.dump() << "after:\n" << got.dump();
  }
  // Fixpoint: the rule alone, then the whole table, then the whole table again change nothing more.
  RuleStats again;
  apply_math_rules(after, &again, {name});
  EXPECT_EQ(again.applied(), 0) << name << " fires again on its own result\n" << after.dump();
  Graph full = apply_math_rules(fold(b.g));
  Graph twice = apply_math_rules(full, &again);
  EXPECT_EQ(again.applied(), 0);
  EXPECT_EQ(full.dump(), twice.dump());
  Buffers in = random_inputs(b.g, rng, e.lo, e.hi);
  EXPECT_TRUE(outputs_close(b.g, run_graph(b.g, in), run_graph(fold(full), in))) << full.dump();
}

INSTANTIATE_TEST_SUITE_P(AllRules, MathRuleEquivalence, ::testing::ValuesIn([] {
                           std::vector<std::string> names;
                           for (const auto& r : math_rules()) names.push_back(r.name);
                           return names;
                         }()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---------------- preconditions that must block a rule ----------------
TEST(MathRule, PreconditionsBlockUnsoundRewrites) {
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  auto fires = [&](const std::string& rule, const std::function<void(GraphBuilder&)>& build) {
    GraphBuilder b(rng);
    build(b);
    RuleStats st;
    apply_math_rules(b.g, &st, {rule});
    return st.applied() > 0;
  };
  // sqrt(B)*sqrt(B) = B only for B >= 0: an unconstrained input must not qualify.
  EXPECT_FALSE(fires("sqrt_times_sqrt", [](GraphBuilder& b) {
    int s = b.un("sqrt", b.input(X4));
    b.out({b.bin("mul", s, s)});
  }));
  EXPECT_FALSE(fires("exp_of_log", [](GraphBuilder& b) { b.out({b.un("exp", b.un("log", b.input(X4)))}); }));
  // A per-row scale of mm is not a weight scale.
  EXPECT_FALSE(fires("linear_col_scale", [](GraphBuilder& b) {
    b.out({b.bin("mul", b.mm(b.input({4, 6}), b.weight({6, 5})), b.weight({4, 1}))});
  }));
  // A scale varying over H/W does not commute with pooling or factor out of a spatial sum.
  EXPECT_FALSE(fires("avgpool_of_scaled", [](GraphBuilder& b) {
    b.out({b.avgpool(b.bin("mul", b.input({2, 3, 8, 8}), b.weight({8, 8})), 2, 2)});
  }));
  EXPECT_FALSE(fires("sum_of_scaled", [](GraphBuilder& b) {
    b.out({b.reduce("sum", b.bin("mul", b.input(X4), b.weight({5})), {3}, false)});
  }));
  // A scale that broadcasts the operand larger changes what is summed.
  EXPECT_FALSE(fires("sum_of_scaled", [](GraphBuilder& b) {
    b.out({b.reduce("sum", b.bin("mul", b.input({4, 5}), b.weight({3, 1, 1})), {0}, false)});
  }));
  // leaky_relu with a negative slope is not monotone.
  EXPECT_FALSE(fires("monotone_after_maxpool", [](GraphBuilder& b) {
    b.out({b.maxpool(b.un("leaky_relu", b.input({1, 2, 4, 4}), {{"negative_slope", -0.5}}), 2, 2)});
  }));
  // Used max-pool indices would change (ties of relu'd values).
  EXPECT_FALSE(fires("monotone_after_maxpool", [](GraphBuilder& b) {
    int r = b.un("relu", b.input({1, 2, 4, 4}));
    int p = b.maxpool(r, 2, 2);
    int idx = b.g.value(p).producer;
    b.out({p, b.g.node(idx).outputs[1]});
  }));
  // Per-input-channel scale into a grouped conv.
  EXPECT_FALSE(fires("scale_into_conv", [](GraphBuilder& b) {
    int x = b.bin("mul", b.input({1, 4, 6, 6}), b.weight({4, 1, 1}));
    b.out({b.conv(x, b.weight({4, 2, 3, 3}), -1, 1, 1, 2)});
  }));
  // Different attributes: the two convs do not share one weight.
  EXPECT_FALSE(fires("conv_add_conv", [](GraphBuilder& b) {
    int x = b.input({1, 3, 8, 8});
    int p = b.conv(x, b.weight({4, 3, 3, 3}), -1, 1, 1);
    int q = b.node("convolution", {x, b.weight({4, 3, 3, 3}), -1}, {1, 4, 8, 8},
                   {{"stride", Shape{1, 1}}, {"padding", Shape{1, 1}}, {"dilation", Shape{1, 1}}, {"transposed", int64_t{0}},
                    {"output_padding", Shape{0, 0}}, {"groups", int64_t{1}}, {"extra", int64_t{1}}});
    b.out({b.bin("add", p, q)});
  }));
  // Integer arithmetic and alpha != 1 are left alone.
  EXPECT_FALSE(fires("add_const_chain", [](GraphBuilder& b) {
    int x = b.input(X4);
    int a = b.node("add", {x, b.cst(1.f)}, X4, {{"alpha", 2.0}});
    b.out({b.bin("add", a, b.cst(2.f))});
  }));
  // A shared intermediate: the rewrite would duplicate work, so nothing is gained.
  EXPECT_FALSE(fires("mul_const_chain", [](GraphBuilder& b) {
    int p = b.bin("mul", b.input(X4), b.cst(2.f));
    b.out({b.bin("mul", p, b.cst(3.f)), b.un("relu", p)});
  }));
}

// ---------------- engine behaviour ----------------
TEST(MathRule, EngineKeepsOutputsDistinctFromInputs) {
  // neg(neg(x)) returned as an output would alias graph input x (I6): it must stay.
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input(X4);
  b.out({b.un("neg", b.un("neg", x))});
  RuleStats st;
  Graph g = apply_math_rules(b.g, &st);
  EXPECT_EQ(st.applied(), 0);
  EXPECT_EQ(g.nodes().size(), 2u);
  // Two outputs that would both become relu(x) keep one of the pairs.
  GraphBuilder c(rng);
  int r = c.un("relu", c.input(X4));
  int n1 = c.un("neg", c.un("neg", r)), n2 = c.un("neg", c.un("neg", r));
  c.out({n1, n2});
  Graph h = apply_math_rules(c.g, &st);
  ASSERT_NO_THROW(ecg::verify_graph(h));
  EXPECT_EQ(st.applied(), 1);
  EXPECT_EQ(count_op(h, "neg"), 2);
  Buffers in = random_inputs(c.g, rng, -1, 1);
  EXPECT_TRUE(outputs_close(c.g, run_graph(c.g, in), run_graph(h, in)));
}

TEST(MathRule, EngineAppliesLargestReductionFirstAndReachesFixpoint) {
  // (((x*2)*3)*4)*5 plus (x+1)+2: chains collapse fully, and the result is a fixpoint.
  std::mt19937_64 rng(dnnfusion::testing::test_seed());
  GraphBuilder b(rng);
  int x = b.input(X4);
  int m = x;
  for (float c : {2.f, 3.f, 4.f, 5.f}) m = b.bin("mul", m, b.cst(c));
  int a = b.bin("add", b.bin("add", x, b.cst(1.f)), b.cst(2.f));
  b.out({m, a});
  RuleStats st;
  Graph g = fold(apply_math_rules(b.g, &st));
  EXPECT_EQ(st.rules["mul_const_chain"].applied, 3);
  EXPECT_EQ(st.rules["add_const_chain"].applied, 1);
  EXPECT_EQ(g.nodes().size(), 2u) << g.dump();
  EXPECT_EQ(st.flops_after, 2 * 120);
  EXPECT_EQ(st.flops_before, 6 * 120);
  // Partitions are independent: the two chains are rewritten in the same rounds.
  EXPECT_EQ(st.rounds, 3);
  Buffers in = random_inputs(b.g, rng, -1, 1);
  EXPECT_TRUE(outputs_close(b.g, run_graph(b.g, in), run_graph(g, in)));

  // Greedy choice: at (x/c1)*c2 both div_then_mul_const (saves a multiply) and the canonical
  // div_by_const (saves nothing) match; the FLOP-saving one goes first and leaves no division.
  GraphBuilder d(rng);
  d.out({d.bin("mul", d.bin("div", d.input(X4), d.weight({5})), d.cst(3.f))});
  fold(apply_math_rules(d.g, &st));
  EXPECT_EQ(st.rules["div_then_mul_const"].applied, 1);
  EXPECT_EQ(st.rules.count("div_by_const"), 0u);
  EXPECT_EQ(st.rules.count("mul_const_chain"), 0u);

  // Rules compose: conv(X,W1)+conv(X,W2) becomes one conv, then the channel scale after it folds
  // into that conv's weights.
  GraphBuilder c(rng);
  int in4 = c.input({1, 3, 8, 8});
  int p = c.conv(in4, c.weight({4, 3, 3, 3}), -1, 1, 1), q = c.conv(in4, c.weight({4, 3, 3, 3}), -1, 1, 1);
  c.out({c.bin("mul", c.bin("add", p, q), c.weight({4, 1, 1}))});
  Graph h = fold(apply_math_rules(c.g, &st));
  EXPECT_EQ(h.nodes().size(), 1u) << h.dump();
  EXPECT_EQ(h.nodes()[0].op, "convolution");
  EXPECT_EQ(st.rules["conv_add_conv"].applied, 1);
  EXPECT_EQ(st.rules["conv_channel_scale"].applied, 1);
  Buffers in2 = random_inputs(c.g, rng, -1, 1);
  EXPECT_TRUE(outputs_close(c.g, run_graph(c.g, in2), run_graph(h, in2)));
}

TEST(MathRule, UnknownRuleNameThrows) {
  Graph g;
  EXPECT_THROW(apply_math_rules(g, nullptr, {"no_such_rule"}), dnnfusion::Error);
}

// ---------------- fuzz: random graphs, random rule compositions ----------------
namespace {

// Random DAGs over an NCHW activation and a matrix branch. Each value carries a bound on its
// magnitude so that exp/reciprocal stay finite and fp32 error stays small relative to the output.
struct RandomGraph {
  GraphBuilder& b;
  std::mt19937_64& rng;
  struct Val {
    int id;
    double bound;
    bool positive;  // >= 0.05 everywhere
  };
  std::vector<Val> vals;
  std::vector<Val> mats;

  RandomGraph(GraphBuilder& builder, std::mt19937_64& r) : b(builder), rng(r) {}
  int pick(int n) { return static_cast<int>(dnnfusion::testing::rand_int(rng, 0, n - 1)); }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  Val& recent(std::vector<Val>& v) { return coin(0.7) ? v.back() : v[static_cast<size_t>(pick(static_cast<int>(v.size())))]; }

  int constant_like(const Shape& s, float lo, float hi) {
    switch (pick(3)) {
      case 0: return b.cst(std::uniform_real_distribution<float>(lo, hi)(rng) * (coin(0.5) ? 1.f : -1.f));
      case 1: return b.weight({s.size() > 1 ? s[1] : 1, 1, 1}, lo, hi);  // per channel
      default: return b.weight({s.back()}, lo, hi);
    }
  }

  void step4() {
    Val v = recent(vals);
    const Shape s = b.shape(v.id);
    Val out{-1, v.bound, false};
    switch (pick(20)) {
      case 16:
      case 17:
      case 18:
      case 19:
        if (!motif(v, &out)) return;
        break;
      case 0: out.id = b.un("relu", v.id); break;
      case 1: out.id = b.un("neg", v.id); break;
      case 2: out = {b.un("tanh", v.id), 1, false}; break;
      case 3: out = {b.un("sigmoid", v.id), 1, v.bound <= 2.9}; break;
      case 4:
        if (v.bound > 3) return;
        out = {b.un("exp", v.id), std::exp(v.bound), true};
        break;
      case 5: {
        const char* ops[] = {"mul", "add", "sub", "div"};
        const char* op = ops[pick(4)];
        int c = constant_like(s, 0.5f, 1.5f);
        out.id = coin(0.5) || std::string(op) == "div" ? b.bin(op, v.id, c) : b.bin(op, c, v.id);
        out.bound = std::string(op) == "mul" ? v.bound * 1.5 : std::string(op) == "div" ? v.bound * 2 : v.bound + 1.5;
        break;
      }
      case 6: {  // two activations of the same shape
        std::vector<Val> same;
        for (auto& w : vals)
          if (b.shape(w.id) == s) same.push_back(w);
        Val w = same[static_cast<size_t>(pick(static_cast<int>(same.size())))];
        const char* ops[] = {"mul", "add", "sub"};
        const char* op = ops[pick(3)];
        if (std::string(op) == "mul" && v.bound * w.bound > 50) return;
        out = {b.bin(op, v.id, w.id), std::string(op) == "mul" ? v.bound * w.bound : v.bound + w.bound, false};
        break;
      }
      case 7:
        if (!v.positive) return;
        out = {b.un(coin(0.5) ? "reciprocal" : "log", v.id), 20, false};
        break;
      case 8:
        if (s.size() != 4 || v.bound > 20) return;
        out = {b.conv(v.id, b.weight({s[1], s[1], 3, 3}, 0.05f, 0.2f), coin(0.5) ? b.weight({s[1]}) : -1, 1, 1),
               v.bound * s[1] * 9 * 0.2 + 1.5, false};
        break;
      case 9:
        if (s.size() != 4 || s[2] < 2) return;
        out.id = coin(0.5) ? b.maxpool(v.id, 2, 2) : b.avgpool(v.id, 2, 2);
        break;
      case 10: {
        if (s.size() != 4) return;
        const char* reds[] = {"sum", "mean", "amax"};
        const char* red = reds[pick(3)];
        out.id = b.reduce(red, v.id, {2, 3}, true);
        if (std::string(red) == "sum") out.bound = v.bound * s[2] * s[3];
        break;
      }
      case 11:  // a shuffle pair or a reshape pair
        if (s.size() != 4) return;
        out.id = coin(0.5) ? b.permute(b.transpose(v.id, 1, 3), {0, 3, 2, 1}) : b.view(b.view(v.id, {s[0], s[1], s[2] * s[3]}), s);
        break;
      case 12:
        if (s.size() != 4 || s[2] != 1 || s[3] != 1) return;
        out.id = b.expand(v.id, {s[0], s[1], 4, 4});
        break;
      case 13:
        if (s.size() != 4) return;
        out.id = b.batch_norm(v.id);
        out.bound = v.bound * 3 + 3;
        break;
      case 14: {  // a duplicated subexpression or a no-op
        switch (pick(3)) {
          case 0: out.id = b.bin("add", b.un("relu", v.id), b.un("relu", v.id)); out.bound *= 2; break;
          case 1: out.id = b.un("clone", v.id); break;
          default: out.id = b.bin("mul", v.id, b.cst(1.f)); break;
        }
        break;
      }
      default: {  // inverse pairs
        if (v.bound > 3) return;
        out.id = coin(0.5) ? b.un("log", b.un("exp", v.id)) : b.un("neg", b.un("neg", v.id));
        break;
      }
    }
    if (out.bound > 1e3) return;
    vals.push_back(out);
  }

  // Multi-op shapes that the table's rules look for (factors, pairs of convs, inverse pairs...).
  bool motif(const Val& v, Val* out) {
    const Shape s = b.shape(v.id);
    const bool nchw = s.size() == 4;
    switch (pick(12)) {
      case 0: {  // a*c + b*c, c shared
        if (v.bound > 20) return false;
        int c = constant_like(s, 0.5f, 1.5f);
        int w = b.un("tanh", v.id);
        *out = {b.bin(coin(0.5) ? "add" : "sub", b.bin("mul", v.id, c), b.bin("mul", c, w)), 1.5 * (v.bound + 1), false};
        return true;
      }
      case 1: {  // conv(v, W1) +/- conv(v, W2)
        if (!nchw || v.bound > 20) return false;
        auto conv = [&] { return b.conv(v.id, b.weight({s[1], s[1], 3, 3}, 0.05f, 0.2f), coin(0.5) ? b.weight({s[1]}) : -1, 1, 1); };
        *out = {b.bin(coin(0.5) ? "add" : "sub", conv(), conv()), 2 * (v.bound * s[1] * 9 * 0.2 + 1.5), false};
        return true;
      }
      case 2:  // exp(a) * exp(b) or / exp(b)
        if (v.bound > 1.5) return false;
        *out = {b.bin(coin(0.5) ? "mul" : "div", b.un("exp", v.id), b.un("exp", b.un("tanh", v.id))), 12, true};
        return true;
      case 3: {  // (A*sqrt(B))*(sqrt(B)*C) with B >= 0
        if (v.bound > 5) return false;
        int B = b.un("relu", v.id);
        int t = b.un("tanh", v.id);
        *out = {b.bin("mul", b.bin("mul", t, b.un("sqrt", B)), b.bin("mul", b.un("sqrt", B), t)), v.bound, false};
        return true;
      }
      case 4: {  // recip(p) * recip(p*q) for positive p, q
        if (!v.positive || v.bound > 5) return false;
        int q = b.un("sigmoid", b.un("tanh", v.id));  // in [0.26, 0.74]
        *out = {b.bin("mul", b.un("reciprocal", v.id), b.un("reciprocal", b.bin("mul", v.id, q))), 20 * 20 * 4, false};
        return true;
      }
      case 5: {  // a reduction of a per-channel scale / shift
        if (!nchw) return false;
        const char* reds[] = {"sum", "mean"};
        const char* ops[] = {"mul", "div", "add"};
        int c = b.weight({s[1], 1, 1}, 0.5f, 1.5f);
        *out = {b.reduce(reds[pick(2)], b.bin(ops[pick(3)], v.id, c), {2, 3}, coin(0.5)), (v.bound * 2 + 1.5) * s[2] * s[3], false};
        if (b.shape(out->id).size() == 2) out->id = b.view(out->id, {s[0], s[1], 1, 1});
        return true;
      }
      case 6:  // neg(a) +/- neg(b), neg(a) * neg(b)
        if (v.bound > 20) return false;
        *out = {b.bin(coin(0.5) ? "add" : (coin(0.5) ? "sub" : "mul"), b.un("neg", v.id), b.un("neg", b.un("tanh", v.id))),
                v.bound + 1, false};
        return true;
      case 7:  // conv of a channel-scaled or negated input
        if (!nchw || v.bound > 20) return false;
        *out = {b.conv(coin(0.5) ? b.bin("mul", v.id, b.weight({s[1], 1, 1}, 0.5f, 1.5f)) : b.un("neg", v.id),
                       b.weight({s[1], s[1], 1, 1}, 0.05f, 0.2f), b.weight({s[1]}), 1, 0),
                v.bound * 1.5 * s[1] * 0.2 + 1.5, false};
        return true;
      case 8:  // reduction chains
        if (!nchw) return false;
        out->id = b.reduce("sum", b.reduce("sum", v.id, {3}, true), {2}, true);
        out->bound = v.bound * s[2] * s[3];
        return true;
      case 9:  // prod(exp(x)) over the last dim
        if (!nchw || v.bound > 2) return false;
        out->id = b.view(b.node("prod", {b.un("exp", v.id)}, {s[0], s[1], s[2]}, {{"dim", int64_t{3}}, {"keepdim", int64_t{0}}}),
                         {s[0], s[1], s[2], 1});
        out->bound = std::exp(v.bound * s[3]);
        out->positive = v.bound * s[3] < 3;
        return true;
      case 10: {  // an expanded channel vector combined with a per-channel constant
        if (!nchw || s[2] != 1 || s[3] != 1) return false;
        int e = b.expand(v.id, {s[0], s[1], 3, 3});
        *out = {b.bin(coin(0.5) ? "mul" : "sub", e, b.weight({s[1], 1, 1})), v.bound * 1.5 + 1.5, false};
        return true;
      }
      default: {  // constants on the left of sub/div, affine chains
        int c = constant_like(s, 0.5f, 1.5f);
        if (coin(0.5)) *out = {b.bin("sub", b.cst(2.f), b.bin(coin(0.5) ? "add" : "sub", v.id, c)), v.bound + 3.5, false};
        else *out = {b.bin("add", b.bin("mul", b.bin("add", v.id, c), b.cst(1.25f)), b.weight({s.back()})), (v.bound + 1.5) * 1.25 + 1.5, false};
        return true;
      }
    }
  }

  void step2() {
    Val v = recent(mats);
    const Shape s = b.shape(v.id);
    Val out{-1, v.bound, false};
    switch (pick(7)) {
      case 5:
      case 6: {  // mm(v, W1) +/- mm(v, W2), addmm pairs
        if (v.bound > 20) return;
        const bool with_bias = coin(0.5);
        auto lin = [&] {
          int w = b.weight({s[1], 5}, 0.1f, 0.3f);
          return with_bias ? b.addmm(b.weight({5}), v.id, w) : b.mm(v.id, w);
        };
        out = {b.bin(with_bias || coin(0.5) ? "add" : "sub", lin(), lin()), 2 * (v.bound * s[1] * 0.3 + 1.5), false};
        break;
      }
      case 0:
        if (v.bound > 20) return;
        out = {b.mm(v.id, b.weight({s[1], 5}, 0.1f, 0.3f)), v.bound * s[1] * 0.3, false};
        break;
      case 1:
        if (v.bound > 20) return;
        out = {b.addmm(b.weight({5}), v.id, b.weight({s[1], 5}, 0.1f, 0.3f)), v.bound * s[1] * 0.3 + 1.5, false};
        break;
      case 2: out = {b.bin(coin(0.5) ? "mul" : "add", v.id, b.weight({s[1]})), v.bound * 1.5 + 1.5, false}; break;
      case 3: out.id = b.un("relu", v.id); break;
      default: {
        std::vector<Val> same;
        for (auto& w : mats)
          if (b.shape(w.id) == s) same.push_back(w);
        Val w = same[static_cast<size_t>(pick(static_cast<int>(same.size())))];
        out = {b.bin("add", v.id, w.id), v.bound + w.bound, false};
        break;
      }
    }
    if (out.bound > 1e3) return;
    mats.push_back(out);
  }

  void build(int steps) {
    vals.push_back({b.input({2, 4, 6, 6}), 1, false});
    mats.push_back({b.input({3, 5}), 1, false});
    for (int i = 0; i < steps; ++i) coin(0.75) ? step4() : step2();
    std::set<int> outs = {vals.back().id, mats.back().id};
    for (int i = pick(3); i > 0; --i) outs.insert(coin(0.5) ? vals[static_cast<size_t>(pick(static_cast<int>(vals.size())))].id
                                                            : mats[static_cast<size_t>(pick(static_cast<int>(mats.size())))].id);
    std::vector<int> o;
    for (int id : outs)
      if (b.g.value(id).producer >= 0) o.push_back(id);
    if (o.empty()) o.push_back(b.un("relu", vals.front().id));
    b.out(o);
  }
};

}  // namespace

TEST(MathRuleFuzz, RandomGraphsAndRuleCompositionsStayEquivalentAndIdempotent) {
  const uint64_t seed = dnnfusion::testing::test_seed();
  SCOPED_TRACE(dnnfusion::testing::seed_note());
  std::vector<std::string> names;
  for (const auto& r : math_rules()) names.push_back(r.name);
  std::map<std::string, int> fired;
  const int trials = 300;
  for (int trial = 0; trial < trials; ++trial) {
    std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(trial));
    SCOPED_TRACE("trial " + std::to_string(trial));
    GraphBuilder b(rng);
    RandomGraph rg(b, rng);
    rg.build(static_cast<int>(dnnfusion::testing::rand_int(rng, 4, 24)));
    ASSERT_NO_THROW(ecg::verify_graph(b.g));
    Buffers in = random_inputs(b.g, rng, -1.f, 1.f);
    const Buffers ref = run_graph(b.g, in);
    auto check = [&](const Graph& g, const std::string& what) {
      ASSERT_NO_THROW(ecg::verify_graph(g)) << what;
      ASSERT_EQ(g.inputs().size(), b.g.inputs().size());
      ASSERT_EQ(g.outputs().size(), b.g.outputs().size());
      ASSERT_TRUE(outputs_close(b.g, ref, run_graph(fold(g), in), 2e-5)) << what << "\nbefore:\n" << b.g.dump() << "after:\n" << g.dump();
    };
    // A random composition: subsets of rules, interleaved with the other rewriting passes.
    Graph cur = b.g;
    for (int step = 0; step < 4; ++step) {
      std::vector<std::string> subset;
      for (int k = static_cast<int>(dnnfusion::testing::rand_int(rng, 1, 10)); k > 0; --k)
        subset.push_back(names[static_cast<size_t>(rg.pick(static_cast<int>(names.size())))]);
      RuleStats st;
      cur = apply_math_rules(cur, &st, subset);
      EXPECT_LE(st.flops_after, st.flops_before);
      for (const auto& [n, r] : st.rules) fired[n] += r.applied;
      check(cur, "after rules");
      switch (rg.pick(4)) {
        case 0: cur = remove_noops(cur); break;
        case 1: cur = eliminate_common_subexpressions(cur); break;
        case 2: cur = fold_batchnorm(cur); break;
        default: cur = fold(cur); break;
      }
      check(cur, "after a pass");
    }
    RuleStats st;
    Graph full = apply_math_rules(cur, &st);
    for (const auto& [n, r] : st.rules) fired[n] += r.applied;
    check(full, "after the full table");
    RuleStats again;
    Graph twice = apply_math_rules(full, &again);
    EXPECT_EQ(again.applied(), 0) << full.dump();
    EXPECT_EQ(twice.dump(), full.dump());
    if (HasFatalFailure()) return;
  }
  std::printf("[ fuzz     ] %d graphs, %zu distinct rules fired:", trials, fired.size());
  for (const auto& [n, c] : fired) std::printf(" %s=%d", n.c_str(), c);
  std::printf("\n");
  EXPECT_GE(fired.size(), 40u) << "the fuzz graphs exercise too few rules to mean much";
}
