// Internal to the GEMM family: the contract between the portable driver (gemm.cc) and the
// ISA-specific register-blocked micro-kernels (gemm_avx2.cc, gemm_avx512.cc, scalar in gemm.cc).
// Deliberately free of inline functions and std templates: the ISA files are compiled with
// -mavx2/-mavx512*, and any inline function they emitted could be picked by the linker for
// baseline callers (ODR), which would crash on older CPUs.
#pragma once
#include <cstdint>

namespace dnnfusion::kernels {

// Applied in registers before the store. Relu/Relu6 propagate NaN like PyTorch.
enum class Activation : int8_t { None, Relu, Relu6 };

namespace gemm_detail {

// Epilogue of one full MR x NR tile. The driver folds alpha into packed A, so the micro-kernel
// computes C = act(acc + beta*C_old + brow[i] + bcol[j]); beta==0 means C is not read.
struct UkArgs {
  float beta;
  const float* brow;  // MR row biases or nullptr
  const float* bcol;  // NR column biases or nullptr
  Activation act;
  // Optional: pf_lines 64-byte lines from pf to bring into L2 while the tile computes (the next
  // B block of a pre-packed B, which would otherwise arrive from memory at full latency).
  const char* pf = nullptr;
  int64_t pf_lines = 0;
};

// Ap: packed A micro-panel, kc steps of MR floats. Bp: packed B micro-panel, kc steps of NR floats.
// Both 64-byte aligned. kc may be 0 (then acc == 0).
using UkFn = void (*)(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc,
                      const UkArgs& args);

// dst[k*ld + i] = alpha * src[i*stride + k] for i < lines (1..16), k < n: up to 16 contiguous
// source lines written as the rows of a packed panel (A's rows; a column-major B such as K^T in
// attention).
using TransposeFn = void (*)(const float* src, int64_t stride, int lines, int64_t n, float alpha, float* dst,
                             int64_t ld);

struct UkInfo {
  int mr, nr;
  UkFn fn;
  int64_t kc, mc, nc;  // cache blocking tuned for the ISA's tile
  // by_rows[r], 1 <= r <= mr: the same micro-kernel computing (and storing) only the first r rows
  // of the tile, so M < mr (a GEMV, batch-8 rows) does not pay for mr rows; nullptr: fn only.
  const UkFn* by_rows = nullptr;
  // Blocking when B comes pre-packed (weights; 0: kc / nc). No B packing to amortize there, so the
  // block can be as small as keeping it and the next (prefetched) block in L2 together asks.
  int64_t kc_prepacked = 0, nc_prepacked = 0;
  TransposeFn transpose_lines = nullptr;  // nullptr: the driver's 4-line SSE transposes
};

// Defined in the ISA files; only call when the CPU supports the ISA.
const UkInfo* ukernel_avx2();
const UkInfo* ukernel_avx512();

}  // namespace gemm_detail
}  // namespace dnnfusion::kernels
