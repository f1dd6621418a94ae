// See cpu_features.h. The override is an atomic so kernels running on pool threads see a
// force_isa() made on the test thread without further synchronisation.
#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <cstring>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.h"

namespace dnnfusion::kernels {
namespace {

constexpr int kNoOverride = -1;
std::atomic<int> g_forced{kNoOverride};

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
  return Isa::Scalar;
}

// Environment override, parsed once; kNoOverride when unset or empty.
int env_override() {
  static const int value = [] {
    const char* s = std::getenv("DNNFUSION_ISA");
    if (s == nullptr || *s == '\0') return kNoOverride;
    Isa isa;
    if (std::strcmp(s, "scalar") == 0) {
      isa = Isa::Scalar;
    } else if (std::strcmp(s, "avx2") == 0) {
      isa = Isa::Avx2;
    } else if (std::strcmp(s, "avx512") == 0) {
      isa = Isa::Avx512;
    } else {
      DNNF_THROW("DNNFUSION_ISA='", s, "' is not valid; allowed values: scalar, avx2, avx512");
    }
    if (!isa_supported(isa))
      DNNF_THROW("DNNFUSION_ISA=", s, " but this CPU only supports up to ", isa_name(best_isa()));
    return static_cast<int>(isa);
  }();
  return value;
}

}  // namespace

Isa best_isa() {
  static const Isa isa = detect();
  return isa;
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(best_isa()); }

Isa active_isa() {
  int f = g_forced.load(std::memory_order_relaxed);
  if (f != kNoOverride) return static_cast<Isa>(f);
  int e = env_override();
  if (e != kNoOverride) return static_cast<Isa>(e);
  return best_isa();
}

void force_isa(Isa isa) {
  if (!isa_supported(isa))
    DNNF_THROW("cannot force ISA ", isa_name(isa), ": this CPU only supports up to ",
               isa_name(best_isa()));
  g_forced.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void reset_isa() { g_forced.store(kNoOverride, std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "unknown";
}

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  __cpuid_count(7, 1, a, b, c, d);
  const bool avx512_bf16 = a & (1u << 5);
  if (!amx_bf16 || !amx_tile || !avx512_bf16) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & (3u << 17)) == (3u << 17);  // XTILECFG and XTILEDATA enabled by the OS
}

const CpuId& cpu_id() {
  static const CpuId id = [] {
    CpuId r;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
      char vendor[13] = {0};
      std::memcpy(vendor, &b, 4);
      std::memcpy(vendor + 4, &d, 4);
      std::memcpy(vendor + 8, &c, 4);
      r.amd = std::strcmp(vendor, "AuthenticAMD") == 0;
      r.intel = std::strcmp(vendor, "GenuineIntel") == 0;
    }
    if (__get_cpuid(1, &a, &b, &c, &d)) {
      r.family = ((a >> 8) & 0xf) + ((a >> 20) & 0xff);
      r.model = ((a >> 4) & 0xf) | ((a >> 12) & 0xf0);
    }
    return r;
  }();
  return id;
}

std::string cpu_brand() {
  unsigned regs[12] = {0};
  char brand[49] = {0};
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    std::memcpy(brand, regs, 48);
  }
  unsigned a = 0, b = 0, c = 0, d = 0;
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned family = ((a >> 8) & 0xf) + ((a >> 20) & 0xff), model = ((a >> 4) & 0xf) | ((a >> 12) & 0xf0);
  std::string s(brand);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s + " [" + std::to_string(family) + "/" + std::to_string(model) + "/" + std::to_string(a & 0xf) + "]";
}

}  // namespace dnnfusion::kernels
