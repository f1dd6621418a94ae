// AVX2+FMA GEMM micro-kernel: a 6x16 tile of C in 12 ymm accumulators; per k step two 8-wide
// loads of packed B and 6 broadcasts of packed A. Compiled with -mavx2 -mfma; only reached through
// ukernel_avx2() when cpu_features says the CPU has AVX2+FMA (see gemm_ukernel.h for why this file
// includes nothing with inline functions).
#include <immintrin.h>

#include "kernels/cpu/gemm_ukernel.h"

namespace dnnfusion::kernels::gemm_detail {
namespace {

constexpr int kMR = 6, kNR = 16;

inline __m256 act256(__m256 v, Activation act) {
  // max/min return the second operand when either is NaN: putting v second keeps NaN.
  const __m256 zero = _mm256_setzero_ps();
  if (act == Activation::Relu) return _mm256_max_ps(zero, v);
  if (act == Activation::Relu6) return _mm256_min_ps(_mm256_set1_ps(6.f), _mm256_max_ps(zero, v));
  return v;
}

void ukernel(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc,
             const UkArgs& args) {
  __m256 c0[kMR], c1[kMR];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(Bp);
    const __m256 b1 = _mm256_load_ps(Bp + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m256 a = _mm256_broadcast_ss(Ap + i);
      c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
    }
    Ap += kMR;
    Bp += kNR;
  }
  const bool has_beta = args.beta != 0.f;
  const __m256 beta = _mm256_set1_ps(args.beta);
  __m256 bc0 = _mm256_setzero_ps(), bc1 = _mm256_setzero_ps();
  if (args.bcol) {
    bc0 = _mm256_loadu_ps(args.bcol);
    bc1 = _mm256_loadu_ps(args.bcol + 8);
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    float* c = C + i * ldc;
    __m256 v0 = c0[i], v1 = c1[i];
    if (has_beta) {
      v0 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c), v0);
      v1 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c + 8), v1);
    }
    if (args.brow) {
      const __m256 br = _mm256_set1_ps(args.brow[i]);
      v0 = _mm256_add_ps(v0, br);
      v1 = _mm256_add_ps(v1, br);
    }
    if (args.bcol) {
      v0 = _mm256_add_ps(v0, bc0);
      v1 = _mm256_add_ps(v1, bc1);
    }
    _mm256_storeu_ps(c, act256(v0, args.act));
    _mm256_storeu_ps(c + 8, act256(v1, args.act));
  }
}

// kc x nc = 256 x 240 floats (240 KB) of B fits a 256 KB+ L2; the 6-row A micro-panel (6 KB) in L1.
constexpr UkInfo kInfo{kMR, kNR, &ukernel, 256, 1536, 240};

}  // namespace

const UkInfo* ukernel_avx2() { return &kInfo; }

}  // namespace dnnfusion::kernels::gemm_detail
