// Normalization kernels. Statistics use two passes in double (8 lanes so GCC vectorises the
// float->double sums); the normalisation pass is float: centre, then scale and shift (batch norm
// folds its running statistics into one per-channel scale/shift, as torch does).
#include "kernels/cpu/normalization.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/aligned_buffer.h"

namespace dnnfusion::kernels {
namespace {

double sum_d(const float* x, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += x[i + j];
  for (; i < n; ++i) s[0] += x[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

double sqdev_d(const float* x, int64_t n, double mean) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = x[i + j] - mean;
      s[j] += d * d;
    }
  for (; i < n; ++i) {
    const double d = x[i] - mean;
    s[0] += d * d;
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// mean and rstd of n values (n == 0: NaN mean like torch's 0/0)
void moments(const float* x, int64_t n, float eps, double* mean, double* rstd) {
  const double m = sum_d(x, n) / static_cast<double>(n);
  const double var = sqdev_d(x, n, m) / static_cast<double>(n);
  *mean = m;
  *rstd = 1.0 / std::sqrt(std::max(var, 0.0) + static_cast<double>(eps));
}

template <class Body>
void split(int64_t n, int64_t work_per_item, const Parallel& par, Body&& body) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(work_per_item, 1));
  if (n <= grain) body(int64_t{0}, n);
  else par.parallel_for(n, grain, body);
}

}  // namespace

void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t rows, int64_t cols, float* y,
                float* mean, float* rstd, const Parallel& par, const ElementHook* epilogue,
                const ElementHook* prologue) {
  DNNF_CHECK(rows >= 0 && cols >= 0, "layer_norm needs rows, cols >= 0; got ", rows, ", ", cols);
  if (epilogue != nullptr && !*epilogue) epilogue = nullptr;
  if (prologue != nullptr && !*prologue) prologue = nullptr;
  split(rows, cols, par, [&](int64_t b, int64_t e) {
    // The generated row is read three times (mean, deviations, normalise), so it is materialised
    // once per row in a per-thread buffer that only grows.
    thread_local AlignedBuffer<float> xbuf;
    float* xb = prologue ? xbuf.get(static_cast<size_t>(cols)) : nullptr;
    for (int64_t r = b; r < e; ++r) {
      const float* xr = xb;
      if (prologue) {
        (*prologue)(xb, r * cols, cols);
      } else {
        xr = x + r * cols;
      }
      float* yr = y + r * cols;
      double m = 0, rs = 0;
      moments(xr, cols, eps, &m, &rs);
      if (mean) mean[r] = static_cast<float>(m);
      if (rstd) rstd[r] = static_cast<float>(rs);
      // mean split as mf + dm: x - mf is exact for x near the mean, so a large common offset
      // (|mean| >> std) does not cost the float rounding of the mean
      const float mf = static_cast<float>(m), dm = static_cast<float>(m - mf), rf = static_cast<float>(rs);
      if (weight && bias) {
        for (int64_t i = 0; i < cols; ++i) yr[i] = ((xr[i] - mf) - dm) * rf * weight[i] + bias[i];
      } else if (weight) {
        for (int64_t i = 0; i < cols; ++i) yr[i] = ((xr[i] - mf) - dm) * rf * weight[i];
      } else if (bias) {
        for (int64_t i = 0; i < cols; ++i) yr[i] = ((xr[i] - mf) - dm) * rf + bias[i];
      } else {
        for (int64_t i = 0; i < cols; ++i) yr[i] = ((xr[i] - mf) - dm) * rf;
      }
      if (epilogue) (*epilogue)(yr, r * cols, cols);
    }
  });
}

void batch_norm_inference(const float* x, const float* running_mean, const float* running_var, const float* weight,
                          const float* bias, float eps, int64_t N, int64_t C, int64_t inner, float* y,
                          const Parallel& par) {
  DNNF_CHECK(N >= 0 && C >= 0 && inner >= 0, "batch_norm needs N, C, inner >= 0; got ", N, ", ", C, ", ", inner);
  DNNF_CHECK(running_mean && running_var, "batch_norm_inference needs running_mean and running_var");
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double inv = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + static_cast<double>(eps));
    const double s = inv * (weight ? weight[c] : 1.0);
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>((bias ? bias[c] : 0.0) - running_mean[c] * s);
  }
  const float* sc = scale.data();
  const float* sh = shift.data();
  if (inner == 1) {  // [N][C]: vectorise along C
    split(N, C, par, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        const float* xr = x + n * C;
        float* yr = y + n * C;
        for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * sc[c] + sh[c];
      }
    });
    return;
  }
  split(N * C, inner, par, [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      const float s = sc[nc % C], t = sh[nc % C];
      const float* xr = x + nc * inner;
      float* yr = y + nc * inner;
      for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] * s + t;
    }
  });
}

void group_norm(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C, int64_t inner,
                int64_t G, float* y, float* mean, float* rstd, const Parallel& par) {
  DNNF_CHECK(N >= 0 && C >= 0 && inner >= 0, "group_norm needs N, C, inner >= 0; got ", N, ", ", C, ", ", inner);
  DNNF_CHECK(G > 0 && C % G == 0, "group_norm: C (", C, ") must be divisible by the number of groups G (", G, ")");
  const int64_t cpg = C / G, len = cpg * inner;
  split(N * G, len, par, [&](int64_t b, int64_t e) {
    for (int64_t ng = b; ng < e; ++ng) {
      const float* xg = x + ng * len;
      float* yg = y + ng * len;
      double m = 0, rs = 0;
      moments(xg, len, eps, &m, &rs);
      if (mean) mean[ng] = static_cast<float>(m);
      if (rstd) rstd[ng] = static_cast<float>(rs);
      // centre first (mean split as mf + dm, see layer_norm) rather than folding the mean into
      // a per-channel shift, which would cancel at the magnitude of the mean
      const float mf = static_cast<float>(m), dm = static_cast<float>(m - mf);
      const int64_t c0 = (ng % G) * cpg;
      for (int64_t k = 0; k < cpg; ++k) {
        const int64_t c = c0 + k;
        const float sf = static_cast<float>(rs * (weight ? weight[c] : 1.0));
        const float tf = bias ? bias[c] : 0.0f;
        const float* xr = xg + k * inner;
        float* yr = yg + k * inner;
        for (int64_t i = 0; i < inner; ++i) yr[i] = ((xr[i] - mf) - dm) * sf + tf;
      }
    }
  });
}

}  // namespace dnnfusion::kernels
