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

}  // namespace

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
