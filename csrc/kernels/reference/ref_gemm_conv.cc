// Reference kernels: the definitions written straight from PyTorch's semantics, no tricks.
#include "kernels/reference/ref_gemm_conv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dnnfusion::reference {

float ref_activate(float v, Activation act) {
  if (std::isnan(v)) return v;
  if (act == Activation::Relu) return std::max(v, 0.f);
  if (act == Activation::Relu6) return std::min(std::max(v, 0.f), 6.f);
  return v;
}

void ref_sgemm(int64_t M, int64_t N, int64_t K, MatrixView A, MatrixView B, float* C, int64_t ldc,
               const GemmEpilogue& ep) {
  // A row of C at a time, summed over k in ascending order in double: the same sums as the
  // textbook triple loop, but walking B by rows (contiguous for row-major B) instead of columns.
  std::vector<double> acc(static_cast<size_t>(std::max<int64_t>(N, 0)));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double a = A.data[i * A.rs + k * A.cs];
      const float* b = B.data + k * B.rs;
      for (int64_t j = 0; j < N; ++j) acc[j] += a * b[j * B.cs];
    }
    for (int64_t j = 0; j < N; ++j) {
      double v = static_cast<double>(ep.alpha) * acc[j];
      if (ep.beta != 0.f) v += static_cast<double>(ep.beta) * C[i * ldc + j];
      if (ep.bias_mode == GemmEpilogue::Bias::PerRow) v += ep.bias[i];
      if (ep.bias_mode == GemmEpilogue::Bias::PerCol) v += ep.bias[j];
      C[i * ldc + j] = ref_activate(static_cast<float>(v), ep.act);
    }
  }
}

void ref_conv2d_nchw(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                     float* y, Activation act) {
  // An output row at a time, each output summed over (c, r, q) in ascending order in double,
  // taps outside the input skipped: the same sums as one output at a time, with the inner loop
  // running along the row.
  const int64_t OH = s.OH(), OW = s.OW();
  const int64_t Cg = s.C / s.groups, Kg = s.K / s.groups;
  std::vector<double> acc(static_cast<size_t>(std::max<int64_t>(OW, 0)));
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t g = k / Kg;
      for (int64_t oh = 0; oh < OH; ++oh) {
        std::fill(acc.begin(), acc.end(), bias ? static_cast<double>(bias[k]) : 0.0);
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t r = 0; r < s.R; ++r) {
            const int64_t ih = oh * s.stride_h - s.pad_h + r * s.dil_h;
            if (ih < 0 || ih >= s.H) continue;
            const float* xrow = x + ((n * s.C + g * Cg + c) * s.H + ih) * s.W;
            for (int64_t q = 0; q < s.S; ++q) {
              const double wv = w[((k * Cg + c) * s.R + r) * s.S + q];
              // ow with 0 <= ow * stride_w - pad_w + q * dil_w < W
              const int64_t lo = s.pad_w - q * s.dil_w, hi = s.W - 1 + s.pad_w - q * s.dil_w;
              if (hi < 0) continue;
              const int64_t ow0 = lo <= 0 ? 0 : (lo + s.stride_w - 1) / s.stride_w;
              const int64_t ow1 = std::min(OW, hi / s.stride_w + 1);
              for (int64_t ow = ow0; ow < ow1; ++ow)
                acc[ow] += static_cast<double>(xrow[ow * s.stride_w - lo]) * wv;
            }
          }
        float* yrow = y + ((n * s.K + k) * OH + oh) * OW;
        for (int64_t ow = 0; ow < OW; ++ow) yrow[ow] = ref_activate(static_cast<float>(acc[ow]), act);
      }
    }
}

void ref_max_pool2d(const Pool2dShape& s, const float* x, float* y, int64_t* indices) {
  for (int64_t p = 0; p < s.N * s.C; ++p) {
    const float* xp = x + p * s.H * s.W;
    for (int64_t oh = 0; oh < s.OH; ++oh)
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_idx = -1;
        for (int64_t i = 0; i < s.kh; ++i)
          for (int64_t j = 0; j < s.kw; ++j) {
            const int64_t ih = oh * s.sh - s.ph + i * s.dh, iw = ow * s.sw - s.pw + j * s.dw;
            if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
            const float v = xp[ih * s.W + iw];
            // PyTorch starts at the first in-bounds tap's index, so an all -inf window points there.
            if (best_idx < 0) best_idx = ih * s.W + iw;
            if (v > best || std::isnan(v)) {
              best = v;
              best_idx = ih * s.W + iw;
            }
          }
        const int64_t o = (p * s.OH + oh) * s.OW + ow;
        y[o] = best;
        if (indices) indices[o] = best_idx;
      }
  }
}

void ref_avg_pool2d(const Pool2dShape& s, const float* x, float* y, bool count_include_pad,
                    int64_t divisor_override) {
  for (int64_t p = 0; p < s.N * s.C; ++p) {
    const float* xp = x + p * s.H * s.W;
    for (int64_t oh = 0; oh < s.OH; ++oh)
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        // Window as PyTorch sees it: clipped to the padded extent for the divisor...
        int64_t h0 = oh * s.sh - s.ph, w0 = ow * s.sw - s.pw;
        int64_t h1 = std::min(h0 + s.kh, s.H + s.ph), w1 = std::min(w0 + s.kw, s.W + s.pw);
        const int64_t padded_count = (h1 - h0) * (w1 - w0);
        // ...and to the image for the sum.
        h0 = std::max<int64_t>(h0, 0);
        w0 = std::max<int64_t>(w0, 0);
        h1 = std::min(h1, s.H);
        w1 = std::min(w1, s.W);
        double sum = 0;
        int64_t count = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            sum += xp[ih * s.W + iw];
            ++count;
          }
        const int64_t o = (p * s.OH + oh) * s.OW + ow;
        if (count == 0) {
          y[o] = 0.f;
          continue;
        }
        const double div = divisor_override > 0 ? static_cast<double>(divisor_override)
                           : count_include_pad  ? static_cast<double>(padded_count)
                                                : static_cast<double>(count);
        y[o] = static_cast<float>(sum / div);
      }
  }
}

void ref_adaptive_avg_pool2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                             const float* x, float* y) {
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t h0 = (i * H) / OH, h1 = ((i + 1) * H + OH - 1) / OH;
        const int64_t w0 = (j * W) / OW, w1 = ((j + 1) * W + OW - 1) / OW;
        double sum = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) sum += x[(p * H + h) * W + w];
        y[(p * OH + i) * OW + j] = static_cast<float>(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
}

void ref_sdpa(int64_t Bt, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, Tensor4 q,
              Tensor4 k, Tensor4 v, AttnMask mask, bool causal, float scale, float* out,
              float* lse) {
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> s(static_cast<size_t>(Lk));
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        double mx = ninf;
        for (int64_t j = 0; j < Lk; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d)
            acc += static_cast<double>(q.data[b * q.s0 + h * q.s1 + i * q.s2 + d * q.s3]) *
                   k.data[b * k.s0 + h * k.s1 + j * k.s2 + d * k.s3];
          acc *= scale;
          if (mask.data) {
            const int64_t off = b * mask.s0 + h * mask.s1 + i * mask.s2 + j * mask.s3;
            if (mask.is_bool) {
              if (!static_cast<const bool*>(mask.data)[off]) acc = ninf;
            } else {
              acc += static_cast<const float*>(mask.data)[off];
            }
          }
          if (causal && j > i) acc = ninf;
          s[j] = acc;
          if (acc > mx || std::isnan(acc)) mx = std::isnan(mx) ? mx : acc;
        }
        float* o = out + ((b * H + h) * Lq + i) * Dv;
        double sum = 0;
        if (mx == ninf) {
          // _safe_softmax: a row with every score -inf has probability 0 everywhere.
          for (int64_t d = 0; d < Dv; ++d) o[d] = 0.f;
          if (lse) lse[(b * H + h) * Lq + i] = -std::numeric_limits<float>::infinity();
          continue;
        }
        for (int64_t j = 0; j < Lk; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < Lk; ++j)
            acc += s[j] * v.data[b * v.s0 + h * v.s1 + j * v.s2 + d * v.s3];
          o[d] = static_cast<float>(acc / sum);
        }
        if (lse) lse[(b * H + h) * Lq + i] = static_cast<float>(mx + std::log(sum));
      }
}

}  // namespace dnnfusion::reference
