#include "common/large_alloc.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace dnnfusion {

namespace {
// Sits in the 64 bytes before every pointer handed out: what free_large must release.
struct Header {
  void* base;         // malloc'd block, or the start of the mapping
  size_t mapped;      // 0: base came from malloc; else the mapping's length
  bool advised;       // MADV_HUGEPAGE was applied
};
static_assert(sizeof(Header) <= 64, "the header must fit the 64 bytes before the buffer");

Header* header_of(const void* p) {
  return reinterpret_cast<Header*>(const_cast<char*>(static_cast<const char*>(p)) - 64);
}

uintptr_t round_up(uintptr_t v, uintptr_t to) { return (v + to - 1) / to * to; }
}  // namespace

void* allocate_large(size_t bytes) {
  if (bytes < kHugePageBytes) {
    void* base = std::malloc(bytes + 128);  // room to align and for the header
    if (!base) throw std::bad_alloc();
    char* p = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(base) + 64, 64));
    *header_of(p) = Header{base, 0, false};
    return p;
  }
  // One extra huge page of address space lets the buffer start on a 2 MiB boundary; only the
  // header's page of it is ever touched.
  const size_t mapped = static_cast<size_t>(round_up(bytes, 4096)) + kHugePageBytes;
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  char* p = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(base) + 64, kHugePageBytes));
  bool advised = false;
#ifdef MADV_HUGEPAGE
  // Before the first touch: a fault in an advised range then maps a whole huge page at once.
  advised = madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE) == 0;
#endif
  *header_of(p) = Header{base, mapped, advised};
  return p;
}

void free_large(void* p) {
  if (!p) return;
  const Header h = *header_of(p);
  if (h.mapped)
    munmap(h.base, h.mapped);
  else
    std::free(h.base);
}

bool is_huge_page_advised(const void* p) { return p && header_of(p)->advised; }

}  // namespace dnnfusion
