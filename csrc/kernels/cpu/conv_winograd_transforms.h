// Internal to the Winograd convolution: the F(2x2, 3x3) input and output transforms, written once
// over a GCC vector type VT (a whole number of lanes of a channel block) and instantiated by each
// ISA file, which compiles the same arithmetic to SSE, AVX2 or AVX-512 instructions. Everything
// here sits in an anonymous namespace so each ISA file gets its own internal copy (ODR: see
// conv_nchwc_ukernel.h). Contracts: InputFn / OutputFn in conv_winograd_ukernel.h.
#pragma once
#include <algorithm>
#include <cstring>

#include "kernels/cpu/conv_winograd_ukernel.h"

// Vector-typed helpers have internal linkage, so the argument-passing ABI that -Wpsabi warns
// about (vectors wider than the baseline ISA's registers) never crosses a file boundary. Left
// ignored to the end of the including file: templates are instantiated there.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dnnfusion::kernels::wino_detail {
namespace {

typedef float F16 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));

template <class VT>
inline VT load(const float* p) {
  VT v;
  std::memcpy(&v, p, sizeof(VT));
  return v;
}

template <class VT>
inline void store(float* p, VT v) {
  std::memcpy(p, &v, sizeof(VT));
}

template <class VT>
void input_tiles(const Geom& g, const float* x, int64_t t0, int64_t t1, float* v, int64_t tb, int64_t v_xi,
                 int64_t v_cb) {
  constexpr int64_t L = sizeof(VT) / sizeof(float);
  const int64_t per_img = g.TH * g.TW, icb = g.icb, row = g.W * icb;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / per_img, th = t / g.TW % g.TH, tw = t % g.TW;
    const int64_t ih0 = 2 * th - g.pad_h, iw0 = 2 * tw - g.pad_w;
    // The window's rows [ilo, ihi) and columns [jlo, jhi) lie inside the image.
    const int64_t ilo = std::max<int64_t>(0, -ih0), ihi = std::min<int64_t>(4, g.H - ih0);
    const int64_t jlo = std::max<int64_t>(0, -iw0), jhi = std::min<int64_t>(4, g.W - iw0);
    const bool full = ilo == 0 && ihi == 4 && jlo == 0 && jhi == 4;
    float* vt = v + (t - tb) * icb;
    for (int64_t cb = 0; cb < g.Cb; ++cb) {
      const float* plane = x + (n * g.Cb + cb) * g.H * row;
      float* vc = vt + cb * v_cb;
      for (int64_t l = 0; l < icb; l += L) {
        VT d[4][4];
        if (full) {
          const float* p = plane + ih0 * row + iw0 * icb + l;
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) d[i][j] = load<VT>(p + i * row + j * icb);
        } else {
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
              d[i][j] = i >= ilo && i < ihi && j >= jlo && j < jhi
                            ? load<VT>(plane + (ih0 + i) * row + (iw0 + j) * icb + l)
                            : VT{};
        }
        // B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], rows first.
        VT r[4][4];
        for (int j = 0; j < 4; ++j) {
          r[0][j] = d[0][j] - d[2][j];
          r[1][j] = d[1][j] + d[2][j];
          r[2][j] = d[2][j] - d[1][j];
          r[3][j] = d[1][j] - d[3][j];
        }
        float* o = vc + l;
        for (int i = 0; i < 4; ++i) {
          store<VT>(o + (4 * i + 0) * v_xi, r[i][0] - r[i][2]);
          store<VT>(o + (4 * i + 1) * v_xi, r[i][1] + r[i][2]);
          store<VT>(o + (4 * i + 2) * v_xi, r[i][2] - r[i][1]);
          store<VT>(o + (4 * i + 3) * v_xi, r[i][1] - r[i][3]);
        }
      }
    }
  }
}

template <class VT>
inline VT activate(VT r, Activation act) {
  if (act == Activation::None) return r;
  const VT zero{};
  r = r < zero ? zero : r;  // NaN < 0 is false: NaN stays
  if (act == Activation::Relu6) {
    const VT six = zero + 6.f;
    r = r > six ? six : r;
  }
  return r;
}

template <class VT>
void output_tiles(const Geom& g, const float* m, int64_t tb, int64_t m_xi, int64_t kb, int64_t t0, int64_t t1,
                  const float* bias, const float* res, Activation act, int64_t lanes, float* y) {
  constexpr int64_t L = sizeof(VT) / sizeof(float);
  const int64_t per_img = g.TH * g.TW, ocb = g.ocb;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / per_img, th = t / g.TW % g.TH, tw = t % g.TW;
    const int64_t oh0 = 2 * th, ow0 = 2 * tw;
    const int rows = static_cast<int>(std::min<int64_t>(2, g.OH - oh0));
    const int cols = static_cast<int>(std::min<int64_t>(2, g.OW - ow0));
    const int64_t base = (((n * g.Kb + kb) * g.OH + oh0) * g.OW + ow0) * ocb;
    const float* mt = m + (t - tb) * ocb;
    for (int64_t l = 0; l < ocb; l += L) {
      VT s[16];
      for (int xi = 0; xi < 16; ++xi) s[xi] = load<VT>(mt + xi * m_xi + l);
      // A^T s A with A^T = [1 1 1 0; 0 1 -1 -1], rows first.
      VT a[2][4];
      for (int j = 0; j < 4; ++j) {
        a[0][j] = s[j] + s[4 + j] + s[8 + j];
        a[1][j] = s[4 + j] - s[8 + j] - s[12 + j];
      }
      const VT b = bias ? load<VT>(bias + l) : VT{};
      for (int i = 0; i < rows; ++i) {
        const VT o[2] = {a[i][0] + a[i][1] + a[i][2], a[i][1] - a[i][2] - a[i][3]};
        for (int j = 0; j < cols; ++j) {
          const int64_t off = base + (i * g.OW + j) * ocb + l;
          VT r = o[j] + b;
          if (res) r += load<VT>(res + off);
          store<VT>(y + off, activate(r, act));
        }
      }
    }
    if (lanes < ocb)
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) std::fill_n(y + base + (i * g.OW + j) * ocb + lanes, ocb - lanes, 0.f);
  }
}

inline InputFn pick_input(int64_t icb) {
  if (icb % 16 == 0) return &input_tiles<F16>;
  if (icb % 8 == 0) return &input_tiles<F8>;
  return &input_tiles<float>;
}

inline OutputFn pick_output(int64_t ocb) {
  if (ocb % 16 == 0) return &output_tiles<F16>;
  if (ocb % 8 == 0) return &output_tiles<F8>;
  return &output_tiles<float>;
}

}  // namespace
}  // namespace dnnfusion::kernels::wino_detail
