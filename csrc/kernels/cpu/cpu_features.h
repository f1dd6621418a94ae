// Run-time instruction-set selection for the CPU kernels. The binary is built for baseline x86-64;
// ISA-specific kernels live in *_avx2.cc / *_avx512.cc and are only called when active_isa() says the
// CPU has them. active_isa() = best_isa() unless overridden by force_isa() (tests) or by the
// environment variable DNNFUSION_ISA=scalar|avx2|avx512 (read once, at first use).
// Postcondition: active_isa() never names an ISA the CPU lacks (forcing one throws dnnfusion::Error).
#pragma once
#include <cstdint>
#include <string>

namespace dnnfusion::kernels {

enum class Isa : int8_t { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// Best ISA this CPU supports: Avx512 needs avx512f+dq+bw+vl, Avx2 needs avx2+fma.
Isa best_isa();
// The ISA kernels dispatch on now.
Isa active_isa();
// Overrides the choice (tests); throws dnnfusion::Error if the CPU lacks `isa`.
void force_isa(Isa isa);
// Drops a force_isa() override (the DNNFUSION_ISA environment override, if any, applies again).
void reset_isa();
const char* isa_name(Isa isa);
// True if this CPU can run kernels built for `isa`.
bool isa_supported(Isa isa);
// The CPU's brand string and family/model/stepping, e.g. "Intel(R) Xeon(R) ... [6/167/8]": what
// -march=native code and measured profiles are specific to.
std::string cpu_brand();
// Vendor and display family/model from cpuid (leaves 0 and 1), for the few defaults whose best
// value was measured to differ between microarchitectures (each such default says where).
struct CpuId {
  bool amd = false, intel = false;
  unsigned family = 0, model = 0;
};
const CpuId& cpu_id();
// AMX-TILE + AMX-BF16 + AVX512-BF16 in cpuid and the tile state enabled by the OS in XCR0 (the
// process must still request it from Linux before its first tile instruction: gemm_bf16x6).
bool cpu_has_amx_bf16();

}  // namespace dnnfusion::kernels
