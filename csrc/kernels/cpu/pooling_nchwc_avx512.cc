// AVX-512 row of NCHW[x]c max pooling (see pooling_nchwc_ukernel.h). Why a separate ISA path: the
// SSE row covers a 64-lane block in two passes of eight xmm each and tracks NaN lanes with a
// compare and an OR per vector; here one pass holds the whole block in four zmm and the NaN lanes
// in mask registers, reading each input line once. Cache-hot, 2 threads: VGG-16's 64-channel
// 224 -> 112 pool 404 -> 270 us, its 128-channel 112 -> 56 189 -> 118 us, ResNet's 3x3/2 stem pool
// 120 -> 83 us (in the model the SSE row took 0.78 ms for the first, ONNX Runtime 0.31 ms). The
// row also prefetches the rows the next output row adds (the driver's next_rows says which).
#include <immintrin.h>

#include <limits>

#include "kernels/cpu/pooling_nchwc_ukernel.h"

namespace dnnfusion::kernels::pool_detail {
namespace {

// GCC 12 warns that the max/compare intrinsics read an uninitialized source (their masked forms
// pass an undefined vector); nothing reads it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <int NV>
void row_lanes(const Pool2dShape& s, const float* plane, int64_t oh, TapRange rows, const TapRange* cols,
               float* out, int64_t b, const char* pf, int64_t pf_lines) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(-1));
  const int64_t pf_per = (pf_lines + s.OW - 1) / s.OW;  // no std:: helpers here: see the header
  for (int64_t ow = 0; ow < s.OW; ++ow) {
    for (int64_t l = 0; l < pf_per && pf_lines > 0; ++l, --pf_lines, pf += 64) _mm_prefetch(pf, _MM_HINT_T0);
    __m512 acc[NV];
    __mmask16 bad[NV];
    for (int v = 0; v < NV; ++v) {
      acc[v] = ninf;
      bad[v] = 0;
    }
    for (int64_t i = rows.lo; i < rows.hi; ++i) {
      const float* r = plane + ((oh * s.sh - s.ph + i * s.dh) * s.W + ow * s.sw - s.pw) * b;
      for (int64_t j = cols[ow].lo; j < cols[ow].hi; ++j) {
        const float* t = r + j * s.dw * b;
        for (int v = 0; v < NV; ++v) {
          const __m512 x = _mm512_loadu_ps(t + 16 * v);
          acc[v] = _mm512_max_ps(acc[v], x);
          bad[v] = static_cast<__mmask16>(bad[v] | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q));
        }
      }
    }
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out + ow * b + 16 * v, _mm512_mask_mov_ps(acc[v], bad[v], nan));
  }
}
#pragma GCC diagnostic pop

}  // namespace

void max_row_avx512(const Pool2dShape& s, const float* plane, int64_t oh, TapRange rows, const TapRange* cols,
                    float* out, int64_t b, const char* pf, int64_t pf_lines) {
  for (int64_t l = 0; l < b;) {  // lanes in groups of up to 64; the first group prefetches
    const int64_t left = (b - l) / 16;
    if (left >= 4) row_lanes<4>(s, plane + l, oh, rows, cols, out + l, b, pf, pf_lines), l += 64;
    else if (left == 3) row_lanes<3>(s, plane + l, oh, rows, cols, out + l, b, pf, pf_lines), l += 48;
    else if (left == 2) row_lanes<2>(s, plane + l, oh, rows, cols, out + l, b, pf, pf_lines), l += 32;
    else row_lanes<1>(s, plane + l, oh, rows, cols, out + l, b, pf, pf_lines), l += 16;
    pf_lines = 0;
  }
}

}  // namespace dnnfusion::kernels::pool_detail
