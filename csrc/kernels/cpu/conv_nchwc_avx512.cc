// AVX-512 tiles of the NCHW[x]c convolution family: oc_bn = 16 (one zmm per position, up to 28
// positions: 28 accumulators + 1 weight vector of the 32 zmm; the broadcast is folded into the FMA's
// memory operand), 32 (two zmm, up to 14 positions), 64 (four zmm, up to 7 positions: 28
// accumulators + 4 weight vectors) and 8 (one ymm, 32 ymm with AVX-512VL, up to 28 positions). Compiled with -mavx512*; only reached through the getters below when cpu_features
// says the CPU has AVX-512 (see conv_nchwc_ukernel.h for why the ops live in an anonymous namespace).
#include <immintrin.h>

#include "kernels/cpu/conv_nchwc_tile.h"

namespace dnnfusion::kernels::nchwc_detail {
namespace {

struct Zmm {
  using V = __m512;
  static constexpr int L = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V bcast(float s) { return _mm512_set1_ps(s); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  // Compare-and-select keeps NaN (NaN < 0 and NaN > 6 are both false).
  static V relu(V v) {
    const V z = zero();
    return v < z ? z : v;
  }
  static V relu6(V v) {
    const V six = _mm512_set1_ps(6.f);
    v = relu(v);
    return v > six ? six : v;
  }
};

struct Ymm {
  using V = __m256;
  static constexpr int L = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V bcast(float s) { return _mm256_set1_ps(s); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V relu(V v) {
    const V z = zero();
    return v < z ? z : v;
  }
  static V relu6(V v) {
    const V six = _mm256_set1_ps(6.f);
    v = relu(v);
    return v > six ? six : v;
  }
};

}  // namespace

NchwcTileFn conv_tile_avx512(int oc_bn, int rn, bool k1, bool unroll) {
  switch (oc_bn) {
    case 8: return pick_conv_any<Ymm, 1, 28>(rn, k1, unroll);
    case 16: return pick_conv_any<Zmm, 1, 28>(rn, k1, unroll);
    case 32: return pick_conv_any<Zmm, 2, 14>(rn, k1, unroll);
    case 64: return pick_conv_any<Zmm, 4, 7>(rn, k1, unroll);
    default: return nullptr;
  }
}

NchwcTileFn dw_tile_avx512(int c_bn, int rn) {
  switch (c_bn) {
    case 8: return pick_dw_tile<Ymm, 1, 28>(rn);
    case 16: return pick_dw_tile<Zmm, 1, 28>(rn);
    case 32: return pick_dw_tile<Zmm, 2, 14>(rn);
    case 64: return pick_dw_tile<Zmm, 4, 7>(rn);
    default: return nullptr;
  }
}

}  // namespace dnnfusion::kernels::nchwc_detail
