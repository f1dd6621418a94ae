// Softmax. inner == 1 (the transformer / classifier case): per row, one pass for the max, one
// pass that writes exp(x - max) and sums it (8 double lanes: vectorisable and accurate for long
// rows), one scaling pass. inner > 1: the same three passes over [dim][tile of inner] so every
// loop runs along contiguous inner elements.
// Floating-point exceptions are never inspected, and with -ftrapping-math (GCC's default) the
// compiler will not if-convert selects whose arms contain FP arithmetic, which keeps loops such
// as exp_f32, leaky_relu or NaN-propagating max scalar. Set before any include so every
// function in this file (std:: ones included) shares the option and inlining is unaffected.
#pragma GCC optimize("no-trapping-math")
#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/elementwise.h"

namespace dnnfusion::kernels {
namespace {

constexpr int64_t kTile = 256;

// Where a prologue materialises the input it generates: per thread and only growing, so a
// softmax per layer does not hit the allocator.
float* input_buffer(int64_t n) {
  thread_local AlignedBuffer<float> buf;
  return buf.get(static_cast<size_t>(n));
}

// NaN-propagating max (a NaN in the row must make the whole row NaN, as in torch)
inline float nmax(float a, float b) { return (b > a || b != b) ? b : a; }

void softmax_row(const float* x, float* y, int64_t n, bool log) {
  float m[8];
  for (float& v : m) v = -__builtin_inff();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) m[j] = m[j] != m[j] ? m[j] : nmax(m[j], x[i + j]);
  for (; i < n; ++i) m[0] = m[0] != m[0] ? m[0] : nmax(m[0], x[i]);
  float mx = m[0];
  for (int j = 1; j < 8; ++j) mx = mx != mx ? mx : nmax(mx, m[j]);
  // all -inf: torch gives NaN (exp(-inf - -inf)); keep that instead of inventing a value
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  i = 0;
  if (log) {
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) s[j] += exp_f32(x[i + j] - mx);
    for (; i < n; ++i) s[0] += exp_f32(x[i] - mx);
  } else {
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) {
        const float e = exp_f32(x[i + j] - mx);
        y[i + j] = e;
        s[j] += e;
      }
    for (; i < n; ++i) {
      const float e = exp_f32(x[i] - mx);
      y[i] = e;
      s[0] += e;
    }
  }
  const double sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  if (log) {
    // (x - max) is exact for the values that matter; folding max into the log term would
    // round it at max's magnitude
    const float ls = static_cast<float>(std::log(sum));
    for (i = 0; i < n; ++i) y[i] = (x[i] - mx) - ls;
  } else {
    const float inv = static_cast<float>(1.0 / sum);
    for (i = 0; i < n; ++i) y[i] *= inv;
  }
}

// [dim][n] slice, rows ldx apart in x and ldy apart in y (the inner extent, or n for a prologue's
// packed buffer); n <= kTile. hook (nullable) gets each finished y row, which sits at linear index
// ystart + d*ldy.
void softmax_cols(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t dim, int64_t n, bool log,
                  const ElementHook* hook, int64_t ystart) {
  float mx[kTile];
  double sum[kTile];
  for (int64_t i = 0; i < n; ++i) {
    mx[i] = -__builtin_inff();
    sum[i] = 0;
  }
  for (int64_t d = 0; d < dim; ++d) {
    const float* r = x + d * ldx;
    for (int64_t i = 0; i < n; ++i) mx[i] = mx[i] != mx[i] ? mx[i] : nmax(mx[i], r[i]);
  }
  for (int64_t d = 0; d < dim; ++d) {
    const float* r = x + d * ldx;
    float* o = y + d * ldy;
    if (log) {
      for (int64_t i = 0; i < n; ++i) sum[i] += exp_f32(r[i] - mx[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const float e = exp_f32(r[i] - mx[i]);
        o[i] = e;
        sum[i] += e;
      }
    }
  }
  float f[kTile];
  for (int64_t i = 0; i < n; ++i) f[i] = log ? static_cast<float>(std::log(sum[i])) : static_cast<float>(1.0 / sum[i]);
  for (int64_t d = 0; d < dim; ++d) {
    const float* r = x + d * ldx;
    float* o = y + d * ldy;
    if (log) {
      for (int64_t i = 0; i < n; ++i) o[i] = (r[i] - mx[i]) - f[i];
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] *= f[i];
    }
    if (hook) (*hook)(o, ystart + d * ldy, n);
  }
}

}  // namespace

void softmax(const float* x, float* y, int64_t outer, int64_t dim, int64_t inner, bool log, const Parallel& par,
             const ElementHook* epilogue, const ElementHook* prologue) {
  DNNF_CHECK(outer >= 0 && dim >= 0 && inner >= 0, "softmax extents must be >= 0; got outer ", outer, ", dim ", dim,
             ", inner ", inner);
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (epilogue != nullptr && !*epilogue) epilogue = nullptr;
  if (prologue != nullptr && !*prologue) prologue = nullptr;
  if (inner == 1) {
    const int64_t grain = std::max<int64_t>(1, 8192 / dim);
    auto body = [&](int64_t b, int64_t e) {
      float* xbuf = prologue ? input_buffer(dim) : nullptr;
      for (int64_t o = b; o < e; ++o) {
        const float* xr = xbuf;
        if (prologue) {
          (*prologue)(xbuf, o * dim, dim);
        } else {
          xr = x + o * dim;
        }
        softmax_row(xr, y + o * dim, dim, log);
        if (epilogue) (*epilogue)(y + o * dim, o * dim, dim);
      }
    };
    if (outer <= grain) body(0, outer);
    else par.parallel_for(outer, grain, body);
    return;
  }
  const int64_t tiles = (inner + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 8192 / (dim * std::min(inner, kTile)));
  auto body = [&](int64_t b, int64_t e) {
    float* xbuf = prologue ? input_buffer(dim * std::min(inner, kTile)) : nullptr;
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / tiles, i0 = (t % tiles) * kTile;
      const int64_t off = o * dim * inner + i0;
      const int64_t n = std::min(kTile, inner - i0);
      if (!prologue) {
        softmax_cols(x + off, inner, y + off, inner, dim, n, log, epilogue, off);
        continue;
      }
      // Pack the tile's columns densely (row stride n): the softmax passes then stream the
      // buffer, and a tile spanning all of inner is one contiguous request.
      if (n == inner) {
        (*prologue)(xbuf, off, dim * n);
      } else {
        for (int64_t d = 0; d < dim; ++d) (*prologue)(xbuf + d * n, off + d * inner, n);
      }
      softmax_cols(xbuf, n, y + off, inner, dim, n, log, epilogue, off);
    }
  };
  if (outer * tiles <= grain) body(0, outer * tiles);
  else par.parallel_for(outer * tiles, grain, body);
}

}  // namespace dnnfusion::kernels
