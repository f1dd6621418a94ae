// Pooling kernels against the plain reference (serial and two threads): max with padding,
// dilation, ceil-mode windows and indices; NaN/-inf handling; avg with count_include_pad on/off,
// ceil-mode windows past the padded edge and divisor_override; adaptive avg with uneven bins.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/pooling.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using kernels::Pool2dShape;
using kernels::SerialParallel;
using testing::ThreadParallel;

// PyTorch's output size, ceil_mode included (the last window must start inside input + left pad).
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Pool2dShape make(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p,
                 int64_t d, bool ceil_mode) {
  return {N, C, H, W, pool_out(H, k, s, p, d, ceil_mode), pool_out(W, k, s, p, d, ceil_mode),
          k, k, s, s, p, p, d, d};
}

std::string describe(const Pool2dShape& s) {
  std::ostringstream os;
  os << "N=" << s.N << " C=" << s.C << " H=" << s.H << " W=" << s.W << " OH=" << s.OH
     << " OW=" << s.OW << " k=" << s.kh << "x" << s.kw << " s=" << s.sh << "x" << s.sw
     << " p=" << s.ph << "x" << s.pw << " d=" << s.dh << "x" << s.dw;
  return os.str();
}

void check_max(std::mt19937_64& rng, const Pool2dShape& s, const kernels::Parallel& par,
               bool specials = false) {
  SCOPED_TRACE(describe(s));
  auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
  if (specials) {
    for (size_t i = 0; i < x.size(); i += 7) x[i] = -std::numeric_limits<float>::infinity();
    for (size_t i = 3; i < x.size(); i += 29) x[i] = std::numeric_limits<float>::quiet_NaN();
  }
  const size_t n = static_cast<size_t>(s.N * s.C * s.OH * s.OW);
  std::vector<float> y(n), r(n);
  std::vector<int64_t> yi(n, -7), ri(n);
  reference::ref_max_pool2d(s, x.data(), r.data(), ri.data());
  kernels::max_pool2d_nchw(s, x.data(), y.data(), yi.data(), par);
  EXPECT_TRUE(testing::all_close(y.data(), r.data(), n, 0.f, 0.f));
  EXPECT_EQ(yi, ri);
  std::vector<float> y2(n);
  kernels::max_pool2d_nchw(s, x.data(), y2.data(), nullptr, par);  // indices are optional
  EXPECT_TRUE(testing::all_close(y2.data(), r.data(), n, 0.f, 0.f));
}

void check_avg(std::mt19937_64& rng, const Pool2dShape& s, bool include_pad, int64_t divisor,
               const kernels::Parallel& par) {
  SCOPED_TRACE(describe(s) + " count_include_pad=" + std::to_string(include_pad) +
               " divisor_override=" + std::to_string(divisor));
  const auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
  const size_t n = static_cast<size_t>(s.N * s.C * s.OH * s.OW);
  std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN()), r(n);
  reference::ref_avg_pool2d(s, x.data(), r.data(), include_pad, divisor);
  kernels::avg_pool2d_nchw(s, x.data(), y.data(), include_pad, divisor, par);
  EXPECT_TRUE(testing::all_close(y.data(), r.data(), n, 1e-5f, 1e-6f));
}

TEST(Pooling, MaxPool) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 20);
  SerialParallel serial;
  ThreadParallel threads(2);
  for (const kernels::Parallel* par : {static_cast<const kernels::Parallel*>(&serial),
                                       static_cast<const kernels::Parallel*>(&threads)}) {
    check_max(rng, make(1, 3, 112, 112, 3, 2, 1, 1, false), *par);  // ResNet stem
    check_max(rng, make(2, 5, 13, 13, 3, 2, 0, 1, true), *par);    // ceil mode (SqueezeNet)
    check_max(rng, make(2, 4, 14, 15, 2, 2, 0, 1, true), *par);
    check_max(rng, make(1, 3, 10, 11, 3, 1, 1, 2, false), *par);   // dilated
    check_max(rng, make(3, 2, 9, 9, 4, 3, 2, 1, true), *par);
    check_max(rng, make(2, 3, 8, 8, 3, 2, 1, 1, false), *par, /*specials=*/true);
    check_max(rng, make(1, 1, 1, 1, 1, 1, 0, 1, false), *par);
    for (int t = 0; t < 20; ++t) {
      const int64_t k = testing::rand_int(rng, 1, 4), d = testing::rand_int(rng, 1, 2);
      const int64_t p = testing::rand_int(rng, 0, k / 2);
      const int64_t H = testing::rand_int(rng, d * (k - 1) + 1, 17);
      Pool2dShape s = make(testing::rand_int(rng, 1, 2), testing::rand_int(rng, 1, 4), H, H, k,
                           testing::rand_int(rng, 1, 3), p, d, t % 2 == 0);
      check_max(rng, s, *par, t % 3 == 0);
    }
  }
}

TEST(Pooling, AvgPool) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 21);
  SerialParallel serial;
  ThreadParallel threads(2);
  for (const kernels::Parallel* par : {static_cast<const kernels::Parallel*>(&serial),
                                       static_cast<const kernels::Parallel*>(&threads)}) {
    for (bool include_pad : {true, false}) {
      check_avg(rng, make(1, 4, 7, 7, 3, 1, 1, 1, false), include_pad, 0, *par);
      check_avg(rng, make(2, 3, 14, 14, 2, 2, 0, 1, false), include_pad, 0, *par);  // DenseNet
      // Ceil-mode windows that run past the padded edge: the divisor uses the clipped window.
      check_avg(rng, make(2, 3, 10, 10, 3, 2, 1, 1, true), include_pad, 0, *par);
      check_avg(rng, make(1, 2, 6, 5, 4, 3, 1, 1, true), include_pad, 0, *par);
      check_avg(rng, make(1, 2, 9, 9, 3, 3, 1, 1, true), include_pad, 5, *par);
      for (int t = 0; t < 10; ++t) {
        const int64_t k = testing::rand_int(rng, 1, 4), p = testing::rand_int(rng, 0, k / 2);
        const int64_t H = testing::rand_int(rng, k, 15);
        check_avg(rng,
                  make(testing::rand_int(rng, 1, 2), testing::rand_int(rng, 1, 3), H, H + 1, k,
                       testing::rand_int(rng, 1, 3), p, 1, t % 2 == 1),
                  include_pad, t % 4 == 0 ? 3 : 0, *par);
      }
    }
  }
  // Hand-checked: 3x3 input, k=2 s=2 p=1 ceil: corner window covers one real pixel.
  const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  float y[4];
  const Pool2dShape s{1, 1, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1};
  kernels::avg_pool2d_nchw(s, x, y, true, 0, serial);
  EXPECT_FLOAT_EQ(y[0], 1.f / 4.f);
  EXPECT_FLOAT_EQ(y[3], (5.f + 6.f + 8.f + 9.f) / 4.f);
  kernels::avg_pool2d_nchw(s, x, y, false, 0, serial);
  EXPECT_FLOAT_EQ(y[0], 1.f);
  EXPECT_FLOAT_EQ(y[1], (2.f + 3.f) / 2.f);
}

TEST(Pooling, AdaptiveAvgPool) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 22);
  SerialParallel serial;
  ThreadParallel threads(2);
  const int64_t shapes[][4] = {{7, 7, 1, 1}, {13, 11, 5, 3}, {6, 6, 6, 6}, {5, 7, 7, 9},
                               {224, 224, 7, 7}, {3, 10, 2, 4}};
  for (const kernels::Parallel* par : {static_cast<const kernels::Parallel*>(&serial),
                                       static_cast<const kernels::Parallel*>(&threads)}) {
    for (const auto& sh : shapes) {
      const int64_t N = 2, C = 3, H = sh[0], W = sh[1], OH = sh[2], OW = sh[3];
      SCOPED_TRACE(::testing::Message() << H << "x" << W << " -> " << OH << "x" << OW);
      const auto x = testing::random_vec(rng, static_cast<size_t>(N * C * H * W));
      std::vector<float> y(N * C * OH * OW), r(y.size());
      reference::ref_adaptive_avg_pool2d(N, C, H, W, OH, OW, x.data(), r.data());
      kernels::adaptive_avg_pool2d_nchw(N, C, H, W, OH, OW, x.data(), y.data(), *par);
      EXPECT_TRUE(testing::all_close(y.data(), r.data(), y.size(), 1e-5f, 1e-6f));
    }
  }
}

TEST(Pooling, InvalidShapesThrow) {
  SerialParallel serial;
  float x[16] = {}, y[16] = {};
  Pool2dShape bad_stride{1, 1, 4, 4, 2, 2, 2, 2, 0, 1, 0, 0, 1, 1};
  EXPECT_THROW(kernels::max_pool2d_nchw(bad_stride, x, y, nullptr, serial), Error);
  Pool2dShape dilated{1, 1, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0, 2, 1};
  EXPECT_THROW(kernels::avg_pool2d_nchw(dilated, x, y, true, 0, serial), Error);
  EXPECT_THROW(kernels::adaptive_avg_pool2d_nchw(1, 1, 4, 4, 0, 1, x, y, serial), Error);
}

}  // namespace
}  // namespace dnnfusion
