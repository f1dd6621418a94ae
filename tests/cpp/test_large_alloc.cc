// Buffers from common/large_alloc: 64-byte alignment always, 2 MiB alignment and the huge-page
// advice from kHugePageBytes up (the kernel's VmFlags for the range say "hg"), every byte usable,
// distinct pointers for empty requests, and graph constants and executor arenas built on them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/large_alloc.h"
#include "ecg/graph.h"

namespace dnnfusion {
namespace {

// The VmFlags line of the /proc/self/smaps entry holding address p ("" when not readable).
std::string vm_flags_of(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

// Whether this kernel has transparent huge pages at all (without them madvise refuses the advice
// and the buffers are only aligned).
bool thp_available() { return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good(); }

TEST(LargeAlloc, SmallBuffersAreAlignedAndUsable) {
  std::vector<void*> ps;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{4097}, size_t{1} << 20}) {
    void* p = allocate_large(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    EXPECT_FALSE(is_huge_page_advised(p)) << bytes;
    std::memset(p, 0xAB, bytes);
    for (void* q : ps) EXPECT_NE(p, q);
    ps.push_back(p);
  }
  for (void* p : ps) free_large(p);
  free_large(nullptr);
}

TEST(LargeAlloc, LargeBuffersStartOnAHugePageAndAreAdvised) {
  for (size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes + 4096 + 12}) {
    auto* p = static_cast<unsigned char*>(allocate_large(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << bytes;
    for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<unsigned char>(i);
    p[bytes - 1] = 7;
    EXPECT_EQ(p[bytes - 1], 7);
    if (thp_available()) {
      const std::string flags = vm_flags_of(p);
      ASSERT_FALSE(flags.empty()) << "no /proc/self/smaps entry for the buffer";
      // "hg": advised MADV_HUGEPAGE (whether the kernel then backs it is its policy).
      EXPECT_TRUE(is_huge_page_advised(p));
      EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
    }
    free_large(p);
  }
}

TEST(LargeAlloc, GraphConstantsKeepTheirValues) {
  ecg::Graph g;
  std::vector<float> big(kHugePageBytes / sizeof(float) + 5), small(7);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) * 0.5f;
  for (size_t i = 0; i < small.size(); ++i) small[i] = -static_cast<float>(i);
  const int b = g.add_constant({static_cast<int64_t>(big.size())}, DType::Float32, big.data(), "big");
  const int s = g.add_constant({static_cast<int64_t>(small.size())}, DType::Float32, small.data(), "small");
  const void* bd = g.value(b).data;
  EXPECT_EQ(std::memcmp(bd, big.data(), big.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(g.value(s).data, small.data(), small.size() * sizeof(float)), 0);
  EXPECT_EQ(is_huge_page_advised(bd), thp_available());
  EXPECT_FALSE(is_huge_page_advised(g.value(s).data));
}

}  // namespace
}  // namespace dnnfusion
