// FNV-1a over bytes and its 16-digit hex form: the stable keys of on-disk caches and generated
// entry names (the same text gives the same key in every process and build).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace dnnfusion {

inline uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

inline std::string hex64(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

}  // namespace dnnfusion
