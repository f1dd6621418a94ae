// Convolutions over NCHW[x]c on AMX (conv_bf16x6.h, reached through conv2d_nchwc with
// knobs.amx) against the NCHW reference: 1x1 stride-1 rows read in place, and the implicit GEMM
// over gathered taps (3x3, 7x7, 1x3, strides 1-3, padding, dilation, taps wholly outside small
// images, channel counts that are not multiples of 16); channel blocks of 16/32/64 lanes on
// either side, padded input and output blocks (poisoned input lanes), several images whose
// positions share a 32-row block, bias, residual (separate and in place), activations, the
// epilogue hook (every element once, runs inside one image), serial and two threads. Skips where
// the CPU has no AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/conv_bf16x6.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "conv_nchwc_test_util.h"

namespace dnnfusion {
namespace {

using conv_test::shape;
using kernels::Activation;
using kernels::ConvNchwcKnobs;

class ConvBf16x6 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::bf16x6_available()) GTEST_SKIP() << "this CPU or OS offers no AMX-BF16";
  }
};

// Each conv of `cases` through conv2d_nchwc with knobs.amx against the reference, serially and on
// two threads, with the epilogue options cycling over the runs.
struct Blocked {
  kernels::Conv2dShape s;
  int icb, ocb;
};

void check_cases(std::mt19937_64& rng, const std::vector<Blocked>& cases) {
  kernels::SerialParallel serial;
  testing::ThreadParallel two(2);
  int t = 0;
  for (const Blocked& c : cases) {
    ConvNchwcKnobs k;
    k.ic_bn = c.icb;
    k.oc_bn = c.ocb;
    k.reg_n = 7;
    k.amx = true;
    for (const kernels::Parallel* par : {static_cast<const kernels::Parallel*>(&serial),
                                         static_cast<const kernels::Parallel*>(&two)}) {
      conv_test::Options o;
      o.bias = t % 2 == 0;
      o.residual = t % 3 != 0;
      o.in_place_residual = t % 3 == 2;
      o.hook = t % 4 == 1;
      o.act = static_cast<Activation>(t % 3);
      ++t;
      conv_test::check(rng, c.s, k, kernels::Isa::Avx512, *par, o);
    }
  }
}

TEST_F(ConvBf16x6, MatchesTheReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 71);
  auto pw = [](int64_t N, int64_t C, int64_t H, int64_t W, int64_t K) { return shape(N, C, H, W, K, 1, 1, 1, 0); };
  check_cases(rng, {{pw(1, 64, 7, 7, 64), 16, 16},    {pw(3, 48, 5, 3, 40), 16, 32},  {pw(2, 100, 4, 4, 130), 32, 16},
                    {pw(1, 256, 14, 14, 64), 64, 64}, {pw(8, 32, 2, 2, 96), 32, 64},  {pw(2, 900, 3, 3, 70), 64, 32},
                    {pw(1, 16, 9, 9, 16), 16, 16},    {pw(4, 130, 7, 7, 200), 32, 64}});
}

TEST_F(ConvBf16x6, GatheredTapsMatchTheReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 72);
  // ResNet's stride-2 3x3 and 1x1 layers (scaled down), a 7x7, a 1x3, dilation, a padding wider
  // than the image, long K (chunked), C not a multiple of 16. shape(N, C, H, W, K, R, S, stride, pad, dil).
  check_cases(rng, {{shape(2, 64, 14, 14, 64, 3, 3, 2, 1), 16, 32},  {shape(1, 128, 9, 9, 96, 3, 3, 1, 1), 64, 64},
                    {shape(3, 48, 8, 8, 40, 1, 1, 2, 0), 16, 16},    {shape(1, 32, 23, 23, 64, 7, 7, 2, 3), 32, 64},
                    {shape(2, 40, 6, 10, 33, 1, 3, 1, 1), 16, 16},   {shape(1, 64, 12, 12, 48, 3, 3, 1, 2, 2), 32, 16},
                    {shape(2, 16, 3, 3, 32, 5, 5, 3, 4), 16, 32},    {shape(1, 300, 6, 6, 70, 3, 3, 1, 1), 32, 32}});
}

// Windows holding inf or NaN are computed in plain fp32 (the six products would turn inf * x into
// NaN): the outputs they reach are what fp32 gives (inf, -inf or NaN), the others unaffected.
TEST_F(ConvBf16x6, NonFiniteInputsFollowFp32) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 73);
  const auto s = shape(2, 40, 9, 9, 48, 3, 3, 2, 1);
  ConvNchwcKnobs k;
  k.ic_bn = 16;
  k.oc_bn = 16;
  k.amx = true;
  auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
  const auto w = testing::random_vec(rng, static_cast<size_t>(s.K * s.C * 9), 0.1f, 1.f);  // positive: inf stays inf
  x[(5 * s.H + 3) * s.W + 4] = std::numeric_limits<float>::quiet_NaN();          // image 0
  x[((s.C + 20) * s.H + 0) * s.W + 0] = std::numeric_limits<float>::infinity();  // image 1
  const int64_t OH = s.OH(), OW = s.OW(), ysize = s.N * s.K * OH * OW;
  std::vector<float> ref(static_cast<size_t>(ysize));
  reference::ref_conv2d_nchw(s, x.data(), w.data(), nullptr, ref.data(), Activation::None);
  std::vector<float> xb(static_cast<size_t>(kernels::nchwc_floats(s.N, s.C, s.H, s.W, k.ic_bn)));
  kernels::SerialParallel serial;
  kernels::nchw_to_nchwc(x.data(), s.N, s.C, s.H, s.W, k.ic_bn, xb.data(), serial);
  std::vector<float> pw(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(s, k)));
  kernels::conv_nchwc_pack_weight(s, k, w.data(), pw.data());
  std::vector<float> yb(static_cast<size_t>(kernels::nchwc_floats(s.N, s.K, OH, OW, k.oc_bn))), y(ref.size());
  kernels::conv2d_nchwc(s, k, xb.data(), pw.data(), nullptr, nullptr, Activation::None, yb.data(), serial);
  kernels::nchwc_to_nchw(yb.data(), s.N, s.K, OH, OW, k.oc_bn, y.data(), serial);
  int nan = 0, inf = 0;
  for (int64_t i = 0; i < ysize; ++i) {
    if (std::isnan(ref[i])) {
      ++nan;
      EXPECT_TRUE(std::isnan(y[i])) << "at " << i;
    } else if (std::isinf(ref[i])) {
      ++inf;
      EXPECT_EQ(y[i], ref[i]) << "at " << i;
    } else {
      EXPECT_NEAR(y[i], ref[i], 1e-4f * (1.f + std::fabs(ref[i]))) << "at " << i;
    }
  }
  EXPECT_GT(nan, 0);
  EXPECT_GT(inf, 0);
}

TEST_F(ConvBf16x6, RefusesWhatItDoesNotCover) {
  std::string why;
  EXPECT_TRUE(kernels::conv_bf16x6_supported(shape(1, 32, 8, 8, 32, 3, 3, 2, 1), 16, 16, &why)) << why;
  EXPECT_FALSE(kernels::conv_bf16x6_supported(shape(1, 32, 8, 8, 32, 1, 1, 1, 0, 1, 2), 16, 16, &why));
  EXPECT_NE(why.find("grouped"), std::string::npos) << why;
  EXPECT_FALSE(kernels::conv_bf16x6_supported(shape(1, 32, 8, 8, 32, 3, 3, 1, 1), 8, 16, &why));
  EXPECT_NE(why.find("16 lanes"), std::string::npos) << why;
  ConvNchwcKnobs k;
  k.amx = true;
  k.reg_n = 7;
  k.ic_bn = 8;
  EXPECT_THROW(kernels::conv_nchwc_check(shape(1, 32, 8, 8, 32, 3, 3, 1, 1), k, kernels::Isa::Avx512), Error);
  k.ic_bn = 16;
  EXPECT_THROW(kernels::conv_nchwc_check(shape(1, 32, 8, 8, 32, 1, 1, 1, 0), k, kernels::Isa::Avx2), Error);
}

}  // namespace
}  // namespace dnnfusion
