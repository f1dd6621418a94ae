// Chooses the NCHW[x]c scheme of every convolution before propagate_blocked_layout runs (NeoCPU
// §3.2-3.3), in one of three ways:
//   - heuristic (nothing measured): the kernel family's default knobs, with the input block taken
//     from the producer when it divides the channels, so chains of convs never re-block;
//   - local search: per conv workload and (ic_bn, oc_bn) pair, the fastest knobs, measured once and
//     kept in the tuning database (tune=true measures what the database lacks, with a progress
//     bar; tune=false uses what it holds, heuristics elsewhere);
//   - global search (when every candidate has a measured time): one PBQP variable per conv, its
//     candidates the (ic_bn, oc_bn) pairs, node costs the measured conv times, edge costs between a
//     producing and a consuming conv (joined through layout-oblivious ops) the measured time of
//     re-blocking the tensor when the producer's oc_bn differs from the consumer's ic_bn. Solved by
//     solve_layout_assignment (exact DP on chains and series-parallel graphs).
// Precondition: the graph verifies. Postcondition: a scheme function for propagate_blocked_layout
// that accepts exactly the convolutions conv2d_nchwc supports with blocks dividing their channels,
// and a report of what was chosen and how.
#pragma once
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ecg/graph.h"
#include "target/cpu/layout/propagate_blocked_layout.h"

namespace dnnfusion::kernels {
struct Parallel;
}

namespace dnnfusion::layout {

class TuningDb;

struct ChooseOptions {
  bool tune = false;           // measure candidates the database lacks (and store them)
  bool global_search = true;   // false: every conv takes its own fastest candidate (ablation)
  TuningDb* db = nullptr;      // nullptr: heuristics only
  const kernels::Parallel* par = nullptr;  // the pool measurements run on (required when tune)
  int threads = 1;             // the thread count keys of the database carry
  // 3x3 stride-1 convs where kernels::conv_winograd_pays run Winograd F(2x2, 3x3) with the chosen
  // blocks; false: direct convolution everywhere (Python option winograd=False).
  bool winograd = true;
};

struct SchemeReport {
  int convs = 0;               // convolutions given a blocked scheme
  int tuned_now = 0;           // (workload, block pair) entries measured in this compile
  int from_db = 0;             // entries read from the database
  int heuristic = 0;           // convs that used heuristic knobs (nothing measured)
  bool global = false;         // the global search chose the blocks
  bool exact = true;           // ... and its solution is optimal (no heuristic PBQP step)
  double predicted_us = 0;     // global search: conv + transform time of the chosen assignment
  std::string method() const;  // "heuristic" | "local" | "global (exact)" | "global (heuristic)"
};

// The scheme per convolution node id; propagate_blocked_layout's callback looks them up.
struct ConvSchemes {
  std::unordered_map<int, ConvScheme> by_node;
  std::unordered_set<int> adaptive;  // heuristic schemes: take the producer's block as ic_bn when it divides C
  bool winograd = true;              // ChooseOptions::winograd
  SchemeReport report;
  ConvSchemeFn fn() const;  // refers to *this: keep it alive while the function is used
};

ConvSchemes choose_conv_schemes(const ecg::Graph& g, const ChooseOptions& opts);

}  // namespace dnnfusion::layout
