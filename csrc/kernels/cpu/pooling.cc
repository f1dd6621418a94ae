// Max / average / adaptive-average pooling, NCHW, with the window rules of PyTorch's CPU kernels
// (see pooling.h). Work splits over the N*C planes.
#include "kernels/cpu/pooling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace dnnfusion::kernels {
namespace {

void check_pool(const Pool2dShape& s, const char* what) {
  DNNF_CHECK(s.N >= 0 && s.C >= 0 && s.H >= 1 && s.W >= 1 && s.OH >= 1 && s.OW >= 1, what,
             ": sizes must be positive (N=", s.N, " C=", s.C, " H=", s.H, " W=", s.W, " OH=", s.OH,
             " OW=", s.OW, ")");
  DNNF_CHECK(s.kh >= 1 && s.kw >= 1 && s.sh >= 1 && s.sw >= 1 && s.dh >= 1 && s.dw >= 1 &&
                 s.ph >= 0 && s.pw >= 0,
             what, ": kernel, stride and dilation must be >= 1 and padding >= 0 (kernel=", s.kh, "x",
             s.kw, " stride=", s.sh, "x", s.sw, " dilation=", s.dh, "x", s.dw, " pad=", s.ph, "x",
             s.pw, ")");
}

int64_t plane_grain(int64_t per_plane_work) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, per_plane_work));
}

// Hands finished rows of one output plane to the epilogue in runs of at least kRun elements: a
// call per row would be tiny on 7x7 maps, a call per plane can outgrow L1 on large ones.
class RowsToHook {
 public:
  static constexpr int64_t kRun = 1024;
  RowsToHook(const ElementHook* hook, float* plane, int64_t plane_index, int64_t OH, int64_t OW)
      : hook_(hook), plane_(plane), base_(plane_index * OH * OW), OH_(OH), OW_(OW) {}
  void row_done(int64_t oh) {
    if (!hook_) return;
    const int64_t n = (oh + 1 - from_) * OW_;
    if (n < kRun && oh + 1 < OH_) return;
    (*hook_)(plane_ + from_ * OW_, base_ + from_ * OW_, n);
    from_ = oh + 1;
  }

 private:
  const ElementHook* hook_;
  float* plane_;
  int64_t base_, OH_, OW_, from_ = 0;
};

const ElementHook* active(const ElementHook* h) { return h != nullptr && *h ? h : nullptr; }

}  // namespace

void max_pool2d_nchw(const Pool2dShape& s, const float* x, float* y, int64_t* indices,
                     const Parallel& par, const ElementHook* epilogue) {
  check_pool(s, "max_pool2d");
  epilogue = active(epilogue);
  const int64_t HW = s.H * s.W, OHW = s.OH * s.OW;
  par.parallel_for(s.N * s.C, plane_grain(OHW * s.kh * s.kw), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x + p * HW;
      float* yp = y + p * OHW;
      int64_t* ip = indices ? indices + p * OHW : nullptr;
      RowsToHook hook(epilogue, yp, p, s.OH, s.OW);
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        int64_t h0 = oh * s.sh - s.ph;
        const int64_t h1 = std::min(h0 + (s.kh - 1) * s.dh + 1, s.H);
        while (h0 < 0) h0 += s.dh;
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          int64_t w0 = ow * s.sw - s.pw;
          const int64_t w1 = std::min(w0 + (s.kw - 1) * s.dw + 1, s.W);
          while (w0 < 0) w0 += s.dw;
          float best = -std::numeric_limits<float>::infinity();
          // Like PyTorch: start at the first in-bounds tap, so an all -inf window points there.
          int64_t best_idx = (h0 < h1 && w0 < w1) ? h0 * s.W + w0 : -1;
          for (int64_t ih = h0; ih < h1; ih += s.dh) {
            const float* xr = xp + ih * s.W;
            for (int64_t iw = w0; iw < w1; iw += s.dw) {
              const float v = xr[iw];
              if (v > best || std::isnan(v)) {
                best = v;
                best_idx = ih * s.W + iw;
              }
            }
          }
          yp[oh * s.OW + ow] = best;
          if (ip) ip[oh * s.OW + ow] = best_idx;
        }
        hook.row_done(oh);
      }
    }
  });
}

void avg_pool2d_nchw(const Pool2dShape& s, const float* x, float* y, bool count_include_pad,
                     int64_t divisor_override, const Parallel& par,
                     const ElementHook* epilogue) {
  check_pool(s, "avg_pool2d");
  epilogue = active(epilogue);
  DNNF_CHECK(s.dh == 1 && s.dw == 1, "avg_pool2d: dilation must be 1 (got ", s.dh, "x", s.dw, ")");
  DNNF_CHECK(divisor_override >= 0, "avg_pool2d: divisor_override must be >= 0 (0 = none), got ",
             divisor_override);
  const int64_t HW = s.H * s.W, OHW = s.OH * s.OW;
  par.parallel_for(s.N * s.C, plane_grain(OHW * s.kh * s.kw), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x + p * HW;
      float* yp = y + p * OHW;
      RowsToHook hook(epilogue, yp, p, s.OH, s.OW);
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        // The count_include_pad divisor counts the window clipped to the padded image (a
        // ceil_mode window can run past it); the sum only sees the real image.
        int64_t h0 = oh * s.sh - s.ph;
        int64_t h1 = std::min(h0 + s.kh, s.H + s.ph);
        const int64_t hpad = h1 - h0;
        h0 = std::max<int64_t>(h0, 0);
        h1 = std::min(h1, s.H);
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          int64_t w0 = ow * s.sw - s.pw;
          int64_t w1 = std::min(w0 + s.kw, s.W + s.pw);
          const int64_t wpad = w1 - w0;
          w0 = std::max<int64_t>(w0, 0);
          w1 = std::min(w1, s.W);
          float& out = yp[oh * s.OW + ow];
          if (h0 >= h1 || w0 >= w1) {
            out = 0.f;
            continue;
          }
          float sum = 0.f;
          for (int64_t ih = h0; ih < h1; ++ih) {
            const float* xr = xp + ih * s.W;
            for (int64_t iw = w0; iw < w1; ++iw) sum += xr[iw];
          }
          const int64_t div = divisor_override > 0 ? divisor_override
                              : count_include_pad  ? hpad * wpad
                                                   : (h1 - h0) * (w1 - w0);
          out = sum / static_cast<float>(div);
        }
        hook.row_done(oh);
      }
    }
  });
}

void adaptive_avg_pool2d_nchw(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                              const float* x, float* y, const Parallel& par,
                              const ElementHook* epilogue) {
  epilogue = active(epilogue);
  DNNF_CHECK(N >= 0 && C >= 0 && H >= 1 && W >= 1 && OH >= 1 && OW >= 1,
             "adaptive_avg_pool2d: sizes must be positive (N=", N, " C=", C, " H=", H, " W=", W,
             " OH=", OH, " OW=", OW, ")");
  par.parallel_for(N * C, plane_grain(H * W), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x + p * H * W;
      float* yp = y + p * OH * OW;
      RowsToHook hook(epilogue, yp, p, OH, OW);
      for (int64_t i = 0; i < OH; ++i) {
        const int64_t h0 = (i * H) / OH, h1 = ((i + 1) * H + OH - 1) / OH;
        for (int64_t j = 0; j < OW; ++j) {
          const int64_t w0 = (j * W) / OW, w1 = ((j + 1) * W + OW - 1) / OW;
          float sum = 0.f;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) sum += xp[h * W + w];
          yp[i * OW + j] = sum / static_cast<float>((h1 - h0) * (w1 - w0));
        }
        hook.row_done(i);
      }
    }
  });
}

}  // namespace dnnfusion::kernels
