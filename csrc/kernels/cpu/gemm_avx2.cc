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

// R rows of the tile (R <= kMR; packed A still has kMR floats per k step). Fewer rows than
// FMA latency x ports leaves the FMA units waiting on the accumulator chains, so small R keeps U
// independent partial sums over k (k, k+1, ...) and adds them at the end: a GEMV (M = 1) runs at
// load/bandwidth speed instead of at one FMA per latency.
template <int R>
void ukernel_rows(int64_t kc, const float* Ap, const float* Bp, float* C, int64_t ldc,
                  const UkArgs& args) {
  constexpr int U = R >= 4 ? 1 : 4 / R;
  __m256 c0[U][R], c1[U][R];
#pragma GCC unroll 12
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) c0[u][i] = c1[u][i] = _mm256_setzero_ps();
  auto step = [&]() __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m256 b0 = _mm256_load_ps(Bp + u * kNR);
      const __m256 b1 = _mm256_load_ps(Bp + u * kNR + 8);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const __m256 a = _mm256_broadcast_ss(Ap + u * kMR + i);
        c0[u][i] = _mm256_fmadd_ps(a, b0, c0[u][i]);
        c1[u][i] = _mm256_fmadd_ps(a, b1, c1[u][i]);
      }
    }
    Ap += U * kMR;
    Bp += U * kNR;
  };
  int64_t k = 0;
  if (args.pf_lines > 0) {
    // One line of the caller's prefetch range every `every` steps (see gemm_avx512.cc).
    const int64_t per = kc / args.pf_lines / U;  // no std::max: see gemm_ukernel.h
    const int64_t every = (per > 1 ? per : 1) * U;
    const char* pf = args.pf;
    for (int64_t l = 0; l < args.pf_lines && k + every <= kc; ++l, pf += 64) {
      _mm_prefetch(pf, _MM_HINT_T1);
      for (int64_t e = 0; e < every; e += U) step();
      k += every;
    }
  }
  for (; k + U <= kc; k += U) step();
  for (; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(Bp);
    const __m256 b1 = _mm256_load_ps(Bp + 8);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      constexpr int u = 0;
      const __m256 a = _mm256_broadcast_ss(Ap + u * kMR + i);
      c0[0][i] = _mm256_fmadd_ps(a, b0, c0[0][i]);
      c1[0][i] = _mm256_fmadd_ps(a, b1, c1[0][i]);
    }
    Ap += kMR;
    Bp += kNR;
  }
#pragma GCC unroll 4
  for (int u = 1; u < U; ++u)
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      c0[0][i] = _mm256_add_ps(c0[0][i], c0[u][i]);
      c1[0][i] = _mm256_add_ps(c1[0][i], c1[u][i]);
    }
  const bool has_beta = args.beta != 0.f;
  const __m256 beta = _mm256_set1_ps(args.beta);
  __m256 bc0 = _mm256_setzero_ps(), bc1 = _mm256_setzero_ps();
  if (args.bcol) {
    bc0 = _mm256_loadu_ps(args.bcol);
    bc1 = _mm256_loadu_ps(args.bcol + 8);
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* c = C + i * ldc;
    __m256 v0 = c0[0][i], v1 = c1[0][i];
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
constexpr UkFn kByRows[kMR + 1] = {nullptr,          &ukernel_rows<1>, &ukernel_rows<2>, &ukernel_rows<3>,
                                   &ukernel_rows<4>, &ukernel_rows<5>, &ukernel_rows<6>};
constexpr UkInfo kInfo{kMR, kNR, &ukernel_rows<kMR>, 256, 1536, 240, kByRows};

}  // namespace

const UkInfo* ukernel_avx2() { return &kInfo; }

}  // namespace dnnfusion::kernels::gemm_detail
