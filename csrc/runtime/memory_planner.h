// Static memory planning: intermediate buffers whose lifetimes do not overlap share arena space.
// Precondition: each request has size >= 0 and first <= last (inclusive step indices).
// Postcondition: offsets are `alignment`-aligned, and any two requests whose lifetimes overlap
// occupy disjoint byte ranges of [0, arena_bytes).
#pragma once
#include <cstdint>
#include <vector>

namespace dnnfusion::runtime {

struct BufferRequest {
  int64_t size = 0;
  int first = 0;  // step that writes it
  int last = 0;   // last step that reads it
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // one per request
  int64_t arena_bytes = 0;       // peak: the arena the plan needs
  int64_t naive_bytes = 0;       // what one buffer per request would need
};

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, int64_t alignment = 64);

}  // namespace dnnfusion::runtime
