#include "target/cpu/layout/solve_layout_assignment.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "common/error.h"

namespace dnnfusion::layout {

namespace {

using Matrix = std::vector<std::vector<double>>;

void check_problem(const LayoutProblem& p) {
  const int n = static_cast<int>(p.node_cost.size());
  for (int v = 0; v < n; ++v) {
    DNNF_CHECK(!p.node_cost[v].empty(), "layout problem: variable ", v, " has no candidate");
    for (double c : p.node_cost[v]) DNNF_CHECK(std::isfinite(c), "layout problem: variable ", v, " has a non-finite cost");
  }
  for (const auto& e : p.edges) {
    DNNF_CHECK(e.a >= 0 && e.a < n && e.b >= 0 && e.b < n && e.a != e.b, "layout problem: edge ", e.a, "-", e.b,
               " does not join two distinct variables of ", n);
    DNNF_CHECK(e.cost.size() == p.node_cost[e.a].size(), "layout problem: edge ", e.a, "-", e.b, " has ", e.cost.size(),
               " rows for ", p.node_cost[e.a].size(), " candidates");
    for (const auto& row : e.cost) {
      DNNF_CHECK(row.size() == p.node_cost[e.b].size(), "layout problem: edge ", e.a, "-", e.b, " has a row of ",
                 row.size(), " for ", p.node_cost[e.b].size(), " candidates");
      for (double c : row) DNNF_CHECK(std::isfinite(c), "layout problem: edge ", e.a, "-", e.b, " has a non-finite cost");
    }
  }
}

class Reducer {
 public:
  explicit Reducer(const LayoutProblem& p) : cost_(p.node_cost), adj_(p.node_cost.size()) {
    for (const auto& e : p.edges) add_edge(e.a, e.b, e.cost);
  }

  LayoutSolution solve() {
    const int n = static_cast<int>(cost_.size());
    std::set<int> alive;
    for (int v = 0; v < n; ++v) alive.insert(v);
    LayoutSolution sol;
    while (!alive.empty()) {
      int pick = -1;
      for (size_t want = 0; want <= 2 && pick < 0; ++want)
        for (int v : alive)
          if (adj_[v].size() == want) {
            pick = v;
            break;
          }
      if (pick < 0) {  // RN: every variable has >= 3 neighbours
        for (int v : alive)
          if (pick < 0 || adj_[v].size() > adj_[pick].size()) pick = v;
        reduce_rn(pick);
        sol.exact = false;
      } else if (adj_[pick].empty()) {
        steps_.push_back({Step::R0, pick, -1, -1, {}, {}});
      } else if (adj_[pick].size() == 1) {
        reduce_r1(pick);
      } else {
        reduce_r2(pick);
      }
      alive.erase(pick);
    }
    sol.choice.assign(n, 0);
    for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
      switch (it->kind) {
        case Step::R0: sol.choice[it->v] = argmin(cost_[it->v]); break;
        case Step::R1: sol.choice[it->v] = it->table1[sol.choice[it->u]]; break;
        case Step::R2: sol.choice[it->v] = it->table2[sol.choice[it->u]][sol.choice[it->w]]; break;
        case Step::RN: sol.choice[it->v] = it->u; break;  // u holds the fixed choice
      }
    }
    return sol;
  }

 private:
  struct Step {
    enum Kind { R0, R1, R2, RN } kind;
    int v, u, w;
    std::vector<int> table1;               // R1: best choice of v per choice of u
    std::vector<std::vector<int>> table2;  // R2: per (choice of u, choice of w)
  };

  static int argmin(const std::vector<double>& c) {
    int best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c[i] < c[best]) best = static_cast<int>(i);
    return best;
  }

  // Edge matrix oriented [choice of a][choice of b].
  double edge(int a, int b, int i, int j) const {
    return a < b ? edges_.at({a, b})[i][j] : edges_.at({b, a})[j][i];
  }

  void add_edge(int a, int b, const Matrix& m) {  // m is [a][b]; parallel edges add up
    Matrix oriented = m;
    if (a > b) {
      oriented.assign(m.empty() ? 0 : m[0].size(), std::vector<double>(m.size()));
      for (size_t i = 0; i < m.size(); ++i)
        for (size_t j = 0; j < m[i].size(); ++j) oriented[j][i] = m[i][j];
      std::swap(a, b);
    }
    auto [it, fresh] = edges_.emplace(std::make_pair(a, b), oriented);
    if (!fresh)
      for (size_t i = 0; i < oriented.size(); ++i)
        for (size_t j = 0; j < oriented[i].size(); ++j) it->second[i][j] += oriented[i][j];
    adj_[a].insert(b);
    adj_[b].insert(a);
  }

  void remove_vertex(int v) {
    for (int u : adj_[v]) {
      adj_[u].erase(v);
      edges_.erase({std::min(u, v), std::max(u, v)});
    }
    adj_[v].clear();
  }

  void reduce_r1(int v) {
    const int u = *adj_[v].begin();
    Step s{Step::R1, v, u, -1, std::vector<int>(cost_[u].size()), {}};
    for (size_t j = 0; j < cost_[u].size(); ++j) {
      double best = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < cost_[v].size(); ++i) {
        const double c = cost_[v][i] + edge(v, u, static_cast<int>(i), static_cast<int>(j));
        if (c < best) best = c, s.table1[j] = static_cast<int>(i);
      }
      cost_[u][j] += best;
    }
    remove_vertex(v);
    steps_.push_back(std::move(s));
  }

  void reduce_r2(int v) {
    auto it = adj_[v].begin();
    const int u = *it, w = *++it;
    const size_t nu = cost_[u].size(), nw = cost_[w].size();
    Step s{Step::R2, v, u, w, {}, std::vector<std::vector<int>>(nu, std::vector<int>(nw))};
    Matrix m(nu, std::vector<double>(nw));
    for (size_t j = 0; j < nu; ++j)
      for (size_t k = 0; k < nw; ++k) {
        double best = std::numeric_limits<double>::infinity();
        for (size_t i = 0; i < cost_[v].size(); ++i) {
          const int ii = static_cast<int>(i);
          const double c = cost_[v][i] + edge(v, u, ii, static_cast<int>(j)) + edge(v, w, ii, static_cast<int>(k));
          if (c < best) best = c, s.table2[j][k] = ii;
        }
        m[j][k] = best;
      }
    remove_vertex(v);
    add_edge(u, w, m);
    steps_.push_back(std::move(s));
  }

  void reduce_rn(int v) {
    int best_i = 0;
    double best = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < cost_[v].size(); ++i) {
      double c = cost_[v][i];
      for (int u : adj_[v]) {
        double m = std::numeric_limits<double>::infinity();
        for (size_t j = 0; j < cost_[u].size(); ++j)
          m = std::min(m, cost_[u][j] + edge(v, u, static_cast<int>(i), static_cast<int>(j)));
        c += m;
      }
      if (c < best) best = c, best_i = static_cast<int>(i);
    }
    for (int u : adj_[v])
      for (size_t j = 0; j < cost_[u].size(); ++j) cost_[u][j] += edge(v, u, best_i, static_cast<int>(j));
    remove_vertex(v);
    steps_.push_back({Step::RN, v, best_i, -1, {}, {}});
  }

  std::vector<std::vector<double>> cost_;
  std::vector<std::set<int>> adj_;
  std::map<std::pair<int, int>, Matrix> edges_;  // key (lo, hi), matrix [lo][hi]
  std::vector<Step> steps_;
};

}  // namespace

double assignment_cost(const LayoutProblem& p, const std::vector<int>& choice) {
  DNNF_CHECK(choice.size() == p.node_cost.size(), "layout assignment has ", choice.size(), " choices for ",
             p.node_cost.size(), " variables");
  double c = 0;
  for (size_t v = 0; v < choice.size(); ++v) c += p.node_cost[v].at(static_cast<size_t>(choice[v]));
  for (const auto& e : p.edges) c += e.cost[static_cast<size_t>(choice[e.a])][static_cast<size_t>(choice[e.b])];
  return c;
}

LayoutSolution solve_layout_assignment(const LayoutProblem& p) {
  check_problem(p);
  LayoutSolution s = Reducer(p).solve();
  s.cost = assignment_cost(p, s.choice);
  return s;
}

}  // namespace dnnfusion::layout
