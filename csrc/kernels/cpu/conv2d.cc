// conv2d_nchw: implicit-im2col GEMM per (image, group) for dense/grouped convolutions and a direct
// kernel for depthwise ones. See conv2d.h for the contract.
#include "kernels/cpu/conv2d.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"

namespace dnnfusion::kernels {
namespace {

inline float activate(float v, Activation act) {
  switch (act) {
    case Activation::None: return v;
    case Activation::Relu: return v < 0.f ? 0.f : v;
    case Activation::Relu6: return v < 0.f ? 0.f : (v > 6.f ? 6.f : v);
  }
  return v;
}

// Number of t in [0, len) with 0 <= base + t*step < limit form one interval [lo, hi); computes it
// without a per-element test so the copy loops below stay branch-free.
inline void valid_range(int64_t base, int64_t step, int64_t limit, int64_t len, int64_t* lo,
                        int64_t* hi) {
  int64_t a = base >= 0 ? 0 : (-base + step - 1) / step;
  int64_t b = base >= limit ? 0 : (limit - base + step - 1) / step;
  a = std::min(a, len);
  b = std::min(std::max(b, a), len);
  *lo = a;
  *hi = b;
}

// One GEMM per (image n, group g): Y_ng[Kg][OH*OW] = W_g[Kg][Cg*R*S] x col(X_ng)[Cg*R*S][OH*OW].
// The col matrix is never built: pack_b gathers each packed panel straight from the image.
struct ConvProblem final : gemm_detail::BatchedProblem {
  const Conv2dShape* s = nullptr;
  const float* x = nullptr;
  const float* w = nullptr;
  const float* bias_ptr = nullptr;
  float* y = nullptr;
  int64_t Cg = 0, Kg = 0, OH = 0, OW = 0, CRS = 0;
  bool pointwise = false;  // 1x1, stride 1, pad 0: the image already is the B matrix

  const float* image(int64_t b) const {
    const int64_t n = b / s->groups, g = b % s->groups;
    return x + (n * s->C + g * Cg) * s->H * s->W;
  }
  MatrixView a(int64_t b) const override { return {w + (b % s->groups) * Kg * CRS, CRS, 1}; }
  float* c(int64_t b) const override {
    const int64_t n = b / s->groups, g = b % s->groups;
    return y + (n * s->K + g * Kg) * OH * OW;
  }
  const float* bias(int64_t b) const override {
    return bias_ptr ? bias_ptr + (b % s->groups) * Kg : nullptr;
  }

  void pack_b(int64_t b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int nr,
              float* dst) const override {
    const float* xi = image(b);
    if (pointwise) {
      gemm_detail::pack_b_strided({xi, s->H * s->W, 1}, k0, kc, j0, nc, nr, dst);
      return;
    }
    const int64_t H = s->H, W = s->W, R = s->R, S = s->S;
    const int64_t sh = s->stride_h, sw = s->stride_w, ph = s->pad_h, pw = s->pad_w;
    const int64_t dh = s->dil_h, dw = s->dil_w;
    // A panel's nr output pixels split into runs along output rows; each run is one strided
    // segment of an input row for every (c, r, s).
    struct Run {
      int64_t oh, ow0, len, t0;
    };
    Run runs[32];
    for (int64_t jp = 0; jp < nc; jp += nr, dst += static_cast<int64_t>(nr) * kc) {
      const int64_t cols = std::min<int64_t>(nr, nc - jp);
      int nruns = 0;
      for (int64_t t = 0; t < cols;) {
        const int64_t j = j0 + jp + t;
        const int64_t oh = j / OW, ow = j % OW;
        const int64_t len = std::min(cols - t, OW - ow);
        runs[nruns++] = {oh, ow, len, t};
        t += len;
      }
      int64_t c = k0 / (R * S), r = (k0 / S) % R, q = k0 % S;
      for (int64_t k = 0; k < kc; ++k) {
        float* d = dst + k * nr;
        const float* plane = xi + c * H * W;
        for (int i = 0; i < nruns; ++i) {
          const Run& run = runs[i];
          float* dr = d + run.t0;
          const int64_t ih = run.oh * sh - ph + r * dh;
          if (ih < 0 || ih >= H) {
            for (int64_t t = 0; t < run.len; ++t) dr[t] = 0.f;
            continue;
          }
          const int64_t iw0 = run.ow0 * sw - pw + q * dw;
          int64_t lo, hi;
          valid_range(iw0, sw, W, run.len, &lo, &hi);
          const float* src = plane + ih * W;
          for (int64_t t = 0; t < lo; ++t) dr[t] = 0.f;
          if (sw == 1) {
            for (int64_t t = lo; t < hi; ++t) dr[t] = src[iw0 + t];
          } else {
            for (int64_t t = lo; t < hi; ++t) dr[t] = src[iw0 + t * sw];
          }
          for (int64_t t = hi; t < run.len; ++t) dr[t] = 0.f;
        }
        for (int64_t t = cols; t < nr; ++t) d[t] = 0.f;
        if (++q == S) {
          q = 0;
          if (++r == R) {
            r = 0;
            ++c;
          }
        }
      }
    }
  }
};

// One output row of a depthwise plane from a zero-padded input plane: acc[ow] += sum over taps.
// Fixed trip counts and restrict pointers let the ow loop vectorise; KS > 0 fixes the tap count
// (3 covers nearly every depthwise layer) so the taps unroll into one pass over the row.
template <int KS>
void depthwise_row(float* __restrict acc, const float* __restrict xr, const float* __restrict wr,
                   int64_t OW, int64_t S, int64_t sw, int64_t dw) {
  if constexpr (KS > 0) {
    float wv[KS];
    for (int q = 0; q < KS; ++q) wv[q] = wr[q];
    if (sw == 1) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        float a = acc[ow];
        for (int q = 0; q < KS; ++q) a += wv[q] * xr[ow + q * dw];
        acc[ow] = a;
      }
    } else {
      for (int64_t ow = 0; ow < OW; ++ow) {
        float a = acc[ow];
        for (int q = 0; q < KS; ++q) a += wv[q] * xr[ow * sw + q * dw];
        acc[ow] = a;
      }
    }
  } else {
    for (int64_t q = 0; q < S; ++q) {
      const float w = wr[q];
      const float* x = xr + q * dw;
      if (sw == 1) {
        for (int64_t ow = 0; ow < OW; ++ow) acc[ow] += w * x[ow];
      } else {
        for (int64_t ow = 0; ow < OW; ++ow) acc[ow] += w * x[ow * sw];
      }
    }
  }
}

// The common 3x3, unit-width-stride case: all nine taps in one pass, one store per output.
void depthwise_row_3x3(float* __restrict yr, const float* __restrict x0, int64_t row_step,
                       const float* __restrict w, float b, int64_t OW) {
  const float* __restrict x1 = x0 + row_step;
  const float* __restrict x2 = x1 + row_step;
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],
              w7 = w[7], w8 = w[8];
  for (int64_t ow = 0; ow < OW; ++ow) {
    yr[ow] = b + w0 * x0[ow] + w1 * x0[ow + 1] + w2 * x0[ow + 2] + w3 * x1[ow] + w4 * x1[ow + 1] +
             w5 * x1[ow + 2] + w6 * x2[ow] + w7 * x2[ow + 1] + w8 * x2[ow + 2];
  }
}

// Depthwise (one input channel per group, any channel multiplier): each input plane is copied
// once into a zero-padded thread-local buffer, so every tap reads a full-width row with no bounds
// tests; parallel over the N*K output planes.
void depthwise(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
               Activation act, const Parallel& par, const ElementHook* epilogue) {
  const int64_t OH = s.OH(), OW = s.OW();
  const int64_t mult = s.K / s.C;
  const int64_t planes = s.N * s.K;
  const int64_t Hp = s.H + 2 * s.pad_h, Wp = s.W + 2 * s.pad_w;
  const int64_t work = OH * OW * s.R * s.S;
  par.parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work)),
                   [&](int64_t p0, int64_t p1) {
    thread_local AlignedBuffer<float> padded;
    float* xpad = padded.get(static_cast<size_t>(Hp * Wp));
    int64_t loaded = -1;  // input plane currently in xpad (consecutive k share it when mult > 1)
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / s.K, k = p % s.K, c = k / mult;
      const int64_t in_plane = n * s.C + c;
      if (in_plane != loaded) {
        const float* xp = x + in_plane * s.H * s.W;
        std::fill(xpad, xpad + s.pad_h * Wp, 0.f);
        for (int64_t h = 0; h < s.H; ++h) {
          float* d = xpad + (h + s.pad_h) * Wp;
          std::fill(d, d + s.pad_w, 0.f);
          std::copy(xp + h * s.W, xp + (h + 1) * s.W, d + s.pad_w);
          std::fill(d + s.pad_w + s.W, d + Wp, 0.f);
        }
        std::fill(xpad + (s.pad_h + s.H) * Wp, xpad + Hp * Wp, 0.f);
        loaded = in_plane;
      }
      const float* wk = w + k * s.R * s.S;
      float* yp = y + p * OH * OW;
      const float b = bias ? bias[k] : 0.f;
      for (int64_t oh = 0; oh < OH; ++oh) {
        float* yr = yp + oh * OW;
        if (s.R == 3 && s.S == 3 && s.stride_w == 1 && s.dil_w == 1) {
          depthwise_row_3x3(yr, xpad + oh * s.stride_h * Wp, s.dil_h * Wp, wk, b, OW);
          if (act != Activation::None)
            for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = activate(yr[ow], act);
          if (epilogue) (*epilogue)(yr, (p * OH + oh) * OW, OW);
          continue;
        }
        for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = b;
        for (int64_t r = 0; r < s.R; ++r) {
          const float* xr = xpad + (oh * s.stride_h + r * s.dil_h) * Wp;
          if (s.S == 3) {
            depthwise_row<3>(yr, xr, wk + r * s.S, OW, s.S, s.stride_w, s.dil_w);
          } else {
            depthwise_row<0>(yr, xr, wk + r * s.S, OW, s.S, s.stride_w, s.dil_w);
          }
        }
        if (act != Activation::None)
          for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = activate(yr[ow], act);
        if (epilogue) (*epilogue)(yr, (p * OH + oh) * OW, OW);
      }
    }
  });
}

}  // namespace

void conv2d_check_shape(const Conv2dShape& s) {
  DNNF_CHECK(s.N >= 1 && s.C >= 1 && s.H >= 1 && s.W >= 1 && s.K >= 1 && s.R >= 1 && s.S >= 1,
             "conv2d: sizes must be positive (N=", s.N, " C=", s.C, " H=", s.H, " W=", s.W,
             " K=", s.K, " R=", s.R, " S=", s.S, ")");
  DNNF_CHECK(s.stride_h >= 1 && s.stride_w >= 1 && s.dil_h >= 1 && s.dil_w >= 1 && s.pad_h >= 0 &&
                 s.pad_w >= 0,
             "conv2d: stride and dilation must be >= 1 and padding >= 0 (stride=", s.stride_h, "x",
             s.stride_w, " dilation=", s.dil_h, "x", s.dil_w, " pad=", s.pad_h, "x", s.pad_w, ")");
  DNNF_CHECK(s.groups >= 1 && s.C % s.groups == 0 && s.K % s.groups == 0,
             "conv2d: groups=", s.groups, " must divide C=", s.C, " and K=", s.K);
  DNNF_CHECK(s.OH() >= 1 && s.OW() >= 1, "conv2d: empty output (", s.OH(), "x", s.OW(),
             ") for input ", s.H, "x", s.W, " kernel ", s.R, "x", s.S);
}

size_t conv2d_scratch_bytes(const Conv2dShape& s, int /*num_threads*/) {
  conv2d_check_shape(s);
  return 0;
}

void conv2d_nchw(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                 Activation act, void* /*scratch*/, const Parallel& par,
                 const ElementHook* epilogue) {
  conv2d_check_shape(s);
  if (epilogue != nullptr && !*epilogue) epilogue = nullptr;
  const int64_t Cg = s.C / s.groups;
  if (Cg == 1 && s.groups > 1) {
    depthwise(s, x, w, bias, y, act, par, epilogue);
    return;
  }
  ConvProblem p;
  p.s = &s;
  p.x = x;
  p.w = w;
  p.bias_ptr = bias;
  p.y = y;
  p.Cg = Cg;
  p.Kg = s.K / s.groups;
  p.OH = s.OH();
  p.OW = s.OW();
  p.CRS = Cg * s.R * s.S;
  p.pointwise = s.R == 1 && s.S == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 &&
                s.pad_w == 0;
  p.batch = s.N * s.groups;
  p.M = p.Kg;
  p.N = p.OH * p.OW;
  p.K = p.CRS;
  p.ldc = p.N;
  GemmEpilogue ep;
  ep.act = act;
  if (bias) {
    ep.bias = bias;
    ep.bias_mode = GemmEpilogue::Bias::PerRow;
  }
  // Entry b = n*groups + g writes the Kg planes starting at plane n*K + g*Kg = b*Kg, so the
  // GEMM's (b*M + i)*N + j already is the [N][K][OH][OW] index.
  gemm_detail::run(p, ep, par, epilogue);
}

}  // namespace dnnfusion::kernels
