// Plain loops over NCHW, one output element at a time; sums in int64 and wraps to int32 at the end
// (the simulator wraps on every step: both are the same residue mod 2^32).
#include "target/fpga/datapath/reference_int8.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/error.h"

namespace dnnfusion::fpga::ref {
namespace {

void need(size_t got, size_t want, const char* what) {
  if (got != want)
    throw InvalidInput(detail::str_cat("fpga reference: ", what, " has ", got, " elements, expected ", want));
}

int out_size(int in, int k, int stride, int pad) { return (in + 2 * pad - k) / stride + 1; }

int32_t wrap32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v))); }

int8_t at(const std::vector<int8_t>& x, Shape s, int c, int y, int xx) {
  return x[(static_cast<size_t>(c) * s.h + y) * s.w + xx];
}

bool inside(Shape s, int y, int x) { return y >= 0 && y < s.h && x >= 0 && x < s.w; }

}  // namespace

std::vector<int8_t> conv2d(const std::vector<int8_t>& x, Shape s, const std::vector<int8_t>& kcrs, int k, int r,
                           int stride, int pad, const std::vector<int32_t>& bias,
                           const std::vector<quant::Requant>& q, int lo, int hi) {
  need(x.size(), static_cast<size_t>(s.c) * s.h * s.w, "input");
  need(kcrs.size(), static_cast<size_t>(k) * s.c * r * r, "weights");
  need(bias.size(), k, "bias");
  need(q.size(), k, "requantization");
  const int ho = out_size(s.h, r, stride, pad), wo = out_size(s.w, r, stride, pad);
  std::vector<int8_t> y(static_cast<size_t>(k) * ho * wo);
  for (int ko = 0; ko < k; ++ko)
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        int64_t acc = bias[ko];
        for (int c = 0; c < s.c; ++c)
          for (int i = 0; i < r; ++i)
            for (int j = 0; j < r; ++j) {
              const int iy = oy * stride - pad + i, ix = ox * stride - pad + j;
              if (!inside(s, iy, ix)) continue;  // zero padding
              acc += int64_t{kcrs[((static_cast<size_t>(ko) * s.c + c) * r + i) * r + j]} * at(x, s, c, iy, ix);
            }
        y[(static_cast<size_t>(ko) * ho + oy) * wo + ox] = static_cast<int8_t>(quant::requantize(wrap32(acc), q[ko], lo, hi));
      }
  return y;
}

std::vector<int8_t> depthwise3x3(const std::vector<int8_t>& x, Shape s, const std::vector<int8_t>& weights,
                                 int stride, int pad, const std::vector<int32_t>& bias,
                                 const std::vector<quant::Requant>& q, int lo, int hi) {
  need(x.size(), static_cast<size_t>(s.c) * s.h * s.w, "input");
  need(weights.size(), static_cast<size_t>(s.c) * 9, "weights");
  need(bias.size(), s.c, "bias");
  need(q.size(), s.c, "requantization");
  const int ho = out_size(s.h, 3, stride, pad), wo = out_size(s.w, 3, stride, pad);
  std::vector<int8_t> y(static_cast<size_t>(s.c) * ho * wo);
  for (int c = 0; c < s.c; ++c)
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        int64_t acc = bias[c];
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j) {
            const int iy = oy * stride - pad + i, ix = ox * stride - pad + j;
            if (inside(s, iy, ix)) acc += int64_t{weights[static_cast<size_t>(c) * 9 + i * 3 + j]} * at(x, s, c, iy, ix);
          }
        y[(static_cast<size_t>(c) * ho + oy) * wo + ox] = static_cast<int8_t>(quant::requantize(wrap32(acc), q[c], lo, hi));
      }
  return y;
}

std::vector<int8_t> maxpool(const std::vector<int8_t>& x, Shape s, int kernel, int stride, int pad, int lo, int hi) {
  need(x.size(), static_cast<size_t>(s.c) * s.h * s.w, "input");
  const int ho = out_size(s.h, kernel, stride, pad), wo = out_size(s.w, kernel, stride, pad);
  std::vector<int8_t> y(static_cast<size_t>(s.c) * ho * wo);
  for (int c = 0; c < s.c; ++c)
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox) {
        bool any = false;
        int m = 0;
        for (int i = 0; i < kernel; ++i)
          for (int j = 0; j < kernel; ++j) {
            const int iy = oy * stride - pad + i, ix = ox * stride - pad + j;
            if (!inside(s, iy, ix)) continue;  // padding takes no part
            m = any ? std::max<int>(m, at(x, s, c, iy, ix)) : at(x, s, c, iy, ix);
            any = true;
          }
        if (!any) throw InvalidInput("fpga reference: a max-pool window holds no input element (pad >= kernel)");
        y[(static_cast<size_t>(c) * ho + oy) * wo + ox] = static_cast<int8_t>(std::clamp(m, lo, hi));
      }
  return y;
}

std::vector<int8_t> add(const std::vector<int8_t>& a, const std::vector<int8_t>& b, Shape s,
                        const std::vector<quant::Requant>& qa, const std::vector<quant::Requant>& qb, int lo, int hi) {
  const size_t n = static_cast<size_t>(s.c) * s.h * s.w;
  need(a.size(), n, "input A");
  need(b.size(), n, "input B");
  need(qa.size(), s.c, "requantization of A");
  need(qb.size(), s.c, "requantization of B");
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  std::vector<int8_t> y(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = i / (static_cast<size_t>(s.h) * s.w);
    const int64_t v = int64_t{quant::requantize(a[i], qa[c], kMin, kMax)} + quant::requantize(b[i], qb[c], kMin, kMax);
    y[i] = static_cast<int8_t>(std::clamp<int64_t>(v, lo, hi));
  }
  return y;
}

}  // namespace dnnfusion::fpga::ref
