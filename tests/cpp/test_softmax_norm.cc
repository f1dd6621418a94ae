// Randomized tests of kernels/cpu/softmax and kernels/cpu/normalization against the naive
// double reference: softmax/log-softmax with inner == 1 and inner > 1, large logits, -inf and
// NaN rows, in place; layer norm / batch norm / group norm with and without affine params and
// statistic outputs, |x| up to ~100. Serial and 2 threads; replay with DNNFUSION_TEST_SEED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/normalization.h"
#include "kernels/cpu/softmax.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using namespace kernels;
using namespace testing;  // kernel_test_util.h: seed, kSerial/kTwo, shape and buffer helpers

std::vector<float> randn(std::mt19937_64& g, int64_t n, double scale, double offset = 0) {
  std::normal_distribution<double> d(offset, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double a = got[i], b = ref[i];
    if (!values_close(a, b, rtol, atol)) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": got " << a << " expected " << b;
    }
  }
}

TEST(Softmax, RandomShapesBothForms) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed);
  const int64_t dims[] = {1, 2, 3, 7, 8, 9, 16, 31, 100, 1000, 4099};
  const int64_t others[] = {1, 2, 3, 5, 17, 300};
  for (int rep = 0; rep < 80; ++rep) {
    const int64_t outer = others[std::uniform_int_distribution<int>(0, 5)(g)];
    const int64_t dim = dims[std::uniform_int_distribution<int>(0, 10)(g)];
    const int64_t inner = rep % 2 ? 1 : others[std::uniform_int_distribution<int>(0, 5)(g)];
    if (outer * dim * inner > 400000) continue;
    const bool log = rep % 4 >= 2;
    const double scale = rep % 3 == 0 ? 30.0 : 2.0;  // large logits exercise the max subtraction
    auto x = randn(g, outer * dim * inner, scale, rep % 5 == 0 ? 500.0 : 0.0);
    std::vector<float> y(x.size()), r(x.size());
    softmax(x.data(), y.data(), outer, dim, inner, log, rep % 3 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::softmax(x.data(), r.data(), outer, dim, inner, log);
    const std::string what = std::string(log ? "log_softmax" : "softmax") + " outer " + std::to_string(outer) + " dim " +
                             std::to_string(dim) + " inner " + std::to_string(inner);
    expect_close(y, r, log ? 1e-6 : 2e-6, log ? 2e-5 : 1e-9, what);
    // in place gives the same bits
    softmax(x.data(), x.data(), outer, dim, inner, log, kSerial);
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << "in place: " << what;
  }
}

TEST(Softmax, SpecialRows) {
  for (bool log : {false, true})
    for (int64_t inner : {1, 3}) {
      // rows: contains +inf-free large values and -inf; all -inf; contains NaN
      const int64_t dim = 4;
      std::vector<float> x = {1000.f, -INFINITY, 999.f, 0.f};
      std::vector<float> full;
      for (float v : x) for (int64_t i = 0; i < inner; ++i) full.push_back(v);
      for (int k = 0; k < dim; ++k) for (int64_t i = 0; i < inner; ++i) full.push_back(-INFINITY);
      for (int k = 0; k < dim; ++k) for (int64_t i = 0; i < inner; ++i) full.push_back(k == 2 ? NAN : 1.f);
      std::vector<float> y(full.size()), r(full.size());
      softmax(full.data(), y.data(), 3, dim, inner, log, kSerial);
      reference::softmax(full.data(), r.data(), 3, dim, inner, log);
      expect_close(y, r, 1e-6, 1e-6, std::string("special rows log=") + (log ? "1" : "0") + " inner " + std::to_string(inner));
      EXPECT_TRUE(std::isnan(y[dim * inner]));          // all -inf -> NaN like torch
      EXPECT_TRUE(std::isnan(y[2 * dim * inner + 0]));  // NaN poisons its row
    }
}

TEST(Normalization, LayerNormRandom) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 1);
  const int64_t cols_list[] = {1, 3, 8, 17, 64, 768, 1025};
  for (int rep = 0; rep < 40; ++rep) {
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 40)(g);
    const int64_t cols = cols_list[rep % 7];
    auto x = randn(g, rows * cols, rep % 2 ? 100.0 : 1.0, rep % 3 ? 0.0 : 50.0);
    auto w = randn(g, cols, 1.0, 1.0), b = randn(g, cols, 1.0);
    const bool hw = rep % 4 != 1, hb = rep % 4 != 2, stats = rep % 2 == 0;
    std::vector<float> y(x.size()), ry(x.size()), m(rows), rs(rows), rm(rows), rrs(rows);
    layer_norm(x.data(), hw ? w.data() : nullptr, hb ? b.data() : nullptr, 1e-5f, rows, cols, y.data(),
               stats ? m.data() : nullptr, stats ? rs.data() : nullptr, rep % 3 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::layer_norm(x.data(), hw ? w.data() : nullptr, hb ? b.data() : nullptr, 1e-5f, rows, cols, ry.data(), rm.data(),
                          rrs.data());
    const std::string what = "layer_norm rows " + std::to_string(rows) + " cols " + std::to_string(cols);
    expect_close(y, ry, 1e-5, 1e-5, what);
    if (stats) {
      expect_close(m, rm, 1e-6, 1e-6, what + " mean");
      expect_close(rs, rrs, 1e-6, 0, what + " rstd");
    }
  }
}

TEST(Normalization, BatchNormInference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 2);
  for (int rep = 0; rep < 30; ++rep) {
    const int64_t N = std::uniform_int_distribution<int64_t>(1, 4)(g), C = std::uniform_int_distribution<int64_t>(1, 40)(g);
    const int64_t inner = rep % 3 == 0 ? 1 : std::uniform_int_distribution<int64_t>(1, 300)(g);
    auto x = randn(g, N * C * inner, 100.0);
    auto rm = randn(g, C, 5.0), w = randn(g, C, 1.0, 1.0), b = randn(g, C, 1.0);
    auto rv = randn(g, C, 0.5, 2.0);
    for (auto& v : rv) v = std::fabs(v) + 0.01f;
    const bool hw = rep % 4 != 1, hb = rep % 4 != 2;
    std::vector<float> y(x.size()), ry(x.size());
    batch_norm_inference(x.data(), rm.data(), rv.data(), hw ? w.data() : nullptr, hb ? b.data() : nullptr, 1e-5f, N, C, inner,
                         y.data(), rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::batch_norm_inference(x.data(), rm.data(), rv.data(), hw ? w.data() : nullptr, hb ? b.data() : nullptr, 1e-5f, N,
                                    C, inner, ry.data());
    // folded scale/shift in float: error is relative to the unshifted magnitude
    expect_close(y, ry, 1e-5, 2e-4, "batch_norm N " + std::to_string(N) + " C " + std::to_string(C) + " inner " + std::to_string(inner));
  }
  EXPECT_THROW(batch_norm_inference(nullptr, nullptr, nullptr, nullptr, nullptr, 1e-5f, 1, 1, 1, nullptr, kSerial), Error);
}

TEST(Normalization, GroupNormRandom) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 3);
  for (int rep = 0; rep < 30; ++rep) {
    const int64_t G = std::uniform_int_distribution<int64_t>(1, 8)(g);
    const int64_t C = G * std::uniform_int_distribution<int64_t>(1, 6)(g);
    const int64_t N = std::uniform_int_distribution<int64_t>(1, 3)(g), inner = std::uniform_int_distribution<int64_t>(1, 200)(g);
    auto x = randn(g, N * C * inner, rep % 2 ? 100.0 : 1.0, rep % 3 ? 0.0 : 30.0);
    auto w = randn(g, C, 1.0, 1.0), b = randn(g, C, 1.0);
    const bool aff = rep % 3 != 1, stats = rep % 2 == 0;
    std::vector<float> y(x.size()), ry(x.size()), m(N * G), rs(N * G), rm(N * G), rrs(N * G);
    group_norm(x.data(), aff ? w.data() : nullptr, aff ? b.data() : nullptr, 1e-5f, N, C, inner, G, y.data(),
               stats ? m.data() : nullptr, stats ? rs.data() : nullptr, rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::group_norm(x.data(), aff ? w.data() : nullptr, aff ? b.data() : nullptr, 1e-5f, N, C, inner, G, ry.data(),
                          rm.data(), rrs.data());
    const std::string what = "group_norm N " + std::to_string(N) + " C " + std::to_string(C) + " G " + std::to_string(G) +
                             " inner " + std::to_string(inner);
    expect_close(y, ry, 1e-5, 1e-5, what);
    if (stats) {
      expect_close(m, rm, 1e-6, 1e-6, what + " mean");
      expect_close(rs, rrs, 1e-6, 0, what + " rstd");
    }
  }
  float dummy[6] = {0};
  EXPECT_THROW(group_norm(dummy, nullptr, nullptr, 1e-5f, 1, 6, 1, 4, dummy, nullptr, nullptr, kSerial), Error);
  EXPECT_THROW(group_norm(dummy, nullptr, nullptr, 1e-5f, 1, 6, 1, 0, dummy, nullptr, nullptr, kSerial), Error);
}

}  // namespace
}  // namespace dnnfusion
