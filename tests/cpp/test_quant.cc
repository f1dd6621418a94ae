// The int8 quantization core (csrc/quant): histogram collection and growth, the KL / minmax /
// percentile thresholds on histograms whose answer is known, the KL curve against an independent
// per-bin reference, choose_multiplier against the real scale, requantize at exact halves and at the
// saturation edges, weight quantization per channel and per tensor, zero channels, bias saturation,
// batch-norm folding and per-layer requantization. Randomized parts print a replayable seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernel_test_util.h"
#include "quant/calibration.h"
#include "quant/quantize_weights.h"
#include "quant/requant.h"

namespace q = dnnfusion::quant;
using dnnfusion::InvalidInput;
using dnnfusion::testing::seed_note;
using dnnfusion::testing::test_seed;

namespace {

// KL(P||Q) of candidate i written bin by bin (group of bin k = k * 128 / i), independently of the
// group-by-group loop in calibration.cc.
double reference_kl(const std::vector<double>& c, int i) {
  std::vector<double> p(c.begin(), c.begin() + i);
  for (size_t k = i; k < c.size(); ++k) p[i - 1] += c[k];
  std::vector<double> group_total(128, 0.0), group_nonzero(128, 0.0);
  // Bin k belongs to group j when floor(j*i/128) <= k < floor((j+1)*i/128), i.e. j = the largest j
  // with floor(j*i/128) <= k; found by scanning rather than by formula.
  std::vector<int> gid(i);
  for (int k = 0, j = 0; k < i; ++k) {
    while (j + 1 < 128 && int64_t{j + 1} * i / 128 <= k) ++j;
    gid[k] = j;
  }
  for (int k = 0; k < i; ++k) {
    group_total[gid[k]] += c[k];
    group_nonzero[gid[k]] += p[k] != 0;
  }
  double sp = 0, sq = 0;
  std::vector<double> qv(i, 0.0);
  for (int k = 0; k < i; ++k) {
    if (p[k] != 0) qv[k] = group_total[gid[k]] / group_nonzero[gid[k]];
    sp += p[k];
    sq += qv[k];
  }
  double kl = 0;
  for (int k = 0; k < i; ++k) {
    if (p[k] == 0) continue;
    double pk = p[k] / sp, qk = qv[k] > 0 ? qv[k] / sq : q::kKlEpsilon;
    kl += pk * std::log(pk / qk);
  }
  return kl;
}

std::vector<double> gaussian_abs_counts(double sigma_bins, double n, int bins) {
  std::vector<double> c(bins);
  for (int k = 0; k < bins; ++k)
    c[k] = std::round(n * (std::erf((k + 1) / (sigma_bins * std::sqrt(2.0))) - std::erf(k / (sigma_bins * std::sqrt(2.0)))));
  return c;
}

}  // namespace

// ------------------------------------------------------------------ histogram

TEST(QuantHistogram, GrowthMergesBinsExactly) {
  // Powers of two keep every bin index exact, so the grown histogram must equal one built with the
  // final range from the start.
  std::mt19937_64 rng(test_seed());
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(5000), b(5000);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = 3.5f * u(rng);
  a[17] = 1.0f;
  b[3] = -3.5f;
  q::Histogram grown, fixed(q::kHistogramBins, 4.0);
  grown.add(a.data(), a.size());
  EXPECT_EQ(grown.range(), 1.0);
  grown.add(b.data(), b.size());
  EXPECT_EQ(grown.range(), 4.0) << "factor ceil(3.5 / 1) = 4";
  fixed.add(a.data(), a.size());
  fixed.add(b.data(), b.size());
  EXPECT_EQ(grown.counts(), fixed.counts()) << seed_note();
  EXPECT_EQ(grown.total(), 10000);
  EXPECT_FLOAT_EQ(grown.max_abs(), 3.5);
}

TEST(QuantHistogram, NonIntegerGrowthFactorAndPendingZeros) {
  q::Histogram h(8);
  std::vector<float> zeros(5, 0.f), first = {0.5f, -1.0f}, second = {2.5f};
  h.add(zeros.data(), zeros.size());
  EXPECT_EQ(h.range(), 0.0);
  EXPECT_EQ(h.counts()[0], 5);
  h.add(first.data(), first.size());  // range 1: 0.5 -> bin 4, 1.0 -> last bin
  EXPECT_EQ(h.counts(), (std::vector<double>{5, 0, 0, 0, 1, 0, 0, 1}));
  h.add(second.data(), second.size());  // factor 3: range 3, bins k -> k / 3; 2.5 -> bin 6
  EXPECT_EQ(h.range(), 3.0);
  EXPECT_EQ(h.counts(), (std::vector<double>{5, 1, 1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(h.total(), 8);
}

TEST(QuantHistogram, RejectsNonFiniteDataAndLeavesHistogramUnchanged) {
  q::Histogram h(16);
  std::vector<float> ok = {1.f, -2.f}, bad = {1.f, std::numeric_limits<float>::quiet_NaN()},
                     inf = {std::numeric_limits<float>::infinity()};
  h.add(ok.data(), ok.size());
  const auto before = h.counts();
  EXPECT_THROW(h.add(bad.data(), bad.size()), InvalidInput);
  EXPECT_THROW(h.add(inf.data(), inf.size()), InvalidInput);
  EXPECT_EQ(h.counts(), before);
  EXPECT_EQ(h.total(), 2);
  EXPECT_THROW(q::Histogram(0), InvalidInput);
  EXPECT_THROW(q::Histogram(16, -1.0), InvalidInput);
  EXPECT_THROW(q::Histogram::from_counts({1, -1}, 1.0), InvalidInput);
  EXPECT_THROW(q::Histogram::from_counts({1, 1}, 0.0), InvalidInput);
  EXPECT_THROW(q::Histogram::from_counts({1, 1}, 1.0, 2.0), InvalidInput);
}

// ------------------------------------------------------------------ thresholds

TEST(QuantThreshold, KlCurveMatchesPerBinReference) {
  std::mt19937_64 rng(test_seed() + 1);
  std::vector<std::vector<double>> hists = {gaussian_abs_counts(300, 1e6, 2048)};
  for (int t = 0; t < 3; ++t) {
    std::vector<double> c(dnnfusion::testing::rand_int(rng, 128, 700));
    for (auto& x : c) x = static_cast<double>(dnnfusion::testing::rand_int(rng, 0, 3) == 0 ? 0 : rng() % 1000);
    c.back() += 1;
    hists.push_back(c);
  }
  for (const auto& c : hists) {
    const auto h = q::Histogram::from_counts(c, 1.0);
    const auto kl = q::kl_divergences(h);
    ASSERT_EQ(kl.size(), c.size() - 127);
    for (size_t k = 0; k < kl.size(); ++k) {
      const double want = reference_kl(c, static_cast<int>(k + 128));
      ASSERT_NEAR(kl[k], want, 1e-12 * (1 + std::fabs(want))) << "bins=" << c.size() << " i=" << k + 128 << " "
                                                                << seed_note();
      ASSERT_TRUE(std::isfinite(kl[k]) && kl[k] >= -1e-12);
    }
  }
}

TEST(QuantThreshold, KlOnGaussianClipsTheSparseTail) {
  // |N(0, sigma)| with sigma = 200 bins in a histogram of range 10 sigma; the counts end near 4.7
  // sigma. TensorRT's KL keeps the dense body (a light tail costs little resolution at 128 levels)
  // and lands between 3 and 5 sigma, far below the histogram's range and never above the data.
  const auto h = q::Histogram::from_counts(gaussian_abs_counts(200, 1e7, 2048), 2048.0);
  const auto t = q::kl_threshold(h);
  EXPECT_GT(t.threshold, 3.0 * 200);
  EXPECT_LT(t.threshold, 5.0 * 200);
  EXPECT_LT(t.threshold, 0.5 * h.max_abs());
  EXPECT_DOUBLE_EQ(t.scale, t.threshold / 127);
}

TEST(QuantThreshold, KlOnSampledGaussianIsDeterministic) {
  // Sampled N(0, 1) in 8 batches (the range grows): the sparse extreme tail may or may not be kept,
  // but the body (3 sigma) always is, T never exceeds the data, and the same batches give the same
  // histogram and threshold.
  auto collect = [](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    q::Histogram h;
    for (int batch = 0; batch < 8; ++batch) {
      std::vector<float> x(100000);
      for (auto& v : x) v = n(rng);
      h.add(x.data(), x.size());
    }
    return h;
  };
  const auto h = collect(test_seed() + 2), again = collect(test_seed() + 2);
  const auto t = q::kl_threshold(h);
  EXPECT_GT(t.threshold, 3.0) << seed_note();
  EXPECT_LE(t.threshold, h.max_abs()) << seed_note();
  EXPECT_EQ(h.counts(), again.counts());
  EXPECT_EQ(q::kl_threshold(again).threshold, t.threshold);
}

TEST(QuantThreshold, KlOnUniformKeepsTheMax) {
  const auto h = q::Histogram::from_counts(std::vector<double>(2048, 1000.0), 8.0);
  const auto t = q::kl_threshold(h);
  EXPECT_EQ(t.threshold, 8.0) << "i = 2048 is exact (KL 0); (2048 + 0.5) * w capped at max_abs";
  EXPECT_GE(t.threshold, 0.99 * h.max_abs());
}

TEST(QuantThreshold, KlIgnoresAFarOutlier) {
  std::vector<double> c(2048, 0.0);
  for (int k = 0; k < 40; ++k) c[k] = 1000.0 * (40 - k);  // a narrow body
  c[2040] = 1;                                              // one far outlier
  const auto h = q::Histogram::from_counts(c, 2048.0);      // bin width 1
  const auto t = q::kl_threshold(h);
  EXPECT_LT(t.threshold, 200.0);
  EXPECT_GE(t.threshold, 40.0);
}

// A ReLU output: half exact zeros. They leave the KL search (every scale represents 0 exactly);
// the threshold equals that of the nonzero values alone, far above candidate 255 that the zero
// spike would otherwise force.
TEST(QuantThreshold, KlLeavesExactZerosOut) {
  std::mt19937 g(7);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> body(50000), relu(100000, 0.f);
  for (auto& v : body) v = std::fabs(n(g));
  std::copy(body.begin(), body.end(), relu.begin() + 50000);
  const float m = *std::max_element(body.begin(), body.end());
  q::Histogram with_zeros(2048, m), alone(2048, m);
  with_zeros.add(relu.data(), static_cast<int64_t>(relu.size()));
  alone.add(body.data(), static_cast<int64_t>(body.size()));
  EXPECT_EQ(with_zeros.zeros(), 50000);
  EXPECT_EQ(q::kl_threshold(with_zeros).threshold, q::kl_threshold(alone).threshold);
  EXPECT_GT(q::kl_threshold(with_zeros).threshold, 256.0 / 2048.0 * m);
}

TEST(QuantThreshold, KlConventionIsHalfABinAboveTheKeptBins) {
  // Uniform over bins [0, 200): every candidate i >= 200 has KL exactly 0 and the smallest wins.
  std::vector<double> c(2048, 0.0);
  for (int k = 0; k < 200; ++k) c[k] = 7.0;
  EXPECT_DOUBLE_EQ(q::kl_threshold(q::Histogram::from_counts(c, 2048.0)).threshold, 200.5);
  EXPECT_DOUBLE_EQ(q::kl_threshold(q::Histogram::from_counts(c, 2048.0, 199.25)).threshold, 199.25) << "cap";
}

TEST(QuantThreshold, MinmaxAndPercentile) {
  std::vector<double> c(2048, 0.0);
  c[0] = 9999;
  c[2047] = 1;
  const auto h = q::Histogram::from_counts(c, 2048.0, 2047.5);
  EXPECT_EQ(q::minmax_threshold(h).threshold, 2047.5);
  EXPECT_EQ(q::percentile_threshold(h, 99.99).threshold, 1.0) << "9999 of 10000 lie in bin 0";
  EXPECT_EQ(q::percentile_threshold(h, 99.995).threshold, 2047.5) << "capped at max_abs";
  EXPECT_EQ(q::percentile_threshold(h, 100).threshold, 2047.5);
  EXPECT_EQ(q::compute_threshold(h, q::CalibMethod::percentile, 50).threshold, 1.0);
  for (double bad : {0.0, -1.0, 100.5, std::nan("")}) EXPECT_THROW(q::percentile_threshold(h, bad), InvalidInput);
}

TEST(QuantThreshold, EmptyIsAnErrorAndAllZeroFallsBack) {
  q::Histogram empty;
  EXPECT_THROW(q::kl_threshold(empty), InvalidInput);
  EXPECT_THROW(q::minmax_threshold(empty), InvalidInput);
  EXPECT_THROW(q::percentile_threshold(empty), InvalidInput);
  q::Histogram zeros;
  std::vector<float> z(1000, 0.f);
  zeros.add(z.data(), z.size());
  for (auto m : {q::CalibMethod::kl, q::CalibMethod::minmax, q::CalibMethod::percentile}) {
    const auto t = q::compute_threshold(zeros, m);
    EXPECT_EQ(t.threshold, q::kZeroDataThreshold) << q::calib_method_name(m);
    EXPECT_EQ(t.scale, q::kZeroDataThreshold / 127);
  }
}

TEST(QuantThreshold, ParseMethod) {
  EXPECT_EQ(q::parse_calib_method("kl"), q::CalibMethod::kl);
  EXPECT_EQ(q::parse_calib_method("minmax"), q::CalibMethod::minmax);
  EXPECT_EQ(q::parse_calib_method("percentile"), q::CalibMethod::percentile);
  try {
    q::parse_calib_method("entropy");
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("entropy"), std::string::npos) << m;
    EXPECT_NE(m.find("'kl', 'minmax', 'percentile'"), std::string::npos) << m;
  }
}

// ------------------------------------------------------------------ requantization

TEST(QuantRequant, MultiplierTracksTheRealScale) {
  std::mt19937_64 rng(test_seed() + 3);
  std::uniform_real_distribution<double> e(-24.0, 30.0);
  std::uniform_int_distribution<int32_t> acc_d(-(1 << 20), 1 << 20);
  for (int t = 0; t < 20000; ++t) {
    const double s = std::exp2(e(rng));
    const q::Requant r = q::choose_multiplier(s);
    ASSERT_GE(r.shift, 0);
    ASSERT_LE(r.shift, 31);
    ASSERT_GE(r.multiplier, 0);
    const double approx = std::ldexp(static_cast<double>(r.multiplier), -r.shift);
    ASSERT_LE(std::fabs(approx - s), std::ldexp(1.0, -(r.shift + 1))) << "s=" << s << " " << seed_note();
    // Largest shift: unless the shift is already 31, M has its top bit (2^30) set, so the relative
    // error is at most 2^-31.
    if (r.shift < 31) {
      ASSERT_GE(r.multiplier, 1 << 30) << "s=" << s;
      ASSERT_LE(std::fabs(approx - s) / s, std::ldexp(1.0, -31) * (1 + 1e-12)) << "s=" << s << " " << seed_note();
    }
    // The rule then rounds acc * M / 2^shift to nearest: within 1/2 of acc * approx.
    const int32_t acc = acc_d(rng);
    const int32_t y = q::requantize(acc, r, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    const double exact = acc * approx;
    if (std::fabs(exact) < 2e9) {
      ASSERT_LE(std::fabs(y - exact), 0.5) << "acc=" << acc << " s=" << s << " " << seed_note();
    }
  }
  EXPECT_THROW(q::choose_multiplier(0.0), InvalidInput);
  EXPECT_THROW(q::choose_multiplier(-1.0), InvalidInput);
  EXPECT_THROW(q::choose_multiplier(std::ldexp(1.0, 31)), InvalidInput);
  EXPECT_THROW(q::choose_multiplier(std::nan("")), InvalidInput);
}

TEST(QuantRequant, ExactHalvesRoundTowardPlusInfinity) {
  const q::Requant half{1, 1};  // s = 0.5
  EXPECT_EQ(q::requantize(1, half), 1);     // 0.5 -> 1
  EXPECT_EQ(q::requantize(-1, half), 0);    // -0.5 -> 0
  EXPECT_EQ(q::requantize(3, half), 2);     // 1.5 -> 2
  EXPECT_EQ(q::requantize(-3, half), -1);   // -1.5 -> -1
  EXPECT_EQ(q::requantize(-5, half), -2);   // -2.5 -> -2
  const q::Requant quarter{3, 2};           // s = 0.75
  EXPECT_EQ(q::requantize(2, quarter), 2);  // 1.5 -> 2
  EXPECT_EQ(q::requantize(-2, quarter), -1);
  EXPECT_EQ(q::requantize(1, quarter), 1);   // 0.75 -> 1
  EXPECT_EQ(q::requantize(-1, quarter), -1);  // -0.75 -> -1
}

TEST(QuantRequant, SaturationAtTheEdges) {
  const q::Requant one{1, 0};
  EXPECT_EQ(q::requantize(127, one), 127);
  EXPECT_EQ(q::requantize(128, one), 127);
  EXPECT_EQ(q::requantize(-128, one), -128);
  EXPECT_EQ(q::requantize(-129, one), -128);
  // Extreme accumulator and multiplier: the int64 product cannot overflow.
  const q::Requant big{std::numeric_limits<int32_t>::max(), 31};
  EXPECT_EQ(q::requantize(std::numeric_limits<int32_t>::min(), big), -128);
  EXPECT_EQ(q::requantize(std::numeric_limits<int32_t>::max(), big), 127);
  EXPECT_EQ(q::requantize(std::numeric_limits<int32_t>::min(), big, std::numeric_limits<int32_t>::min(), 0),
            std::numeric_limits<int32_t>::min() + 1);
  // ReLU: [0, 127].
  EXPECT_EQ(q::requantize(-50, one, 0, 127), 0);
  EXPECT_EQ(q::requantize(50, one, 0, 127), 50);
  EXPECT_EQ(q::requantize(500, one, 0, 127), 127);
  // ReLU6: 6 / 0.1 = 60 units; 6 / 0.04 = 150 is capped at 127; 6 / 0.08 = 75 exactly.
  EXPECT_EQ(q::relu6_bound(0.1), 60);
  EXPECT_EQ(q::relu6_bound(0.04), 127);
  EXPECT_EQ(q::relu6_bound(0.08), 75);
  EXPECT_EQ(q::requantize(100, one, 0, q::relu6_bound(0.1)), 60);
  EXPECT_EQ(q::requantize(-100, one, 0, q::relu6_bound(0.1)), 0);
  EXPECT_EQ(q::requantize(59, one, 0, q::relu6_bound(0.1)), 59);
}

// ------------------------------------------------------------------ weights and biases

TEST(QuantWeights, ValueRoundingIsHalfAwayFromZeroAndSymmetric) {
  EXPECT_EQ(q::quantize_weight_value(2.5f, 1.f), 3);
  EXPECT_EQ(q::quantize_weight_value(-2.5f, 1.f), -3);
  EXPECT_EQ(q::quantize_weight_value(0.5f, 1.f), 1);
  EXPECT_EQ(q::quantize_weight_value(-0.5f, 1.f), -1);
  EXPECT_EQ(q::quantize_weight_value(0.49f, 1.f), 0);
  EXPECT_EQ(q::quantize_weight_value(1000.f, 1.f), 127);
  EXPECT_EQ(q::quantize_weight_value(-1000.f, 1.f), -127);
}

TEST(QuantWeights, PerChannelAndPerTensor) {
  // Exact halves only where the scale is exact (1/127 is not: 0.5 / float(1/127) is just above 63.5).
  const std::vector<float> w = {1.f, -0.5f, 0.25f, 0.01f, 0.03f, -0.04f, 0.f, 0.f, 0.f};
  const auto pc = q::quantize_weights(w.data(), 3, 3, true);
  ASSERT_EQ(pc.scales.size(), 3u);
  EXPECT_FLOAT_EQ(pc.scales[0], 1.f / 127);
  EXPECT_FLOAT_EQ(pc.scales[1], 0.04f / 127);
  EXPECT_EQ(pc.scales[2], q::kZeroChannelScale) << "a zero channel";
  EXPECT_EQ(pc.q, (std::vector<int8_t>{127, -64, 32, 32, 95, -127, 0, 0, 0}));
  const auto pt = q::quantize_weights(w.data(), 3, 3, false);
  ASSERT_EQ(pt.scales.size(), 1u);
  EXPECT_FLOAT_EQ(pt.scales[0], 1.f / 127);
  EXPECT_EQ(pt.q, (std::vector<int8_t>{127, -64, 32, 1, 4, -5, 0, 0, 0}));
  EXPECT_EQ(pt.scale_of(2), pt.scales[0]);
  const std::vector<float> zero(6, 0.f);
  const auto z = q::quantize_weights(zero.data(), 2, 3, false);
  EXPECT_EQ(z.scales, std::vector<float>{q::kZeroChannelScale});
  EXPECT_EQ(z.q, std::vector<int8_t>(6, 0));
  const std::vector<float> nan = {1.f, std::nanf("")};
  EXPECT_THROW(q::quantize_weights(nan.data(), 1, 2), InvalidInput);
  EXPECT_THROW(q::quantize_weights(w.data(), 0, 3), InvalidInput);
}

TEST(QuantWeights, RandomizedRoundTripWithinHalfAStep) {
  std::mt19937_64 rng(test_seed() + 4);
  for (int t = 0; t < 50; ++t) {
    const int64_t k = dnnfusion::testing::rand_int(rng, 1, 16), inner = dnnfusion::testing::rand_int(rng, 1, 80);
    const float mag = std::exp2(static_cast<float>(dnnfusion::testing::rand_int(rng, -20, 10)));
    auto w = dnnfusion::testing::random_vec(rng, k * inner, -mag, mag);
    for (bool per_channel : {true, false}) {
      const auto qw = q::quantize_weights(w.data(), k, inner, per_channel);
      for (int64_t c = 0; c < k; ++c) {
        const float s = qw.scale_of(c);
        int peak = 0;
        for (int64_t j = 0; j < inner; ++j) {
          const int v = qw.q[c * inner + j];
          ASSERT_LE(std::abs(v), 127);
          ASSERT_LE(std::fabs(v * double(s) - w[c * inner + j]), 0.5 * s * (1 + 1e-6))
              << "k=" << k << " inner=" << inner << " " << seed_note();
          peak = std::max(peak, std::abs(v));
        }
        if (per_channel) {
          ASSERT_EQ(peak, 127) << "the channel's largest weight maps to 127 " << seed_note();
        }
      }
    }
  }
}

TEST(QuantWeights, BiasScaleAndSaturation) {
  const std::vector<float> b = {1.f, -1.f, 1e9f, -1e9f, 0.f};
  const auto qb = q::quantize_bias(b.data(), 5, 0.1, {0.01f, 0.01f, 0.01f, 0.01f, 1.f});
  EXPECT_EQ(qb.q[0], 1000);
  EXPECT_EQ(qb.q[1], -1000);
  EXPECT_EQ(qb.q[2], q::kBiasMax);
  EXPECT_EQ(qb.q[3], -q::kBiasMax);
  EXPECT_EQ(qb.q[4], 0);
  EXPECT_EQ(qb.saturated, (std::vector<int64_t>{2, 3}));
  const auto shared = q::quantize_bias(b.data(), 2, 0.5, {0.25f});
  EXPECT_EQ(shared.q, (std::vector<int32_t>{8, -8}));
  EXPECT_TRUE(shared.saturated.empty());
  EXPECT_THROW(q::quantize_bias(b.data(), 5, 0.1, {0.01f, 0.01f}), InvalidInput);
  EXPECT_THROW(q::quantize_bias(b.data(), 2, 0.0, {0.01f}), InvalidInput);
  EXPECT_THROW(q::quantize_bias(b.data(), 2, 0.1, {-0.01f}), InvalidInput);
}

TEST(QuantWeights, BatchNormFoldEqualsConvThenBn) {
  std::mt19937_64 rng(test_seed() + 5);
  const int64_t k = 6, inner = 12;
  auto w = dnnfusion::testing::random_vec(rng, k * inner);
  auto b = dnnfusion::testing::random_vec(rng, k);
  auto gamma = dnnfusion::testing::random_vec(rng, k, 0.5f, 2.f), beta = dnnfusion::testing::random_vec(rng, k);
  auto mean = dnnfusion::testing::random_vec(rng, k), var = dnnfusion::testing::random_vec(rng, k, 0.1f, 3.f);
  auto x = dnnfusion::testing::random_vec(rng, inner);
  const double eps = 1e-5;
  auto fw = w, fb = b;
  q::fold_batch_norm(fw.data(), fb.data(), k, inner, gamma.data(), beta.data(), mean.data(), var.data(), eps);
  for (int64_t c = 0; c < k; ++c) {
    double y = b[c], yf = fb[c];
    for (int64_t j = 0; j < inner; ++j) y += double(w[c * inner + j]) * x[j], yf += double(fw[c * inner + j]) * x[j];
    const double want = (y - mean[c]) * gamma[c] / std::sqrt(var[c] + eps) + beta[c];
    ASSERT_NEAR(yf, want, 1e-5 * (1 + std::fabs(want))) << "channel " << c << " " << seed_note();
  }
  auto bad_var = var;
  bad_var[3] = -1.f;
  auto w2 = w, b2 = b;
  EXPECT_THROW(q::fold_batch_norm(w2.data(), b2.data(), k, inner, gamma.data(), beta.data(), mean.data(),
                                  bad_var.data(), eps),
               InvalidInput);
  EXPECT_EQ(w2, w) << "a failed fold leaves the weights untouched";
  EXPECT_EQ(b2, b);
}

TEST(QuantWeights, LayerRequant) {
  const auto r = q::layer_requant(0.05, {0.01f, 0.002f, 1.f}, 0.1);
  ASSERT_EQ(r.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    const auto want = q::choose_multiplier(0.05 * double(std::vector<float>{0.01f, 0.002f, 1.f}[c]) / 0.1);
    EXPECT_EQ(r[c].multiplier, want.multiplier);
    EXPECT_EQ(r[c].shift, want.shift);
  }
  const auto shared = q::layer_requant(0.05, {0.01f}, 0.1, 4);
  ASSERT_EQ(shared.size(), 4u);
  EXPECT_EQ(shared[3].multiplier, shared[0].multiplier);
  EXPECT_THROW(q::layer_requant(0.05, {0.01f, 0.02f}, 0.1, 3), InvalidInput);
  EXPECT_THROW(q::layer_requant(0.05, {0.01f}, 0.0), InvalidInput);
  EXPECT_THROW(q::layer_requant(0.05, {}, 0.1), InvalidInput);
}
