// Randomized tests of kernels/cpu/reduction (reduce, cumsum) against the naive reference:
// every ReduceOp, random axis subsets (innermost block, outer axis, interleaved), dtypes
// (float32/64, int64/32/8, uint8, bool), NaN/inf for max/min/argmax, long sums, empty axes,
// errors; serial and 2 threads. Replay with DNNFUSION_TEST_SEED=<printed seed>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/reduction.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using namespace kernels;
using namespace testing;  // kernel_test_util.h: seed, kSerial/kTwo, shape and buffer helpers

std::vector<int64_t> random_shape(std::mt19937_64& g, int max_rank = 5, int64_t cap = 30000) {
  static const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 9, 16, 17, 33, 64};
  return random_shape_from(g, sizes, max_rank, cap);
}

// mode 0: normal floats / ints in [-20, 20]; 1: near 1 (products); 2: ties (small ints); 3: specials
std::vector<char> random_data(std::mt19937_64& g, DType t, int64_t n, int mode) {
  std::vector<char> b(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(t));
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> nd(0, 10);
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (t == DType::Bool) v = u(g) < 0.5;
    else if (mode == 1) v = is_floating(t) ? 0.6 + 0.8 * u(g) : (u(g) < 0.8 ? 1 : (u(g) < 0.5 ? -1 : 2));
    else if (mode == 2) v = std::floor(u(g) * 4) - (t == DType::UInt8 ? 0 : 1);
    else if (mode == 3 && is_floating(t) && u(g) < 0.05) v = u(g) < 0.5 ? NAN : (u(g) < 0.5 ? INFINITY : -INFINITY);
    else if (is_floating(t)) v = nd(g);
    else v = std::floor(u(g) * 41) - (t == DType::UInt8 ? 0 : 20);
    write_value(b, t, i, v);
  }
  return b;
}

const char* op_name(ReduceOp op) {
  static const char* n[] = {"Sum", "Mean", "Max", "Min", "Prod", "Var", "ArgMax", "ArgMin"};
  return n[static_cast<int>(op)];
}

void check_reduce(ReduceOp op, const std::vector<int64_t>& shape, const std::vector<int64_t>& dims,
                  const std::vector<char>& x, DType in, DType out, double corr, const Parallel& par) {
  std::vector<int64_t> oshape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!dims.empty() && !std::binary_search(dims.begin(), dims.end(), static_cast<int64_t>(d))) oshape.push_back(shape[d]);
  const int64_t n = numel(oshape);
  std::vector<char> got(static_cast<size_t>(n) * dtype_size(out) + 1, 0x55), ref(got.size(), 0x55);
  reduce(op, shape, dims, x.data(), in, got.data(), out, corr, par);
  reference::reduce(op, shape, dims, x.data(), in, ref.data(), out, corr);
  std::string ds;
  for (auto d : dims) ds += std::to_string(d) + ",";
  const std::string what = std::string(op_name(op)) + " " + dtype_name(in) + "->" + dtype_name(out) + " shape " +
                           shape_str(shape) + " dims {" + ds + "}";
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    const double a = read_value(got, out, i), b = read_value(ref, out, i);
    const bool ok = is_integral(out) ? a == b : values_close(a, b, out == DType::Float64 ? 1e-12 : 1e-6, 1e-6);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": got " << a << " expected " << b;
    }
  }
  EXPECT_EQ(got.back(), 0x55) << "wrote past the end: " << what;
}

std::vector<int64_t> random_dims(std::mt19937_64& g, size_t rank) {
  std::vector<int64_t> d;
  for (size_t k = 0; k < rank; ++k)
    if (std::uniform_int_distribution<int>(0, 2)(g) == 0) d.push_back(static_cast<int64_t>(k));
  return d;
}

TEST(Reduction, FloatOpsRandomAxes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed);
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Var};
  for (ReduceOp op : ops)
    for (DType t : {DType::Float32, DType::Float64})
      for (int rep = 0; rep < 25; ++rep) {
        const auto shape = random_shape(g);
        const auto dims = random_dims(g, shape.size());
        const auto x = random_data(g, t, numel(shape), op == ReduceOp::Prod ? 1 : (rep % 4 == 3 ? 3 : 0));
        check_reduce(op, shape, dims, x, t, t, rep % 2 ? 0.0 : 1.0, rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
      }
}

TEST(Reduction, FastPathShapes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 1);
  struct Case { std::vector<int64_t> shape, dims; };
  const Case cases[] = {
      {{4, 37, 13, 11}, {2, 3}},      // mean over H,W of NCHW: [O][R]
      {{301, 67}, {0}},               // outer axis, contiguous inner: [R][I]
      {{5, 300, 70}, {1}},            // [O][R][I]
      {{3, 4, 5, 6, 7}, {0, 2, 4}},   // interleaved: permuted path
      {{2, 1, 3, 1}, {1, 3}},         // only size-1 axes reduced
      {{1, 200001}, {1}},             // one long row: split into fixed blocks
      {{3, 70001}, {1}},              // few long rows
      {{2000, 3}, {0}},               // tall and thin
      {{1, 3, 112, 112, 32}, {2, 3}}, // global pool of NCHW32c: few [R][I] groups, rows split
      {{1, 10, 56, 56, 32}, {2, 3}},  // many [R][I] groups, rows split too (row-block-major work)
      {{1, 1, 5000, 2000}, {2}},      // [R][I] with I past one inner tile, rows split
  };
  for (const auto& c : cases)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Var}) {
      const auto x = random_data(g, DType::Float32, numel(c.shape), 3);
      check_reduce(op, c.shape, c.dims, x, DType::Float32, DType::Float32, 1.0, kTwo);
      check_reduce(op, c.shape, c.dims, x, DType::Float32, DType::Float32, 0.0, kSerial);
    }
}

// A float mean over a channel-blocked global pool runs an AVX-512 column sum where the CPU has
// it; it must give the baseline loop's bits exactly (same additions per lane, same order; a NaN's
// sign may differ), for
// block widths with and without a partial vector and reduced lengths around the 32-row chunks.
TEST(Reduction, BlockedMeanIsaPathsBitIdentical) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 7);
  const std::vector<Isa> isas = isas_to_test();
  for (int rep = 0; rep < 40; ++rep) {
    static const int64_t lanes[] = {8, 16, 24, 32, 48, 64, 80, 96};
    static const int64_t sides[] = {1, 3, 5, 7, 14, 17, 28};
    const int64_t b = lanes[g() % 8], h = sides[g() % 7], w = sides[g() % 7], cb = 1 + g() % 5;
    const std::vector<int64_t> shape{1 + static_cast<int64_t>(g() % 2), cb, h, w, b};
    const auto x = random_data(g, DType::Float32, numel(shape), rep % 4 == 3 ? 3 : 0);
    const int64_t n = shape[0] * cb * b;
    std::vector<float> want;
    for (Isa isa : isas) {
      force_isa(isa);
      std::vector<float> got(static_cast<size_t>(n));
      reduce(ReduceOp::Mean, shape, {2, 3}, x.data(), DType::Float32, got.data(), DType::Float32, 0.0,
             rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
      if (want.empty()) {
        want = got;
        check_reduce(ReduceOp::Mean, shape, {2, 3}, x, DType::Float32, DType::Float32, 0.0, kSerial);
        continue;
      }
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : std::memcmp(&got[i], &want[i], sizeof(float)) == 0)
            << isa_name(isa) << " shape " << shape_str(shape) << " element " << i << ": " << got[i] << " vs "
            << want[i] << " " << seed_note();
    }
    reset_isa();
  }
}

TEST(Reduction, IntegralAndBoolInputs) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 2);
  for (int rep = 0; rep < 60; ++rep) {
    const DType in = std::vector<DType>{DType::Int64, DType::Int32, DType::Int8, DType::UInt8, DType::Bool}[rep % 5];
    const auto shape = random_shape(g, 4);
    const auto dims = random_dims(g, shape.size());
    const auto x = random_data(g, in, numel(shape), rep % 3 == 1 ? 1 : 0);
    check_reduce(ReduceOp::Sum, shape, dims, x, in, DType::Int64, 0, kTwo);
    check_reduce(ReduceOp::Prod, shape, dims, random_data(g, in, numel(shape), 1), in, DType::Int64, 0, kSerial);
    check_reduce(ReduceOp::Mean, shape, dims, x, in, DType::Float32, 0, kSerial);
    check_reduce(ReduceOp::Var, shape, dims, x, in, DType::Float64, 1, kSerial);
    if (numel(shape) > 0) {
      check_reduce(ReduceOp::Max, shape, dims, x, in, in, 0, kTwo);
      check_reduce(ReduceOp::Min, shape, dims, x, in, DType::Float32, 0, kSerial);
    }
    // sum of int8 into int8 wraps through the int64 accumulator like torch's sum(dtype=int8)
    check_reduce(ReduceOp::Sum, shape, dims, x, in, DType::Int8, 0, kSerial);
  }
}

TEST(Reduction, ArgMaxArgMinTiesAndNaN) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 3);
  for (int rep = 0; rep < 80; ++rep) {
    const DType in = std::vector<DType>{DType::Float32, DType::Float64, DType::Int64, DType::Int8, DType::Bool}[rep % 5];
    auto shape = random_shape(g, 4);
    if (numel(shape) == 0) continue;
    std::vector<int64_t> dims;
    if (!shape.empty() && rep % 4) dims.push_back(std::uniform_int_distribution<int64_t>(0, shape.size() - 1)(g));
    const auto x = random_data(g, in, numel(shape), rep % 2 ? 2 : 3);
    for (ReduceOp op : {ReduceOp::ArgMax, ReduceOp::ArgMin})
      check_reduce(op, shape, dims, x, in, DType::Int64, 0, rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
  }
  const float v[] = {1.f, 5.f, NAN, 5.f, NAN, -3.f};
  int64_t i = -1;
  reduce(ReduceOp::ArgMax, {6}, {0}, v, DType::Float32, &i, DType::Int64, 0, kSerial);
  EXPECT_EQ(i, 2);
  reduce(ReduceOp::ArgMin, {6}, {}, v, DType::Float32, &i, DType::Int64, 0, kSerial);
  EXPECT_EQ(i, 2);
  reduce(ReduceOp::ArgMax, {4}, {0}, v, DType::Float32, &i, DType::Int64, 0, kSerial);
  EXPECT_EQ(i, 2);
  reduce(ReduceOp::ArgMax, {2}, {0}, v, DType::Float32, &i, DType::Int64, 0, kSerial);
  EXPECT_EQ(i, 1);
  float m = 0;
  reduce(ReduceOp::Max, {6}, {}, v, DType::Float32, &m, DType::Float32, 0, kSerial);
  EXPECT_TRUE(std::isnan(m));
}

TEST(Reduction, LongSumAccurateAndThreadIndependent) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 4);
  const int64_t n = 1000003;
  std::vector<float> x(n);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  double exact = 0;
  for (auto& v : x) {
    v = u(g);
    exact += v;
  }
  float s1 = 0, s2 = 0;
  reduce(ReduceOp::Sum, {n}, {}, x.data(), DType::Float32, &s1, DType::Float32, 0, kSerial);
  reduce(ReduceOp::Sum, {n}, {0}, x.data(), DType::Float32, &s2, DType::Float32, 0, kTwo);
  EXPECT_NEAR(s1, exact, 1e-6 * exact);
  EXPECT_EQ(s1, s2);
  // The same for a split [R][I] column reduction (global pool of a channel-blocked tensor).
  std::vector<float> c1(16), c2(16);
  reduce(ReduceOp::Sum, {1, n / 16, 16}, {1}, x.data(), DType::Float32, c1.data(), DType::Float32, 0, kSerial);
  reduce(ReduceOp::Sum, {1, n / 16, 16}, {1}, x.data(), DType::Float32, c2.data(), DType::Float32, 0, kTwo);
  EXPECT_EQ(c1, c2);
  // Many groups with split rows: the work order is row-block-major, the merge order fixed.
  const int64_t groups = 9, rows = n / (16 * groups);
  std::vector<float> g1(groups * 16), g3(groups * 16);
  reduce(ReduceOp::Sum, {groups, rows, 16}, {1}, x.data(), DType::Float32, g1.data(), DType::Float32, 0, kSerial);
  reduce(ReduceOp::Sum, {groups, rows, 16}, {1}, x.data(), DType::Float32, g3.data(), DType::Float32, 0,
         testing::ThreadParallel(3));
  EXPECT_EQ(g1, g3);
  double mean = 0;
  reduce(ReduceOp::Mean, {1, n}, {1}, x.data(), DType::Float32, &mean, DType::Float64, 0, kTwo);
  EXPECT_NEAR(mean, exact / n, 1e-12);
}

TEST(Reduction, EmptyAxes) {
  std::vector<float> out(3, -1.f);
  const float* none = nullptr;
  reduce(ReduceOp::Sum, {3, 0}, {1}, none, DType::Float32, out.data(), DType::Float32, 0, kSerial);
  EXPECT_EQ(out, (std::vector<float>{0.f, 0.f, 0.f}));
  reduce(ReduceOp::Prod, {3, 0}, {1}, none, DType::Float32, out.data(), DType::Float32, 0, kSerial);
  EXPECT_EQ(out, (std::vector<float>{1.f, 1.f, 1.f}));
  reduce(ReduceOp::Mean, {3, 0}, {1}, none, DType::Float32, out.data(), DType::Float32, 0, kSerial);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[2]));
  EXPECT_THROW(reduce(ReduceOp::Max, {3, 0}, {1}, none, DType::Float32, out.data(), DType::Float32, 0, kSerial), Error);
  // nothing to reduce and nothing to write
  reduce(ReduceOp::Max, {0, 3}, {1}, none, DType::Float32, out.data(), DType::Float32, 0, kSerial);
}

TEST(Reduction, InvalidArguments) {
  const float x[6] = {1, 2, 3, 4, 5, 6};
  float y[6];
  int64_t iy[6];
  EXPECT_THROW(reduce(ReduceOp::Sum, {2, 3}, {2}, x, DType::Float32, y, DType::Float32, 0, kSerial), Error);
  EXPECT_THROW(reduce(ReduceOp::Sum, {2, 3}, {1, 0}, x, DType::Float32, y, DType::Float32, 0, kSerial), Error);
  EXPECT_THROW(reduce(ReduceOp::Sum, {2, 3}, {1, 1}, x, DType::Float32, y, DType::Float32, 0, kSerial), Error);
  EXPECT_THROW(reduce(ReduceOp::ArgMax, {2, 3}, {0, 1}, x, DType::Float32, iy, DType::Int64, 0, kSerial), Error);
  EXPECT_THROW(reduce(ReduceOp::ArgMax, {2, 3}, {0}, x, DType::Float32, y, DType::Float32, 0, kSerial), Error);
  EXPECT_THROW(reduce(ReduceOp::Sum, {2, 3}, {0}, x, DType::Float16, y, DType::Float32, 0, kSerial), Error);
  EXPECT_THROW(reduce(ReduceOp::Sum, {2, 3}, {0}, x, DType::Float32, y, DType::BFloat16, 0, kSerial), Error);
  EXPECT_THROW(cumsum({2, 3}, 2, x, DType::Float32, y, DType::Float32, kSerial), Error);
  EXPECT_THROW(cumsum({2, 3}, -3, x, DType::Float32, y, DType::Float32, kSerial), Error);
}

TEST(Reduction, CumsumRandom) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 5);
  const DType all[] = {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Bool, DType::UInt8, DType::Int8};
  for (int rep = 0; rep < 60; ++rep) {
    const auto shape = random_shape(g, 4, 5000);
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t dim = std::uniform_int_distribution<int64_t>(-std::max<int64_t>(rank, 1), std::max<int64_t>(rank, 1) - 1)(g);
    const DType in = all[rep % 7];
    const DType out = rep % 3 == 0 ? DType::Float32 : (is_floating(in) ? in : DType::Int64);
    const int64_t n = numel(shape);
    const auto x = random_data(g, in, n, 0);
    std::vector<char> got(static_cast<size_t>(n) * dtype_size(out) + 1, 0x55), ref(got.size(), 0x55);
    cumsum(shape, dim, x.data(), in, got.data(), out, rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::cumsum(shape, dim, x.data(), in, ref.data(), out);
    for (int64_t i = 0; i < n; ++i) {
      const double a = read_value(got, out, i), b = read_value(ref, out, i);
      ASSERT_TRUE(is_integral(out) ? a == b : values_close(a, b, 1e-6, 1e-5))
          << "cumsum " << dtype_name(in) << "->" << dtype_name(out) << " " << shape_str(shape) << " dim " << dim
          << " element " << i << ": got " << a << " expected " << b;
    }
    EXPECT_EQ(got.back(), 0x55);
  }
}

}  // namespace
}  // namespace dnnfusion
