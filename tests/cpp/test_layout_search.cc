// Global layout search (csrc/target/cpu/layout/solve_layout_assignment): on random small problems the
// reduction must equal brute force wherever it claims to be exact (chains, trees, series-parallel
// graphs such as residual blocks), and on dense graphs return a consistent, never-better-than-
// optimal assignment; malformed problems are errors.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "common/error.h"
#include "kernel_test_util.h"
#include "target/cpu/layout/solve_layout_assignment.h"

namespace dnnfusion {
namespace {

using layout::LayoutProblem;

double brute_force(const LayoutProblem& p) {
  const size_t n = p.node_cost.size();
  std::vector<int> c(n, 0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(size_t)> rec = [&](size_t v) {
    if (v == n) {
      best = std::min(best, layout::assignment_cost(p, c));
      return;
    }
    for (size_t i = 0; i < p.node_cost[v].size(); ++i) {
      c[v] = static_cast<int>(i);
      rec(v + 1);
    }
  };
  rec(0);
  return best;
}

LayoutProblem random_problem(std::mt19937_64& rng, int n, const std::vector<std::pair<int, int>>& edges) {
  std::uniform_int_distribution<int> cands(1, 4);
  std::uniform_real_distribution<double> cost(0, 10);
  LayoutProblem p;
  for (int v = 0; v < n; ++v) {
    p.node_cost.emplace_back(static_cast<size_t>(cands(rng)));
    for (auto& c : p.node_cost.back()) c = cost(rng);
  }
  for (auto [a, b] : edges) {
    LayoutProblem::Edge e{a, b, std::vector<std::vector<double>>(p.node_cost[a].size(), std::vector<double>(p.node_cost[b].size()))};
    for (auto& row : e.cost)
      for (auto& c : row) c = (rng() % 3 == 0) ? 0.0 : cost(rng);  // many free transitions, as equal blocks are
    p.edges.push_back(std::move(e));
  }
  return p;
}

TEST(LayoutSearch, ChainsTreesAndSeriesParallelGraphsAreOptimal) {
  std::mt19937_64 rng(testing::test_seed());
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 6);
    std::vector<std::pair<int, int>> edges;
    const int family = trial % 3;  // chain | tree | ladder of residual blocks (a 2-tree)
    for (int v = 1; v < n; ++v) {
      if (family == 0) edges.push_back({v - 1, v});
      else if (family == 1) edges.push_back({static_cast<int>(rng() % v), v});
      else {
        edges.push_back({v - 1, v});
        if (v >= 2) edges.push_back({v - 2, v});
      }
    }
    if (rng() % 4 == 0 && n >= 2) edges.push_back({0, 1});  // a parallel edge (two tensors between the same convs)
    LayoutProblem p = random_problem(rng, n, edges);
    auto s = layout::solve_layout_assignment(p);
    ASSERT_TRUE(s.exact) << "trial " << trial << " " << testing::seed_note();
    EXPECT_NEAR(s.cost, brute_force(p), 1e-9) << "trial " << trial << " " << testing::seed_note();
    EXPECT_NEAR(s.cost, layout::assignment_cost(p, s.choice), 1e-12);
  }
}

TEST(LayoutSearch, DenseGraphsGetAConsistentAssignment) {
  std::mt19937_64 rng(testing::test_seed() + 1);
  int heuristic = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 4 + static_cast<int>(rng() % 3);
    std::vector<std::pair<int, int>> edges;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) edges.push_back({a, b});  // complete graph: needs RN
    LayoutProblem p = random_problem(rng, n, edges);
    auto s = layout::solve_layout_assignment(p);
    heuristic += !s.exact;
    EXPECT_NEAR(s.cost, layout::assignment_cost(p, s.choice), 1e-12);
    EXPECT_GE(s.cost + 1e-9, brute_force(p));
    if (s.exact) EXPECT_NEAR(s.cost, brute_force(p), 1e-9) << testing::seed_note();
  }
  EXPECT_GT(heuristic, 0) << "complete graphs of 4+ variables must take the RN step";
}

TEST(LayoutSearch, PrefersOneBlockThroughoutWhenTransformsCost) {
  // Three convs in a chain, each slightly faster in its own block, transforms expensive: one block wins.
  LayoutProblem p;
  p.node_cost = {{1.0, 1.2}, {1.3, 1.0}, {1.0, 1.1}};
  for (int v = 0; v + 1 < 3; ++v) p.edges.push_back({v, v + 1, {{0, 5}, {5, 0}}});
  auto s = layout::solve_layout_assignment(p);
  EXPECT_EQ(s.choice, (std::vector<int>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(s.cost, 3.3);
}

TEST(LayoutSearch, MalformedProblemsAreErrors) {
  LayoutProblem empty_var;
  empty_var.node_cost = {{1.0}, {}};
  EXPECT_THROW(layout::solve_layout_assignment(empty_var), Error);
  LayoutProblem bad_edge;
  bad_edge.node_cost = {{1.0, 2.0}, {1.0}};
  bad_edge.edges.push_back({0, 1, {{0.0}}});  // one row for two candidates
  EXPECT_THROW(layout::solve_layout_assignment(bad_edge), Error);
  bad_edge.edges[0] = {0, 0, {{0.0}, {0.0}}};
  EXPECT_THROW(layout::solve_layout_assignment(bad_edge), Error);
}

}  // namespace
}  // namespace dnnfusion
