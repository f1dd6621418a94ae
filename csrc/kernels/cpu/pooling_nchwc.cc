#include "kernels/cpu/pooling_nchwc.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"

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

}  // namespace

void max_pool2d_nchwc(const Pool2dShape& s, int64_t b, const float* x, float* y, const Parallel& par,
                      const ElementHook* epilogue) {
  check(s, b, x, y, "max_pool2d_nchwc");
  const float neg_inf = -std::numeric_limits<float>::infinity();
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
