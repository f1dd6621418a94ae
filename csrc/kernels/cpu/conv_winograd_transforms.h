// Internal to the Winograd convolution: the F(2x2, 3x3) and F(4x4, 3x3) input and output
// transforms, written once over a GCC vector type VT (a whole number of lanes of a channel block) and instantiated by each
// ISA file, which compiles the same arithmetic to SSE, AVX2 or AVX-512 instructions. Everything
// here sits in an anonymous namespace so each ISA file gets its own internal copy (ODR: see
// conv_nchwc_ukernel.h). Contracts: InputFn / OutputFn in conv_winograd_ukernel.h.
#pragma once
#include <algorithm>
#include <cstring>

#include "kernels/cpu/conv_winograd_ukernel.h"


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

// The 1-D transforms of F(M, 3): B^T (A x A, input), A^T (M x A, output), A = M + 2 points.
// Written out (not matrix loops) because IEEE float arithmetic cannot drop the products with 0.
template <int M>
struct Tf;

template <>
struct Tf<2> {
  static constexpr int A = 4;
  // B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
  template <class VT>
  static inline void in(const VT (&d)[A], VT (&r)[A]) {
    r[0] = d[0] - d[2];
    r[1] = d[1] + d[2];
    r[2] = d[2] - d[1];
    r[3] = d[1] - d[3];
  }
  // A^T = [1 1 1 0; 0 1 -1 -1]
  template <class VT>
  static inline void out(const VT (&s)[A], VT (&o)[2]) {
    o[0] = s[0] + s[1] + s[2];
    o[1] = s[1] - s[2] - s[3];
  }
};

template <>
struct Tf<4> {
  static constexpr int A = 6;
  // B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
  template <class VT>
  static inline void in(const VT (&d)[A], VT (&r)[A]) {
    const VT a = d[4] - 4.f * d[2], b = d[3] - 4.f * d[1];  // rows 1, 2 share these
    const VT c = d[4] - d[2], e = 2.f * (d[3] - d[1]);       // rows 3, 4
    r[0] = 4.f * d[0] - 5.f * d[2] + d[4];
    r[1] = a + b;
    r[2] = a - b;
    r[3] = c + e;
    r[4] = c - e;
    r[5] = 4.f * d[1] - 5.f * d[3] + d[5];
  }
  // A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
  template <class VT>
  static inline void out(const VT (&s)[A], VT (&o)[4]) {
    const VT p12 = s[1] + s[2], m12 = s[1] - s[2], p34 = s[3] + s[4], m34 = s[3] - s[4];
    o[0] = s[0] + p12 + p34;
    o[1] = m12 + 2.f * m34;
    o[2] = p12 + 4.f * p34;
    o[3] = m12 + 8.f * m34 + s[5];
  }
};

template <class VT, int M>
void input_tiles(const Geom& g, const float* x, int64_t t0, int64_t t1, float* v, int64_t tb, int64_t v_xi,
                 int64_t v_cb) {
  constexpr int64_t L = sizeof(VT) / sizeof(float);
  constexpr int A = Tf<M>::A;
  const int64_t per_img = g.TH * g.TW, icb = g.icb, row = g.W * icb;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / per_img, th = t / g.TW % g.TH, tw = t % g.TW;
    const int64_t ih0 = M * th - g.pad_h, iw0 = M * tw - g.pad_w;
    // The window's rows [ilo, ihi) and columns [jlo, jhi) lie inside the image.
    const int64_t ilo = std::max<int64_t>(0, -ih0), ihi = std::min<int64_t>(A, g.H - ih0);
    const int64_t jlo = std::max<int64_t>(0, -iw0), jhi = std::min<int64_t>(A, g.W - iw0);
    const bool full = ilo == 0 && ihi == A && jlo == 0 && jhi == A;
    float* vt = v + (t - tb) * icb;
    for (int64_t cb = 0; cb < g.Cb; ++cb) {
      const float* plane = x + (n * g.Cb + cb) * g.H * row;
      float* vc = vt + cb * v_cb;
      for (int64_t l = 0; l < icb; l += L) {
        VT d[A][A];
        if (full) {
          const float* p = plane + ih0 * row + iw0 * icb + l;
          for (int i = 0; i < A; ++i)
            for (int j = 0; j < A; ++j) d[i][j] = load<VT>(p + i * row + j * icb);
        } else {
          for (int i = 0; i < A; ++i)
            for (int j = 0; j < A; ++j)
              d[i][j] = i >= ilo && i < ihi && j >= jlo && j < jhi
                            ? load<VT>(plane + (ih0 + i) * row + (iw0 + j) * icb + l)
                            : VT{};
        }
        // B^T d B: columns first, then rows.
        VT r[A][A];
        for (int j = 0; j < A; ++j) {
          VT col[A], tr[A];
          for (int i = 0; i < A; ++i) col[i] = d[i][j];
          Tf<M>::in(col, tr);
          for (int i = 0; i < A; ++i) r[i][j] = tr[i];
        }
        float* o = vc + l;
        for (int i = 0; i < A; ++i) {
          VT u[A];
          Tf<M>::in(r[i], u);
          for (int j = 0; j < A; ++j) store<VT>(o + (A * i + j) * v_xi, u[j]);
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

template <class VT, int M>
void output_tiles(const Geom& g, const float* m, int64_t tb, int64_t m_xi, int64_t kb, int64_t t0, int64_t t1,
                  const float* bias, const float* res, Activation act, int64_t lanes, float* y) {
  constexpr int64_t L = sizeof(VT) / sizeof(float);
  constexpr int A = Tf<M>::A;
  const int64_t per_img = g.TH * g.TW, ocb = g.ocb;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = t / per_img, th = t / g.TW % g.TH, tw = t % g.TW;
    const int64_t oh0 = M * th, ow0 = M * tw;
    const int rows = static_cast<int>(std::min<int64_t>(M, g.OH - oh0));
    const int cols = static_cast<int>(std::min<int64_t>(M, g.OW - ow0));
    const int64_t base = (((n * g.Kb + kb) * g.OH + oh0) * g.OW + ow0) * ocb;
    const float* mt = m + (t - tb) * ocb;
    for (int64_t l = 0; l < ocb; l += L) {
      // A^T s A: columns first, then rows.
      VT a[M][A];
      for (int j = 0; j < A; ++j) {
        VT col[A], o[M];
        for (int i = 0; i < A; ++i) col[i] = load<VT>(mt + (A * i + j) * m_xi + l);
        Tf<M>::out(col, o);
        for (int i = 0; i < M; ++i) a[i][j] = o[i];
      }
      const VT b = bias ? load<VT>(bias + l) : VT{};
      for (int i = 0; i < rows; ++i) {
        VT o[M];
        Tf<M>::out(a[i], o);
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

template <int M>
InputFn pick_input_m(int64_t icb) {
  if (icb % 16 == 0) return &input_tiles<F16, M>;
  if (icb % 8 == 0) return &input_tiles<F8, M>;
  return &input_tiles<float, M>;
}

template <int M>
OutputFn pick_output_m(int64_t ocb) {
  if (ocb % 16 == 0) return &output_tiles<F16, M>;
  if (ocb % 8 == 0) return &output_tiles<F8, M>;
  return &output_tiles<float, M>;
}

// m: the output tile size (2 or 4).
inline InputFn pick_input(int m, int64_t icb) { return m == 4 ? pick_input_m<4>(icb) : pick_input_m<2>(icb); }
inline OutputFn pick_output(int m, int64_t ocb) { return m == 4 ? pick_output_m<4>(ocb) : pick_output_m<2>(ocb); }

}  // namespace
}  // namespace dnnfusion::kernels::wino_detail
