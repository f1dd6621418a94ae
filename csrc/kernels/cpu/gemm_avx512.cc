// AVX-512 GEMM micro-kernel: a 12x32 tile of C held in 24 zmm accumulators; per k step two
// 16-wide loads of packed B and 12 broadcasts of packed A. Compiled with -mavx512*; only reached
// through ukernel_avx512() when cpu_features says the CPU has AVX-512 (see gemm_ukernel.h for why
// this file includes nothing with inline functions).
#include <immintrin.h>

#include "kernels/cpu/gemm_ukernel.h"

namespace dnnfusion::kernels::gemm_detail {
namespace {

constexpr int kMR = 12, kNR = 32;

inline __m512 act512(__m512 v, Activation act) {
  // Compare-and-select (GCC vector extensions) keeps NaN: NaN < 0 and NaN > 6 are both false.
  // (_mm512_max_ps would do too, but trips a GCC 12 -Wmaybe-uninitialized false positive.)
  const __m512 zero = _mm512_setzero_ps();
  if (act == Activation::None) return v;
  v = v < zero ? zero : v;
  if (act == Activation::Relu6) {
    const __m512 six = _mm512_set1_ps(6.f);
    v = v > six ? six : v;
  }
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
  __m512 c0[U][R], c1[U][R];
#pragma GCC unroll 12
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) c0[u][i] = c1[u][i] = _mm512_setzero_ps();
  auto step = [&]() __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m512 b0 = _mm512_load_ps(Bp + u * kNR);
      const __m512 b1 = _mm512_load_ps(Bp + u * kNR + 16);
#pragma GCC unroll 12
      for (int i = 0; i < R; ++i) {
        const __m512 a = _mm512_set1_ps(Ap[u * kMR + i]);
        c0[u][i] = _mm512_fmadd_ps(a, b0, c0[u][i]);
        c1[u][i] = _mm512_fmadd_ps(a, b1, c1[u][i]);
      }
    }
    Ap += U * kMR;
    Bp += U * kNR;
  };
  int64_t k = 0;
  if (args.pf_lines > 0) {
    // One line of the caller's prefetch range every `every` steps: spread out, so the fetches
    // never fill the line-fill buffers that this tile's own loads need.
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
    const __m512 b0 = _mm512_load_ps(Bp);
    const __m512 b1 = _mm512_load_ps(Bp + 16);
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      constexpr int u = 0;
      const __m512 a = _mm512_set1_ps(Ap[u * kMR + i]);
      c0[0][i] = _mm512_fmadd_ps(a, b0, c0[0][i]);
      c1[0][i] = _mm512_fmadd_ps(a, b1, c1[0][i]);
    }
    Ap += kMR;
    Bp += kNR;
  }
#pragma GCC unroll 4
  for (int u = 1; u < U; ++u)
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      c0[0][i] = _mm512_add_ps(c0[0][i], c0[u][i]);
      c1[0][i] = _mm512_add_ps(c1[0][i], c1[u][i]);
    }
  const bool has_beta = args.beta != 0.f;
  const __m512 beta = _mm512_set1_ps(args.beta);
  __m512 bc0 = _mm512_setzero_ps(), bc1 = _mm512_setzero_ps();
  if (args.bcol) {
    bc0 = _mm512_loadu_ps(args.bcol);
    bc1 = _mm512_loadu_ps(args.bcol + 16);
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* c = C + i * ldc;
    __m512 v0 = c0[0][i], v1 = c1[0][i];
    if (has_beta) {
      v0 = _mm512_fmadd_ps(beta, _mm512_loadu_ps(c), v0);
      v1 = _mm512_fmadd_ps(beta, _mm512_loadu_ps(c + 16), v1);
    }
    if (args.brow) {
      const __m512 br = _mm512_set1_ps(args.brow[i]);
      v0 = _mm512_add_ps(v0, br);
      v1 = _mm512_add_ps(v1, br);
    }
    if (args.bcol) {
      v0 = _mm512_add_ps(v0, bc0);
      v1 = _mm512_add_ps(v1, bc1);
    }
    _mm512_storeu_ps(c, act512(v0, args.act));
    _mm512_storeu_ps(c + 16, act512(v1, args.act));
  }
}

// B block (kc x nc = 384 x 480 floats, 720 KB) stays in L2 while each 12-row A micro-panel (18 KB)
// sits in L1 and is reused across the whole block; B packed per call pays its packing once per
// block, so the block is large. Pre-packed B (weights) uses 768 x 96 (288 KB): narrow, so that
// it, the next block (prefetched into L2 while this one computes) and the packed A rows fit L2
// together, where 384 x 480 (two blocks plus A ~1.9 MB) left the weights streaming from L3; deep,
// so that a transformer's K = 768 is one block and a K = 3072 four, each K block boundary being
// one more pass of C through the caches. Measured with weights not in L2 (a different copy per
// call, as a model streams its layers), 2 threads: Xeon (2 MB L2), 384 x 480 -> 512 x 96:
// bert-base's GEMMs at M = 128 (qkv, ffn up, ffn down, attention out) 294/285/273/262 ->
// 320/315/302/298 GFLOP/s, bert-base 85.8/86.8 -> 80.2-81.3 ms; AMD Zen 5 (1 MB L2), 512 x 96 ->
// 768 x 96 in three alternating runs: at M = 1024 (batch 8) 496-505 -> 505-522 GFLOP/s, at
// M = 128 ffn down 418-487 -> 471-486 and the others 0-4% faster; bert-base at batch 8
// 394-406 -> 383-387 ms, batch 1 level; 1024 x 96 no better than 768.
constexpr UkFn kByRows[kMR + 1] = {nullptr,           &ukernel_rows<1>,  &ukernel_rows<2>, &ukernel_rows<3>,
                                   &ukernel_rows<4>,  &ukernel_rows<5>,  &ukernel_rows<6>, &ukernel_rows<7>,
                                   &ukernel_rows<8>,  &ukernel_rows<9>,  &ukernel_rows<10>, &ukernel_rows<11>,
                                   &ukernel_rows<12>};
// 16 x 16 blocks transposed in registers (unpack, then 128-bit lane shuffles), stored as `lines`-wide
// rows with a mask. The 4x4 SSE transposes it replaces stored 16 bytes per row and took ~16% of
// bert-base's attention (packing each head's K^T and Q). Measured in one process, interleaved
// with them: sdpa at bert-base batch 8 (q, k, v strided views of the QKV output) 7% faster;
// bert-base whole 1.9% (batch 1) and 1.5% (batch 8), 2 threads.
void transpose_lines(const float* src, int64_t stride, int lines, int64_t n, float alpha, float* dst, int64_t ld) {
  const __mmask16 row_mask = static_cast<__mmask16>((1u << lines) - 1u);
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t k = 0; k < n; k += 16) {
    const int64_t kn = n - k < 16 ? n - k : 16;  // no std::min here: see gemm_ukernel.h
    const __mmask16 k_mask = static_cast<__mmask16>((1u << kn) - 1u);
    __m512 r[16];
    for (int i = 0; i < 16; ++i)
      r[i] = i < lines ? _mm512_maskz_loadu_ps(k_mask, src + i * stride + k) : _mm512_setzero_ps();
    // Stage 1: interleave pairs of lines (32-bit elements).
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // Stage 2: 64-bit elements of line pairs two apart.
    for (int i = 0; i < 16; i += 4) {
      r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
      r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
      r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
      r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    // Now 128-bit lane q of r[4g + j] holds column 4q + j' of lines 4g..4g+3 (j' = the unpack order
    // 0, 1, 2, 3 for j = 0, 1, 2, 3). Stage 3/4: gather the four lane-q pieces of every group.
    for (int j = 0; j < 4; ++j) {
      const __m512 a = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44);       // lanes 0,1 of g0 | g1
      const __m512 b = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);  // lanes 0,1 of g2 | g3
      const __m512 c = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);       // lanes 2,3 of g0 | g1
      const __m512 d = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);  // lanes 2,3 of g2 | g3
      t[j] = _mm512_shuffle_f32x4(a, b, 0x88);       // lane 0 of g0..g3: column j
      t[4 + j] = _mm512_shuffle_f32x4(a, b, 0xDD);   // lane 1: column 4 + j
      t[8 + j] = _mm512_shuffle_f32x4(c, d, 0x88);   // lane 2: column 8 + j
      t[12 + j] = _mm512_shuffle_f32x4(c, d, 0xDD);  // lane 3: column 12 + j
    }
    for (int64_t c = 0; c < kn; ++c) _mm512_mask_storeu_ps(dst + (k + c) * ld, row_mask, _mm512_mul_ps(t[c], va));
  }
}

constexpr UkInfo kInfo{kMR, kNR, &ukernel_rows<kMR>, 384, 1536, 480, kByRows, 768, 96, &transpose_lines};

}  // namespace

const UkInfo* ukernel_avx512() { return &kInfo; }

}  // namespace dnnfusion::kernels::gemm_detail
