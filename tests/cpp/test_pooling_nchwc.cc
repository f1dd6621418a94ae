// Blocked pooling (kernels/cpu/pooling_nchwc) against the NCHW kernels through the layout
// transforms: random shapes, blocks, strides, paddings, ceil-mode-like output sizes, NaN inputs,
// and the epilogue hook's coverage.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/pooling.h"
#include "kernels/cpu/pooling_nchwc.h"
#include "common/error.h"
#include "kernel_test_util.h"

namespace dnnfusion::kernels {
namespace {

using testing::rand_int;
using testing::random_vec;
using testing::seed_note;
using testing::test_seed;

Pool2dShape random_shape(std::mt19937_64& rng, int64_t b, bool dilate) {
  Pool2dShape s{};
  s.N = rand_int(rng, 1, 2);
  s.C = b * rand_int(rng, 1, 3);
  s.H = rand_int(rng, 3, 13);
  s.W = rand_int(rng, 3, 13);
  s.kh = rand_int(rng, 1, 3);
  s.kw = rand_int(rng, 1, 3);
  s.sh = rand_int(rng, 1, 2);
  s.sw = rand_int(rng, 1, 2);
  s.ph = rand_int(rng, 0, s.kh / 2);
  s.pw = rand_int(rng, 0, s.kw / 2);
  s.dh = dilate ? rand_int(rng, 1, 2) : 1;
  s.dw = dilate ? rand_int(rng, 1, 2) : 1;
  const bool ceil = rand_int(rng, 0, 1) == 1;
  auto out = [&](int64_t in, int64_t k, int64_t st, int64_t p, int64_t d) {
    const int64_t span = in + 2 * p - d * (k - 1) - 1;
    int64_t o = (ceil ? (span + st - 1) / st : span / st) + 1;
    if (ceil && (o - 1) * st >= in + p) --o;  // PyTorch: the last window must start inside
    return o;
  };
  s.OH = out(s.H, s.kh, s.sh, s.ph, s.dh);
  s.OW = out(s.W, s.kw, s.sw, s.pw, s.dw);
  if (s.OH < 1 || s.OW < 1) return random_shape(rng, b, dilate);  // a dilated window wider than the image
  return s;
}

TEST(PoolingNchwc, MatchesNchwKernelsOnRandomShapes) {
  std::mt19937_64 rng(test_seed());
  SerialParallel par;
  for (int it = 0; it < 90; ++it) {
    const int64_t b = std::vector<int64_t>{1, 4, 8, 16, 32, 48, 64, 128}[rand_int(rng, 0, 7)];
    const bool is_max = it % 2 == 0;
    const Pool2dShape s = random_shape(rng, b, is_max);
    auto x = random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
    if (is_max && it % 6 == 0) x[static_cast<size_t>(rand_int(rng, 0, static_cast<int64_t>(x.size()) - 1))] = NAN;
    const bool cip = rand_int(rng, 0, 1) == 1;
    const int64_t div = it % 10 == 1 ? 5 : 0;
    std::vector<float> ref(static_cast<size_t>(s.N * s.C * s.OH * s.OW));
    if (is_max) max_pool2d_nchw(s, x.data(), ref.data(), nullptr, par);
    else avg_pool2d_nchw(s, x.data(), ref.data(), cip, div, par);
    std::vector<float> xb(x.size()), yb(ref.size()), y(ref.size());
    nchw_to_nchwc(x.data(), s.N, s.C, s.H, s.W, static_cast<int>(b), xb.data(), par);
    int64_t hooked = 0;
    ElementHook hook{[](const void* ctx, float*, int64_t, int64_t count) {
                       *static_cast<int64_t*>(const_cast<void*>(ctx)) += count;
                     },
                     &hooked};
    for (Isa isa : testing::isas_to_test()) {  // the max pool has an AVX-512 row for b % 16 == 0
      if (!is_max && isa != Isa::Scalar) continue;
      hooked = 0;
      std::fill(yb.begin(), yb.end(), -1.f);
      if (is_max) max_pool2d_nchwc(s, b, xb.data(), yb.data(), par, &hook, isa);
      else avg_pool2d_nchwc(s, b, xb.data(), yb.data(), cip, div, par, &hook);
      EXPECT_EQ(hooked, static_cast<int64_t>(ref.size())) << seed_note();
      nchwc_to_nchw(yb.data(), s.N, s.C, s.OH, s.OW, static_cast<int>(b), y.data(), par);
      for (size_t i = 0; i < ref.size(); ++i) {
        if (std::isnan(ref[i])) {
          ASSERT_TRUE(std::isnan(y[i])) << "it " << it << " i " << i << " " << isa_name(isa) << " " << seed_note();
          continue;
        }
        ASSERT_FLOAT_EQ(y[i], ref[i]) << "it " << it << (is_max ? " max" : " avg") << " b " << b << " i " << i << " "
                                      << isa_name(isa) << " " << seed_note();
      }
    }
  }
}

TEST(PoolingNchwc, BlockThatDoesNotDivideTheChannelsIsAnError) {
  SerialParallel par;
  Pool2dShape s{1, 12, 4, 4, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1};
  std::vector<float> x(12 * 16), y(12 * 4);
  EXPECT_THROW(max_pool2d_nchwc(s, 8, x.data(), y.data(), par), dnnfusion::Error);
  s.dh = 2;
  EXPECT_THROW(avg_pool2d_nchwc(s, 4, x.data(), y.data(), true, 0, par), dnnfusion::Error);
}

}  // namespace
}  // namespace dnnfusion::kernels
