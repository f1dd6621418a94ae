// DNNFusion planning with yellow cells (Table 3, fuse_depend) answered by measurement: the planner
// asks the profile database; the pairs it lacks are measured in one batch by the caller's cost
// oracle, stored, and the plan is made again with the answers (a few rounds at most, since an
// answer can open a merge that raises a new question). Without a database yellow never fuses.
// Precondition: the graph verifies. Postcondition: a plan that verify_plan accepts for `hooks`.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/profile_db.h"

namespace dnnfusion::fusion {

// A yellow cell to measure: fusing `candidate` into `block` (node ids) against running them apart.
struct YellowQuery {
  std::vector<int> block;
  int candidate = -1;
};
struct YellowTiming {
  double fused_us = 0;
  double separate_us = 0;
};

struct ProfiledPlanning {
  ProfileDb* db = nullptr;  // nullptr: no profiling (yellow never fuses)
  std::string signature;    // what the measurements are valid for (machine, threads, target)
  // What else identifies a measurement (attributes, the block's ops): part of the key.
  std::function<std::string(const ecg::Graph&, const YellowQuery&)> key_detail;
  // Measures the queries, one timing each.
  std::function<std::vector<YellowTiming>(const ecg::Graph&, const std::vector<YellowQuery>&)> measure;
  int max_rounds = 8;
};

// `profiled` (optional) receives how many pairs were measured (0: the database had them all).
Plan plan_with_profiles(Mode mode, const ecg::Graph& g, PlanHooks hooks, const ProfiledPlanning& pp,
                        int* profiled = nullptr);

}  // namespace dnnfusion::fusion
