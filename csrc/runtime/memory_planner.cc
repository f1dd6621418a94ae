#include "runtime/memory_planner.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"

namespace dnnfusion::runtime {

MemoryPlan plan_memory(const std::vector<BufferRequest>& reqs, int64_t alignment) {
  DNNF_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two, got ", alignment);
  MemoryPlan plan;
  plan.offsets.assign(reqs.size(), 0);
  auto align = [&](int64_t x) { return (x + alignment - 1) / alignment * alignment; };
  for (const auto& r : reqs) {
    DNNF_CHECK(r.size >= 0 && r.first <= r.last, "bad buffer request (size ", r.size, ", steps ", r.first, "..", r.last, ")");
    plan.naive_bytes += align(r.size);
  }
  // Largest first, then earliest: big buffers get the low offsets and small ones fill the gaps
  // (greedy by size, best fit), which is close to optimal on DNN graphs.
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (reqs[a].size != reqs[b].size) return reqs[a].size > reqs[b].size;
    return reqs[a].first < reqs[b].first;
  });
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of placed buffers alive at the same time
  for (size_t idx : order) {
    const auto& r = reqs[idx];
    const int64_t size = align(std::max<int64_t>(r.size, 1));
    busy.clear();
    for (size_t p : placed)
      if (reqs[p].first <= r.last && r.first <= reqs[p].last)
        busy.emplace_back(plan.offsets[p], plan.offsets[p] + align(std::max<int64_t>(reqs[p].size, 1)));
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
    for (const auto& [b, e] : busy) {
      if (b > cursor && b - cursor >= size && b - cursor < best_gap) {
        best = cursor;
        best_gap = b - cursor;
      }
      cursor = std::max(cursor, e);
    }
    plan.offsets[idx] = best >= 0 ? best : cursor;
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[idx] + size);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace dnnfusion::runtime
