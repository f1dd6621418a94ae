#include "fusion/plan_with_profiles.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/error.h"

namespace dnnfusion::fusion {

namespace {

// The node pair a yellow query is about: the candidate and the block node it is connected to
// (the block's dominant op when that one is adjacent).
std::pair<int, int> adjacent_pair(const ecg::Graph& g, const std::vector<int>& block, int cand) {
  std::pair<int, int> best{-1, -1};
  for (int b : block) {
    std::pair<int, int> pr{-1, -1};
    for (int v : g.node(b).inputs)
      if (v >= 0 && g.value(v).producer == cand) pr = {cand, b};
    for (int v : g.node(cand).inputs)
      if (v >= 0 && g.value(v).producer == b) pr = {b, cand};
    if (pr.first < 0) continue;
    if (best.first < 0 || g.node(b).info->mapping == ecg::MappingType::ManyToMany) best = pr;
  }
  DNNF_CHECK(best.first >= 0, "yellow fusion query for node ", cand, " which touches no node of its block");
  return best;
}

std::string query_key(const ecg::Graph& g, const YellowQuery& q, const ProfiledPlanning& pp) {
  auto [p, c] = adjacent_pair(g, q.block, q.candidate);
  std::vector<std::vector<int64_t>> shapes;
  for (int v : g.node(p).inputs)
    if (v >= 0) shapes.push_back(g.value(v).shape);
  shapes.push_back(g.value(g.node(c).outputs[0]).shape);
  return ProfileDb::make_key(pp.signature, g.node(p).op, g.node(c).op, shapes, pp.key_detail ? pp.key_detail(g, q) : "");
}

}  // namespace

Plan plan_with_profiles(Mode mode, const ecg::Graph& g, PlanHooks hooks, const ProfiledPlanning& pp, int* profiled) {
  std::vector<YellowQuery> pending;
  std::vector<std::string> pending_keys;
  if (pp.db && mode == Mode::DnnFusion) {
    hooks.yellow_is_faster = [&](const ecg::Graph& gr, const std::vector<int>& block, int cand) {
      YellowQuery q{block, cand};
      const std::string key = query_key(gr, q, pp);
      if (auto e = pp.db->lookup(key)) return e->fusing_not_slower();
      if (std::find(pending_keys.begin(), pending_keys.end(), key) == pending_keys.end()) {
        pending.push_back(std::move(q));
        pending_keys.push_back(key);
      }
      return false;
    };
  }
  int measured = 0;
  Plan plan;
  for (int round = 0;; ++round) {
    plan = plan_fusion(mode, g, hooks);
    if (pending.empty() || round == pp.max_rounds) break;
    const auto timings = pp.measure(g, pending);
    DNNF_CHECK(timings.size() == pending.size(), "cost oracle returned ", timings.size(), " timings for ",
               pending.size(), " yellow pairs");
    for (size_t i = 0; i < pending.size(); ++i)
      pp.db->store(pending_keys[i], ProfileDb::Entry{timings[i].fused_us, timings[i].separate_us});
    measured += static_cast<int>(pending.size());
    try {
      pp.db->save();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dnnfusion: %s (measurements kept for this process only)\n", e.what());
    }
    pending.clear();
    pending_keys.clear();
  }
  verify_plan(g, plan, hooks);
  if (profiled) *profiled = measured;
  return plan;
}

}  // namespace dnnfusion::fusion
