#include "kernels/cpu/pooling_nchwc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <emmintrin.h>
#include <limits>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/pooling_nchwc_ukernel.h"

namespace dnnfusion::kernels {

namespace {

void check(const Pool2dShape& s, int64_t b, const float* x, const float* y, const char* what) {
  DNNF_CHECK(x != nullptr && y != nullptr, what, ": null pointer");
  DNNF_CHECK(s.N > 0 && s.C > 0 && s.H > 0 && s.W > 0 && s.OH > 0 && s.OW > 0, what, ": sizes must be positive");
  DNNF_CHECK(s.kh > 0 && s.kw > 0 && s.sh > 0 && s.sw > 0 && s.dh > 0 && s.dw > 0 && s.ph >= 0 && s.pw >= 0, what,
             ": kernel, stride and dilation must be positive and padding non-negative");
  DNNF_CHECK(b >= 1 && s.C % b == 0, what, ": block ", b, " must divide the ", s.C, " channels");
}

// Runs body(plane, oh, out_row) over all output rows in parallel, then the epilogue per row.
template <class Body>
void for_rows(const Pool2dShape& s, int64_t b, float* y, const Parallel& par, const ElementHook* epilogue,
              Body&& body) {
  const int64_t planes = s.N * (s.C / b), row = s.OW * b;
  par.parallel_for(planes * s.OH, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, row)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* out = y + r * row;
      body(r / s.OH, r % s.OH, out);
      if (epilogue && *epilogue) (*epilogue)(out, r * row, row);
    }
  });
}

using pool_detail::TapRange;

// Taps [lo, hi) of a k-tap window at output index o (stride st, padding p, dilation d) that fall
// inside [0, extent).
TapRange tap_range(int64_t o, int64_t st, int64_t p, int64_t k, int64_t d, int64_t extent) {
  TapRange r{0, k};
  while (r.lo < k && o * st - p + r.lo * d < 0) ++r.lo;
  while (r.hi > r.lo && o * st - p + (r.hi - 1) * d >= extent) --r.hi;
  return r;
}

// Every output column's taps inside the image in width: the same for every row, so computed once.
std::vector<TapRange> col_ranges(const Pool2dShape& s) {
  std::vector<TapRange> cols(static_cast<size_t>(s.OW));
  for (int64_t ow = 0; ow < s.OW; ++ow) cols[ow] = tap_range(ow, s.sw, s.pw, s.kw, s.dw, s.W);
  return cols;
}

// One output row of max pooling with a compile-time block: each tap is B/4 SSE vectors (SSE2 is
// x86-64's baseline, so this file needs no ISA dispatch; the op is bound by memory, not by vector
// width). The generic loop below ran resnet50's 3x3/2 max-pool at ~0.42 ms against ONNX Runtime's
// 0.12 ms: a run-time lane count and a std::isnan call per lane kept it scalar. (GCC's generic
// vector extension was 7x slower still: it lowers the select of a 128-byte vector through memory.)
// Lanes [lane0, lane0 + B) of blocks of `b` floats (a 64-wide block runs as two 32-lane halves:
// 16 xmm accumulators + 16 NaN masks would not fit SSE's 16 registers).
// rows / cols: the taps inside the image (tap_range, col_ranges).
template <int B>
void max_row(const Pool2dShape& s, const float* plane, int64_t oh, TapRange rows, const TapRange* cols, float* out,
             int64_t b, int64_t lane0) {
  constexpr int NV = B / 4;
  plane += lane0;
  out += lane0;
  for (int64_t ow = 0; ow < s.OW; ++ow) {
    // PyTorch's rule: a larger value or a NaN replaces the running max, and a NaN sticks. maxps
    // alone would drop a NaN at the next tap, so NaN lanes are tracked apart and OR-ed in at the
    // end (all-ones bits: a NaN): three ops per tap instead of a compare-and-select's six.
    __m128 acc[NV], nan[NV];
    for (int v = 0; v < NV; ++v) {
      acc[v] = _mm_set1_ps(-std::numeric_limits<float>::infinity());
      nan[v] = _mm_setzero_ps();
    }
    for (int64_t i = rows.lo; i < rows.hi; ++i) {
      const float* r = plane + ((oh * s.sh - s.ph + i * s.dh) * s.W + ow * s.sw - s.pw) * b;
      for (int64_t j = cols[ow].lo; j < cols[ow].hi; ++j) {
        const float* t = r + j * s.dw * b;
        for (int v = 0; v < NV; ++v) {
          const __m128 x = _mm_loadu_ps(t + 4 * v);
          acc[v] = _mm_max_ps(acc[v], x);
          nan[v] = _mm_or_ps(nan[v], _mm_cmpunord_ps(x, x));
        }
      }
    }
    for (int v = 0; v < NV; ++v) _mm_storeu_ps(out + ow * b + 4 * v, _mm_or_ps(acc[v], nan[v]));
  }
}

// The input rows output row oh + 1 of the same plane reads beyond those of row oh (a strided
// window's new rows), as 64-byte lines: fetched while row oh computes. Rows are read once
// and the planes are large, so without it every new row waited on memory: ResNet's 3x3/2 stem
// pool at batch 8 (25.7 MB in) ran at 19 GB/s from memory.
struct NextRows {
  const char* first = nullptr;
  int64_t lines = 0;
};

NextRows next_rows(const Pool2dShape& s, int64_t b, const float* plane, int64_t oh, TapRange rows) {
  NextRows r;
  if (oh + 1 >= s.OH || rows.hi <= rows.lo) return r;
  const TapRange nrows = tap_range(oh + 1, s.sh, s.ph, s.kh, s.dh, s.H);
  if (nrows.hi <= nrows.lo) return r;
  const int64_t cur_last = oh * s.sh - s.ph + (rows.hi - 1) * s.dh;
  const int64_t lo = std::max(cur_last + 1, (oh + 1) * s.sh - s.ph + nrows.lo * s.dh);
  const int64_t hi = (oh + 1) * s.sh - s.ph + (nrows.hi - 1) * s.dh;
  if (hi < lo) return r;
  const int64_t row_bytes = s.W * b * static_cast<int64_t>(sizeof(float));
  r.first = reinterpret_cast<const char*>(plane) + lo * row_bytes;
  r.lines = (hi - lo + 1) * row_bytes / 64;
  return r;
}

}  // namespace

void max_pool2d_nchwc(const Pool2dShape& s, int64_t b, const float* x, float* y, const Parallel& par,
                      const ElementHook* epilogue, Isa isa) {
  check(s, b, x, y, "max_pool2d_nchwc");
  if (!isa_supported(isa)) DNNF_THROW("max_pool2d_nchwc: this CPU cannot run ", isa_name(isa), " kernels");
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const bool avx512 = isa == Isa::Avx512 && b % 16 == 0;
  if (avx512 || b == 8 || b == 16 || b % 32 == 0) {
    const std::vector<TapRange> cols = col_ranges(s);
    auto row = b == 8 ? &max_row<8> : b == 16 ? &max_row<16> : &max_row<32>;
    const int64_t part = std::min<int64_t>(b, 32);
    for_rows(s, b, y, par, epilogue, [&](int64_t p, int64_t oh, float* out) {
      const float* plane = x + p * s.H * s.W * b;
      const TapRange rows = tap_range(oh, s.sh, s.ph, s.kh, s.dh, s.H);
      if (avx512) {
        const NextRows next = next_rows(s, b, plane, oh, rows);
        pool_detail::max_row_avx512(s, plane, oh, rows, cols.data(), out, b, next.first, next.lines);
      }
      else
        for (int64_t l = 0; l < b; l += part) row(s, plane, oh, rows, cols.data(), out, b, l);
    });
    return;
  }
  for_rows(s, b, y, par, epilogue, [&](int64_t p, int64_t oh, float* out) {
    const float* plane = x + p * s.H * s.W * b;
    for (int64_t ow = 0; ow < s.OW; ++ow) {
      float* acc = out + ow * b;
      std::fill(acc, acc + b, neg_inf);
      for (int64_t i = 0; i < s.kh; ++i) {
        const int64_t ih = oh * s.sh - s.ph + i * s.dh;
        if (ih < 0 || ih >= s.H) continue;
        for (int64_t j = 0; j < s.kw; ++j) {
          const int64_t iw = ow * s.sw - s.pw + j * s.dw;
          if (iw < 0 || iw >= s.W) continue;
          const float* v = plane + (ih * s.W + iw) * b;
          // PyTorch's rule: a larger value or a NaN replaces the running max (NaN sticks).
          for (int64_t l = 0; l < b; ++l) acc[l] = (v[l] > acc[l] || std::isnan(v[l])) ? v[l] : acc[l];
        }
      }
    }
  });
}

void avg_pool2d_nchwc(const Pool2dShape& s, int64_t b, const float* x, float* y, bool count_include_pad,
                      int64_t divisor_override, const Parallel& par, const ElementHook* epilogue) {
  check(s, b, x, y, "avg_pool2d_nchwc");
  DNNF_CHECK(s.dh == 1 && s.dw == 1, "avg_pool2d_nchwc: dilation must be 1");
  for_rows(s, b, y, par, epilogue, [&](int64_t p, int64_t oh, float* out) {
    const float* plane = x + p * s.H * s.W * b;
    const int64_t h0 = oh * s.sh - s.ph, h1 = std::min(h0 + s.kh, s.H + s.ph);
    const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h1, s.H);
    for (int64_t ow = 0; ow < s.OW; ++ow) {
      const int64_t w0 = ow * s.sw - s.pw, w1 = std::min(w0 + s.kw, s.W + s.pw);
      const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w1, s.W);
      float* acc = out + ow * b;
      std::fill(acc, acc + b, 0.f);
      if (he <= hs || we <= ws) continue;  // empty clipped window: 0, as the NCHW kernel
      for (int64_t ih = hs; ih < he; ++ih)
        for (int64_t iw = ws; iw < we; ++iw) {
          const float* v = plane + (ih * s.W + iw) * b;
          for (int64_t l = 0; l < b; ++l) acc[l] += v[l];
        }
      const int64_t div = divisor_override > 0 ? divisor_override
                          : count_include_pad  ? (h1 - h0) * (w1 - w0)
                                               : (he - hs) * (we - ws);
      const float d = static_cast<float>(div);
      for (int64_t l = 0; l < b; ++l) acc[l] /= d;  // a division, as the NCHW kernel: same rounding
    }
  });
}

}  // namespace dnnfusion::kernels
