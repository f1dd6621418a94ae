// Global layout search (NeoCPU §3.3): choose one candidate scheme per convolution so that the sum
// of the convolutions' own times and the layout-transform costs between them is smallest. The
// problem is a PBQP (partitioned boolean quadratic problem): a cost vector per variable and a cost
// matrix per pair of variables joined by a tensor. It is solved by reduction:
//   R0 (no neighbour: take its cheapest choice), R1 (one neighbour: fold the variable into it —
//   on a chain this is exactly dynamic programming in topological order), R2 (two neighbours:
//   replace it by an edge between them) are exact; RN (heuristic, only when every remaining
//   variable has three or more neighbours) fixes the variable of highest degree to its locally
//   best choice. Series-parallel graphs (chains, residual blocks, inception-style branches) never
//   need RN, so their result is optimal.
// Precondition: every variable has at least one candidate; matrix sizes match the candidate
// counts; costs are finite. Postcondition: one choice per variable, `cost` = the total of that
// assignment, `exact` = no RN step was taken.
#pragma once
#include <vector>

namespace dnnfusion::layout {

struct LayoutProblem {
  std::vector<std::vector<double>> node_cost;  // [variable][candidate]
  struct Edge {
    int a, b;
    std::vector<std::vector<double>> cost;  // [candidate of a][candidate of b]
  };
  std::vector<Edge> edges;
};

struct LayoutSolution {
  std::vector<int> choice;  // per variable
  double cost = 0;
  bool exact = true;
};

// Throws dnnfusion::Error on a malformed problem.
LayoutSolution solve_layout_assignment(const LayoutProblem& p);

// Total cost of an assignment (for tests and reports).
double assignment_cost(const LayoutProblem& p, const std::vector<int>& choice);

}  // namespace dnnfusion::layout
