// Channel scores of csrc/prune against direct computations: orthogonality (RePr), row norms,
// activation L1 accumulation, the tie-aware rank transform, the AukC combined score, keep counts
// with multiple_of rounding and the deterministic selection. Randomized with a replayable seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernel_test_util.h"
#include "prune/channel_scores.h"

namespace pr = dnnfusion::prune;
using dnnfusion::testing::random_vec;
using dnnfusion::testing::rand_int;
using dnnfusion::testing::seed_note;
using dnnfusion::testing::test_seed;

namespace {

// Direct definition: Ŵ = rows / ‖row‖, P = |ŴŴᵀ − I|, O_i = Σ_j P_ij / J, all in double.
std::vector<double> ref_orth(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<double> wn(w.begin(), w.end());
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t k = 0; k < cols; ++k) ss += wn[i * cols + k] * wn[i * cols + k];
    for (int64_t k = 0; k < cols; ++k) wn[i * cols + k] = ss > 0 ? wn[i * cols + k] / std::sqrt(ss) : 0.0;
  }
  std::vector<double> o(rows, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < rows; ++j) {
      double d = 0;
      for (int64_t k = 0; k < cols; ++k) d += wn[i * cols + k] * wn[j * cols + k];
      o[i] += std::fabs(d - (i == j ? 1.0 : 0.0)) / rows;
    }
  return o;
}

// Direct rank: (#smaller + (#equal − 1)/2) / (n − 1).
std::vector<double> ref_rank(const std::vector<float>& v) {
  const int64_t n = static_cast<int64_t>(v.size());
  std::vector<double> r(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t less = 0, eq = 0;
    for (int64_t j = 0; j < n; ++j) {
      less += v[j] < v[i];
      eq += v[j] == v[i];
    }
    r[i] = n == 1 ? 0.5 : (less + 0.5 * (eq - 1)) / static_cast<double>(n - 1);
  }
  return r;
}

// Values with deliberate ties: drawn from a few levels.
std::vector<float> tied_vec(std::mt19937_64& rng, int64_t n, int levels) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rand_int(rng, 0, levels - 1)) * 0.25f - 1.f;
  return v;
}

}  // namespace

TEST(ChannelScores, OrthogonalityMatchesDirectComputation) {
  std::mt19937_64 rng(test_seed());
  for (int t = 0; t < 40; ++t) {
    const int64_t rows = rand_int(rng, 1, 70), cols = rand_int(rng, 1, 40);
    auto w = random_vec(rng, rows * cols);
    if (t % 5 == 0)  // a zero filter: normalization must not divide by zero
      std::fill(w.begin(), w.begin() + cols, 0.f);
    std::vector<float> got(rows);
    pr::orthogonality_scores(w.data(), rows, cols, got.data());
    auto want = ref_orth(w, rows, cols);
    for (int64_t i = 0; i < rows; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5) << "rows=" << rows << " cols=" << cols << " i=" << i << " " << seed_note();
  }
}

TEST(ChannelScores, OrthogonalityOfKnownMatrices) {
  // Orthonormal rows: P = 0. Identical rows: every off-diagonal |dot| is 1, O_i = (J−1)/J.
  std::vector<float> eye = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  std::vector<float> o(3);
  pr::orthogonality_scores(eye.data(), 3, 3, o.data());
  for (float x : o) EXPECT_NEAR(x, 0.f, 1e-7);
  std::vector<float> same = {1, 2, 3, 2, 4, 6, -1, -2, -3, 0.5f, 1, 1.5f};
  std::vector<float> o4(4);
  pr::orthogonality_scores(same.data(), 4, 3, o4.data());
  for (float x : o4) EXPECT_NEAR(x, 0.75f, 1e-6);
}

TEST(ChannelScores, RowNormsAndActivationSums) {
  std::mt19937_64 rng(test_seed() + 1);
  for (int t = 0; t < 30; ++t) {
    const int64_t rows = rand_int(rng, 1, 50), cols = rand_int(rng, 1, 100);
    auto w = random_vec(rng, rows * cols, -3.f, 3.f);
    std::vector<float> l2(rows), l1(rows);
    pr::row_l2_norms(w.data(), rows, cols, l2.data());
    pr::row_l1_norms(w.data(), rows, cols, l1.data());
    for (int64_t i = 0; i < rows; ++i) {
      double s2 = 0, s1 = 0;
      for (int64_t k = 0; k < cols; ++k) {
        s2 += double(w[i * cols + k]) * w[i * cols + k];
        s1 += std::fabs(w[i * cols + k]);
      }
      ASSERT_NEAR(l2[i], std::sqrt(s2), 1e-4 * (1 + std::sqrt(s2))) << seed_note();
      ASSERT_NEAR(l1[i], s1, 1e-4 * (1 + s1)) << seed_note();
    }
    const int64_t outer = rand_int(rng, 0, 4), ch = rand_int(rng, 1, 9), inner = rand_int(rng, 0, 20);
    auto x = random_vec(rng, outer * ch * inner);
    std::vector<double> acc(ch, 1.0), want(ch, 1.0);  // accumulates onto what is there
    pr::accumulate_channel_abs_sum(x.data(), outer, ch, inner, acc.data());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < ch; ++c)
        for (int64_t i = 0; i < inner; ++i) want[c] += std::fabs(x[(o * ch + c) * inner + i]);
    for (int64_t c = 0; c < ch; ++c) ASSERT_NEAR(acc[c], want[c], 1e-9 * (1 + want[c])) << seed_note();
  }
}

TEST(ChannelScores, RankTransformMatchesDirectRanksWithTies) {
  std::mt19937_64 rng(test_seed() + 2);
  for (int t = 0; t < 60; ++t) {
    const int64_t n = rand_int(rng, 1, 80);
    auto v = t % 2 ? tied_vec(rng, n, 1 + static_cast<int>(rand_int(rng, 0, 6))) : random_vec(rng, n);
    std::vector<float> got(n);
    pr::rank_transform(v.data(), n, got.data());
    auto want = ref_rank(v);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << "n=" << n << " " << seed_note();
  }
}

TEST(ChannelScores, CombinedScoreMatchesFormula) {
  std::mt19937_64 rng(test_seed() + 3);
  for (int t = 0; t < 40; ++t) {
    const int64_t n = rand_int(rng, 1, 64);
    auto o = t % 3 ? random_vec(rng, n, 0.f, 1.f) : tied_vec(rng, n, 3);
    auto l2 = random_vec(rng, n, 0.f, 5.f);
    auto a = tied_vec(rng, n, 5);
    const double omega = std::uniform_real_distribution<double>(0, 1)(rng);
    const double lam = t == 0 ? 1.0 : t == 1 ? 0.0 : std::uniform_real_distribution<double>(0, 1)(rng);
    std::vector<float> got(n);
    pr::combined_score(o.data(), l2.data(), a.data(), n, omega, lam, got.data());
    std::vector<float> neg(o.size());
    for (size_t i = 0; i < o.size(); ++i) neg[i] = -o[i];
    auto ro = ref_rank(neg), rl = ref_rank(l2), ra = ref_rank(a);
    for (int64_t i = 0; i < n; ++i) {
      const double want = omega * (lam * ro[i] + (1 - lam) * rl[i]) + (1 - omega) * ra[i];
      ASSERT_NEAR(got[i], want, 1e-6) << "n=" << n << " omega=" << omega << " lam=" << lam << " " << seed_note();
    }
  }
  // The more redundant filter (higher O) must score lower when only orthogonality counts.
  std::vector<float> o = {0.9f, 0.1f}, l2 = {1, 1}, a = {1, 1}, s(2);
  pr::combined_score(o.data(), l2.data(), a.data(), 2, 1.0, 1.0, s.data());
  EXPECT_LT(s[0], s[1]);
}

TEST(ChannelScores, KeepCountRoundsToMultiple) {
  std::mt19937_64 rng(test_seed() + 4);
  for (int t = 0; t < 500; ++t) {
    const int64_t n = rand_int(rng, 1, 600), k = rand_int(rng, 1, 16);
    const double ratio = std::uniform_real_distribution<double>(0, 0.99)(rng);
    const int64_t got = pr::keep_count(n, ratio, k);
    int64_t want = n - static_cast<int64_t>(std::floor(n * ratio + 1e-9));
    while (want % k) ++want;
    want = std::min(n, std::max(want, k));
    ASSERT_EQ(got, want) << "n=" << n << " ratio=" << ratio << " k=" << k << " " << seed_note();
  }
  EXPECT_EQ(pr::keep_count(10, 0.3, 1), 7);
  EXPECT_EQ(pr::keep_count(64, 0.5, 8), 32);
  EXPECT_EQ(pr::keep_count(60, 0.5, 8), 32);
  EXPECT_EQ(pr::keep_count(6, 0.5, 8), 6);
}

TEST(ChannelScores, SelectKeepIsTopKWithLowerIndexWinningTies) {
  std::mt19937_64 rng(test_seed() + 5);
  for (int t = 0; t < 60; ++t) {
    const int64_t n = rand_int(rng, 1, 90), keep = rand_int(rng, 0, n);
    auto s = t % 2 ? tied_vec(rng, n, 4) : random_vec(rng, n);
    auto got = pr::select_keep(s.data(), n, keep);
    // Direct: sort indices by (score desc, index asc), take keep, sort ascending.
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
    idx.resize(keep);
    std::sort(idx.begin(), idx.end());
    ASSERT_EQ(got, idx) << "n=" << n << " keep=" << keep << " " << seed_note();
  }
}

TEST(ChannelScores, BadInputsThrowNamedErrors) {
  std::vector<float> v = {1.f, std::numeric_limits<float>::quiet_NaN()}, out(2);
  EXPECT_THROW(pr::rank_transform(v.data(), 2, out.data()), dnnfusion::Error);
  EXPECT_THROW(pr::select_keep(v.data(), 2, 1), dnnfusion::Error);
  std::vector<float> ok = {1.f, 2.f};
  EXPECT_THROW(pr::select_keep(ok.data(), 2, 3), dnnfusion::Error);
  EXPECT_THROW(pr::combined_score(ok.data(), ok.data(), ok.data(), 2, 1.5, 0.5, out.data()), dnnfusion::Error);
  EXPECT_THROW(pr::combined_score(ok.data(), ok.data(), ok.data(), 2, 0.5, -0.1, out.data()), dnnfusion::Error);
  EXPECT_THROW(pr::keep_count(10, 1.0, 1), dnnfusion::Error);
  EXPECT_THROW(pr::keep_count(10, 0.5, 0), dnnfusion::Error);
  EXPECT_THROW(pr::orthogonality_scores(ok.data(), 0, 2, out.data()), dnnfusion::Error);
  try {
    pr::combined_score(ok.data(), ok.data(), ok.data(), 2, 2.0, 0.5, out.data());
  } catch (const dnnfusion::Error& e) {
    EXPECT_NE(std::string(e.what()).find("omega"), std::string::npos) << e.what();
  }
}
