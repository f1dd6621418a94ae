// AVX2+FMA tiles of the NCHW[x]c convolution family: oc_bn = 8 (one ymm per position, up to 12
// positions: 12 accumulators + weight + broadcast of the 16 ymm) and 16 (two ymm, up to 6
// positions). Compiled with -mavx2 -mfma; only reached through the getters below when
// cpu_features says the CPU has AVX2+FMA (see conv_nchwc_ukernel.h for why the ops live in an
// anonymous namespace).
#include <immintrin.h>

#include "kernels/cpu/conv_nchwc_tile.h"

namespace dnnfusion::kernels::nchwc_detail {
namespace {

struct Ymm {
  using V = __m256;
  static constexpr int L = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V bcast(float s) { return _mm256_set1_ps(s); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  // max/min return the second operand when either is NaN: putting v second keeps NaN.
  static V relu(V v) { return _mm256_max_ps(zero(), v); }
  static V relu6(V v) { return _mm256_min_ps(_mm256_set1_ps(6.f), relu(v)); }
};

// SiLU and hardswish over whole ymm registers, the AVX-512 versions' formulas (conv_nchwc_avx512.cc)
// with AVX2's instructions: 2^n is built in the exponent bits (no scalef), the x < -87 case is a
// blend (no mask registers). Multiplying by an exact power of two rounds as scalef does, so both
// ISAs give the same floats.
__m256 silu8(__m256 x) {
  __m256 y = _mm256_mul_ps(x, _mm256_set1_ps(-1.44269504088896341f));
  y = _mm256_min_ps(_mm256_set1_ps(126.f), y);  // min/max return the second operand for NaN
  y = _mm256_max_ps(_mm256_set1_ps(-126.f), y);
  const __m256 n = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(y, n);
  __m256 p = _mm256_set1_ps(1.327647129073739e-3f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.675540961325169e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550713092088699e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022120237350464e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931469440460205e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0000001192092896f));
  // n in [-126, 126]: its biased exponent stays normal. A NaN n gives garbage bits, but p is NaN.
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 d = _mm256_add_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), _mm256_set1_ps(1.f));
  const __m256 out = _mm256_div_ps(x, d);
  // Below -87 exp(-x) is inf in float: x / inf is -0, and NaN for x = -inf, as in PyTorch.
  const __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(-87.f), _CMP_LT_OQ);
  return _mm256_blendv_ps(out, _mm256_mul_ps(x, _mm256_setzero_ps()), big);
}

__m256 hardswish8(__m256 x) {
  __m256 v = _mm256_add_ps(x, _mm256_set1_ps(3.f));
  v = _mm256_min_ps(_mm256_set1_ps(6.f), _mm256_max_ps(_mm256_setzero_ps(), v));  // NaN stays in v
  return _mm256_mul_ps(_mm256_mul_ps(x, v), _mm256_set1_ps(1.f / 6.f));
}

template <__m256 (*F)(__m256)>
void activate_rows(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(p + i, F(_mm256_loadu_ps(p + i)));
  if (i < n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)), lane);
    _mm256_maskstore_ps(p + i, m, F(_mm256_maskload_ps(p + i, m)));
  }
}

}  // namespace

void activate_inplace_avx2(float* p, int64_t n, int mode) {
  if (mode == 0) activate_rows<&hardswish8>(p, n);
  else activate_rows<&silu8>(p, n);
}

void row_channel_sums_avx2(const float* row, int64_t positions, int64_t b, float* sums) {
  row_channel_sums<Ymm>(row, positions, b, sums);
}

NchwcTileFn conv_tile_avx2(int oc_bn, int rn, bool k1, bool unroll) {
  switch (oc_bn) {
    case 8: return pick_conv_any<Ymm, 1, 12>(rn, k1, unroll);
    case 16: return pick_conv_any<Ymm, 2, 6>(rn, k1, unroll);
    default: return nullptr;
  }
}

NchwcTileFn conv_tile_rows2_avx2(int oc_bn, int h) {
  switch (oc_bn) {
    case 8: return pick_conv_tile_rows2<Ymm, 1, 6>(h);
    case 16: return pick_conv_tile_rows2<Ymm, 2, 3>(h);
    default: return nullptr;
  }
}

NchwcTileFn dw_tile_avx2(int c_bn, int rn) {
  switch (c_bn) {
    case 8: return pick_dw_tile<Ymm, 1, 12>(rn);
    case 16: return pick_dw_tile<Ymm, 2, 6>(rn);
    default: return nullptr;
  }
}

}  // namespace dnnfusion::kernels::nchwc_detail
