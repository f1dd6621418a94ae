// AMX half of the bf16x6 GEMM: splitting fp32 rows of A into three bf16 terms, and the 32 x 32
// block of C as six tile products per k step. Compiled with -mamx-tile -mamx-bf16 -mavx512*;
// only reached when bf16x6_available() says the CPU and the OS allow AMX.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/gemm_bf16x6_ukernel.h"

namespace dnnfusion::kernels::bf16x6_detail {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The masked-off forms (all lanes) of the plain intrinsics: GCC 12 warns that their undefined
// pass-through operand "may be used uninitialized".
__m512 widen(__m256i bf16) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bf16), 16));
}

// x = hi + rest: hi the bf16 nearest x (both halves of 32 values), rest exact in fp32.
__m512i round_pair(__m512 lo, __m512 hi, __m512* lo_rest, __m512* hi_rest) {
  const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  *lo_rest = _mm512_sub_ps(lo, widen(_mm512_maskz_extracti64x4_epi64(0xff, h, 0)));
  *hi_rest = _mm512_sub_ps(hi, widen(_mm512_maskz_extracti64x4_epi64(0xff, h, 1)));
  return h;
}

__mmask16 not_finite(__m512 x, __mmask16 m) {
  return _mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(x), _mm512_set1_ps(__builtin_inff()), _CMP_NLT_UQ);
}

// Splits 32 floats (two masked halves of 16) into the three planes of one packed row step (64
// bytes per plane) with AVX512-BF16's rounding conversion; true if a value is inf or NaN, or so
// large that its first term rounds to inf (the caller then takes the plain fp32 path).
bool pack_step(const float* src0, __mmask16 m0, const float* src1, __mmask16 m1, uint16_t* out) {
  const __m512 x0 = _mm512_maskz_loadu_ps(m0, src0), x1 = _mm512_maskz_loadu_ps(m1, src1);
  __m512 r0, r1, s0, s1, t0, t1;
  const __m512i h = round_pair(x0, x1, &r0, &r1);
  const bool bad = (not_finite(x0, m0) | not_finite(x1, m1) | not_finite(r0, m0) | not_finite(r1, m1)) != 0;
  const __m512i m = round_pair(r0, r1, &s0, &s1);
  const __m512i l = round_pair(s0, s1, &t0, &t1);  // exact: t0 = t1 = 0
  constexpr int64_t kPlane = 2 * 16 * kStep;
  _mm512_storeu_si512(out, h);
  _mm512_storeu_si512(out + kPlane, m);
  _mm512_storeu_si512(out + 2 * kPlane, l);
  return bad;
}

__mmask16 lanes(int64_t left) {
  return left <= 0 ? 0 : left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
}

// Row r of a block sits in row tile r / 16, row r % 16: 64 bytes per row, two 16-lane halves.
uint16_t* packed_row(uint16_t* dst, int r) { return dst + (r / 16) * 16 * kStep + (r % 16) * kStep; }

}  // namespace

bool amx_request_permission() {
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

bool amx_pack_a_block(const float* A, int64_t rs, int rows, int64_t K, uint16_t* dst) {
  const int64_t steps = (K + kStep - 1) / kStep;
  bool bad = false;
  for (int r = 0; r < kBlock; ++r) {
    uint16_t* row = packed_row(dst, r);
    const float* src = A + r * rs;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k0 = s * kStep;
      const __mmask16 m0 = r < rows ? lanes(K - k0) : 0, m1 = r < rows ? lanes(K - k0 - 16) : 0;
      bad |= pack_step(m0 ? src + k0 : A, m0, m1 ? src + k0 + 16 : A, m1, row + s * kStepElems);
    }
  }
  return !bad;
}

bool amx_pack_a_nchwc(const NchwcView& x, int64_t i0, int rows, int64_t c0, int64_t kc, uint16_t* dst) {
  const int64_t steps = (kc + kStep - 1) / kStep;
  bool bad = false;
  int64_t n = i0 / x.P, p = i0 % x.P;  // stepped, not divided, per row: a division costs more than a split
  auto left = [&](int64_t k) { return kc - k < x.channels - c0 - k ? kc - k : x.channels - c0 - k; };
  for (int r = 0; r < kBlock; ++r) {
    uint16_t* row = packed_row(dst, r);
    const float* pos = x.data + (n * x.nb * x.P + p) * x.b;
    int64_t cb = c0 / x.b, lane = c0 % x.b;
    for (int64_t s = 0; s < steps; ++s) {
      const float* src[2];
      __mmask16 m[2];
      for (int half = 0; half < 2; ++half) {
        m[half] = r < rows ? lanes(left(s * kStep + 16 * half)) : 0;
        src[half] = m[half] ? pos + cb * x.P * x.b + lane : x.data;
        lane += 16;
        if (lane == x.b) lane = 0, ++cb;
      }
      bad |= pack_step(src[0], m[0], src[1], m[1], row + s * kStepElems);
    }
    if (++p == x.P) p = 0, ++n;
  }
  return !bad;
}

bool amx_pack_a_conv(const ConvTapsView& x, int64_t i0, int rows, int64_t k0, int64_t kc, uint16_t* dst) {
  constexpr int64_t kMaxSteps = 32;  // the tables below; the driver packs at most 24 steps at once
  if (kc > kMaxSteps * kStep) {
    const bool head = amx_pack_a_conv(x, i0, rows, k0, kMaxSteps * kStep, dst);
    const bool tail = amx_pack_a_conv(x, i0, rows, k0 + kMaxSteps * kStep, kc - kMaxSteps * kStep,
                                      dst + kMaxSteps * kStepElems);
    return head && tail;
  }
  const int64_t steps = (kc + kStep - 1) / kStep, plane = x.H * x.W * x.b;
  // Per 16-lane half of the chunk, once per call: its tap's displacement, its channel run's offset
  // and its real lanes; the rows then only add their own window origin.
  int64_t dy[2 * kMaxSteps], dx[2 * kMaxSteps], off[2 * kMaxSteps];
  __mmask16 real[2 * kMaxSteps];
  for (int64_t h = 0; h < 2 * steps; ++h) {
    const int64_t k = k0 + 16 * h, tap = k / x.Cp, c = k % x.Cp;
    const int64_t in_chunk = kc - 16 * h, in_channels = x.channels - c;
    real[h] = lanes(in_chunk < in_channels ? in_chunk : in_channels);
    dy[h] = (tap / x.S) * x.dil_h;
    dx[h] = (tap % x.S) * x.dil_w;
    off[h] = (c / x.b) * plane + c % x.b;
  }
  bool bad = false;
  const int64_t per_image = x.OH * x.OW;
  int64_t n = i0 / per_image, oh = i0 % per_image / x.OW, ow = i0 % x.OW;  // then stepped per row
  for (int r = 0; r < kBlock; ++r) {
    uint16_t* row = packed_row(dst, r);
    const float* image = x.data + n * x.nb * plane;
    const int64_t ih0 = oh * x.stride_h - x.pad_h, iw0 = ow * x.stride_w - x.pad_w;
    for (int64_t s = 0; s < steps; ++s) {
      const float* src[2];
      __mmask16 m[2];
      for (int half = 0; half < 2; ++half) {
        const int64_t h = 2 * s + half, ih = ih0 + dy[h], iw = iw0 + dx[h];
        const bool inside = r < rows && ih >= 0 && ih < x.H && iw >= 0 && iw < x.W;
        m[half] = inside ? real[h] : 0;
        src[half] = m[half] ? image + off[h] + (ih * x.W + iw) * x.b : x.data;
      }
      bad |= pack_step(src[0], m[0], src[1], m[1], row + s * kStepElems);
    }
    if (r < rows && ++ow == x.OW) {
      ow = 0;
      if (++oh == x.OH) oh = 0, ++n;
    }
  }
  return !bad;
}

void amx_finish_nchwc(const float* acc, int rows, int64_t i0, int64_t j0, const float* bias, const float* residual,
                      int act, const NchwcView& y) {
  const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.f);
  float* out = const_cast<float*>(y.data);
  // Last column block: the padded lanes of its output block past it are zeroed too (K = 96 in
  // 64-lane blocks: lanes 96..127).
  const int64_t k_end = j0 + 32 < y.channels ? j0 + 32 : y.nb * y.b;
  const int64_t n0 = i0 / y.P, p0 = i0 % y.P;
  for (int64_t k = j0; k < k_end; k += 16) {
    const int64_t kb = k / y.b, lane = k % y.b;
    if (kb >= y.nb) break;
    const __mmask16 real = lanes(y.channels - k);
    const int half = static_cast<int>((k - j0) / 16);
    const __m512 bv = bias && half < 2 ? _mm512_maskz_loadu_ps(real, bias + k) : zero;
    int64_t n = n0, p = p0;
    for (int r = 0; r < rows; ++r) {
      const int64_t at = ((n * y.nb + kb) * y.P + p) * y.b + lane;
      __m512 v = zero;
      if (half < 2) {
        v = _mm512_add_ps(_mm512_load_ps(acc + r * kBlock + 16 * half), bv);
        if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(real, residual + at));
        if (act != 0) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, zero);
        if (act == 2) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, six, _CMP_GT_OQ), v, six);
      }
      _mm512_storeu_ps(out + at, _mm512_maskz_mov_ps(real, v));
      if (++p == y.P) p = 0, ++n;
    }
  }
}

void amx_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12 does not see _tile_loadconfig read the struct and drops the stores above; the asm
  // names it as a memory operand.
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

void amx_release() { _tile_release(); }

void amx_block(const uint16_t* Ap, const uint16_t* Bp, int64_t steps, int rows, bool accumulate, float* acc,
               const char* prefetch, int64_t prefetch_lines) {
  constexpr int64_t kAccStride = kBlock * sizeof(float);
  if (accumulate) {
    _tile_loadd(0, acc, kAccStride);
    _tile_loadd(1, acc + 16, kAccStride);
    _tile_loadd(2, acc + 16 * kBlock, kAccStride);
    _tile_loadd(3, acc + 16 * kBlock + 16, kAccStride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  constexpr int64_t kPlane = 2 * 16 * kStep, kTile = 16 * kStep, kStride = kStep * 2;
  // Tiles 0-3: C (row tile i, column tile j at 2i + j); 4, 5: A row tiles; 6, 7: B column tiles.
  // Per step: hi*hi, hi*mid, hi*lo, mid*mid, mid*hi, lo*hi (the three dropped products are below
  // 2^-23 of |a||b|, under one fp32 rounding).
  // A step of B is 6 KiB: 96 lines, fetched while the step's 24 tile products run.
  // prefetch_lines lines spread evenly over the steps.
  const int64_t per_step = steps > 0 ? (prefetch_lines + steps - 1) / steps : 0;
  auto fetch_step = [&](int64_t s) __attribute__((always_inline)) {
    const int64_t first = s * per_step, last = first + per_step < prefetch_lines ? first + per_step : prefetch_lines;
    for (int64_t l = first; l < last; ++l) _mm_prefetch(prefetch + 64 * l, _MM_HINT_T1);
  };
  if (rows > 16) {
    for (int64_t s = 0; s < steps; ++s, Ap += kStepElems, Bp += kStepElems) {
      fetch_step(s);
      _tile_loadd(4, Ap, kStride);
      _tile_loadd(5, Ap + kTile, kStride);
      _tile_loadd(6, Bp, kStride);
      _tile_loadd(7, Bp + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      _tile_loadd(6, Bp + kPlane, kStride);
      _tile_loadd(7, Bp + kPlane + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      _tile_loadd(6, Bp + 2 * kPlane, kStride);
      _tile_loadd(7, Bp + 2 * kPlane + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      _tile_loadd(4, Ap + kPlane, kStride);
      _tile_loadd(5, Ap + kPlane + kTile, kStride);
      _tile_loadd(6, Bp + kPlane, kStride);
      _tile_loadd(7, Bp + kPlane + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      _tile_loadd(6, Bp, kStride);
      _tile_loadd(7, Bp + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
      _tile_loadd(4, Ap + 2 * kPlane, kStride);
      _tile_loadd(5, Ap + 2 * kPlane + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
  } else {
    // At most 16 rows: the second row tile would multiply zeros.
    for (int64_t s = 0; s < steps; ++s, Ap += kStepElems, Bp += kStepElems) {
      fetch_step(s);
      _tile_loadd(4, Ap, kStride);
      _tile_loadd(6, Bp, kStride);
      _tile_loadd(7, Bp + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(6, Bp + kPlane, kStride);
      _tile_loadd(7, Bp + kPlane + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(6, Bp + 2 * kPlane, kStride);
      _tile_loadd(7, Bp + 2 * kPlane + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(4, Ap + kPlane, kStride);
      _tile_loadd(6, Bp + kPlane, kStride);
      _tile_loadd(7, Bp + kPlane + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(6, Bp, kStride);
      _tile_loadd(7, Bp + kTile, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(4, Ap + 2 * kPlane, kStride);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
    }
  }
  _tile_stored(0, acc, kAccStride);
  _tile_stored(1, acc + 16, kAccStride);
  if (rows > 16) {
    _tile_stored(2, acc + 16 * kBlock, kAccStride);
    _tile_stored(3, acc + 16 * kBlock + 16, kAccStride);
  }
}

void amx_finish(const float* acc, int rows, int cols, float alpha, float beta, const float* row_bias,
                const float* col_bias, int act, float* C, int64_t ldc) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta), zero = _mm512_setzero_ps(),
               six = _mm512_set1_ps(6.f);
  for (int half = 0; half < 2; ++half) {
    const int left = cols - 16 * half;
    if (left <= 0) break;
    const __mmask16 m = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
    const __m512 cb = col_bias ? _mm512_maskz_loadu_ps(m, col_bias + 16 * half) : zero;
    for (int r = 0; r < rows; ++r) {
      float* c = C + r * ldc + 16 * half;
      __m512 v = _mm512_mul_ps(va, _mm512_load_ps(acc + r * kBlock + 16 * half));
      if (beta != 0.f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c), v);
      v = _mm512_add_ps(v, row_bias ? _mm512_set1_ps(row_bias[r]) : cb);
      // Compare-and-select keeps NaN (NaN < 0 and NaN > 6 are false).
      if (act != 0) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, zero);
      if (act == 2) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, six, _CMP_GT_OQ), v, six);
      _mm512_mask_storeu_ps(c, m, v);
    }
  }
}

}  // namespace dnnfusion::kernels::bf16x6_detail
