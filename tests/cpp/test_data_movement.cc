// Randomized tests of kernels/cpu/data_movement against the naive reference: strided_copy over
// permutes, transposes, expands (stride 0), slices with offsets, negative strides, every element
// size; concat with empty inputs; index_select with negative / int32 indices and errors; gather;
// constant_pad with negative pads (crop); fill; arange. Serial and 2 threads; replay with
// DNNFUSION_TEST_SEED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/data_movement.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using namespace kernels;
using namespace testing;  // kernel_test_util.h: seed, kSerial/kTwo, shape and buffer helpers

std::vector<unsigned char> random_bytes(std::mt19937_64& g, size_t n) {
  std::vector<unsigned char> b(std::max<size_t>(n, 1));
  for (auto& c : b) c = static_cast<unsigned char>(g());
  return b;
}
std::vector<int64_t> random_shape(std::mt19937_64& g, int max_rank, int64_t cap) {
  static const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 31, 33, 64};
  return random_shape_from(g, sizes, max_rank, cap);
}

TEST(DataMovement, StridedCopyRandomViews) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed);
  const size_t sizes[] = {1, 2, 4, 8, 3, 16};
  for (int rep = 0; rep < 300; ++rep) {
    const size_t es = sizes[rep % 6];
    const auto shape = random_shape(g, 5, 40000);
    const int64_t r = static_cast<int64_t>(shape.size());
    // a base tensor larger than the view: permuted storage, gaps, expands, maybe reversed dims
    std::vector<int64_t> order(r);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), g);
    std::vector<int64_t> strides(r, 0);
    int64_t st = 1, offset = 0;
    for (int64_t j = r - 1; j >= 0; --j) {
      const int64_t d = order[j];
      const int mode = std::uniform_int_distribution<int>(0, 9)(g);
      if (mode == 0) continue;  // expand: stride 0
      strides[d] = st;
      st *= shape[d] + (mode == 1 ? 3 : 0);  // slice inside a wider dim
    }
    for (int64_t d = 0; d < r; ++d)
      if (std::uniform_int_distribution<int>(0, 7)(g) == 0 && strides[d] != 0) {  // flip
        offset += (shape[d] - 1) * strides[d];
        strides[d] = -strides[d];
      }
    const int64_t lead = std::uniform_int_distribution<int64_t>(0, 5)(g);
    offset += lead;
    const auto src = random_bytes(g, static_cast<size_t>(st + lead + 1) * es);
    const int64_t n = numel(shape);
    std::vector<unsigned char> got(static_cast<size_t>(n) * es + 1, 0xAB), ref(got.size(), 0xAB);
    strided_copy(es, shape, src.data(), strides, offset, got.data(), rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::strided_copy(es, shape, src.data(), strides, offset, ref.data());
    ASSERT_EQ(got, ref) << "strided_copy es " << es << " shape " << shape_str(shape);
  }
}

TEST(DataMovement, StridedCopyFastPaths) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 1);
  struct Case { std::vector<int64_t> shape, strides; int64_t offset; };
  const Case cases[] = {
      {{515, 1029}, {1, 515}, 0},                 // 2-D transpose, ragged tiles
      {{2, 64, 33, 3}, {6336, 1, 192, 64}, 0},    // NHWC <- NCHW style permute
      {{3, 70000}, {70000, 1}, 0},                // contiguous memcpy
      {{300, 257}, {300, 1}, 5},                  // rows (slice of last dim) with offset
      {{7, 1, 5}, {5, 999, 1}, 0},                // size-1 dim with a junk stride
      {{4, 1000}, {0, 1}, 0},                     // expand of the outer dim
      {{1000, 4}, {1, 0}, 0},                     // expand of the inner dim
  };
  for (const auto& c : cases)
    for (size_t es : {size_t{4}, size_t{8}, size_t{2}, size_t{1}, size_t{12}}) {
      int64_t span = c.offset + 1;
      for (size_t d = 0; d < c.shape.size(); ++d) span += (c.shape[d] - 1) * std::abs(c.strides[d]);
      const auto src = random_bytes(g, static_cast<size_t>(span) * es);
      const int64_t n = numel(c.shape);
      std::vector<unsigned char> got(static_cast<size_t>(n) * es), ref(got.size());
      strided_copy(es, c.shape, src.data(), c.strides, c.offset, got.data(), kTwo);
      reference::strided_copy(es, c.shape, src.data(), c.strides, c.offset, ref.data());
      ASSERT_EQ(got, ref) << "case " << shape_str(c.shape) << " es " << es;
    }
  EXPECT_THROW(strided_copy(4, {2, 3}, nullptr, {1}, 0, nullptr, kSerial), Error);
  // 0-d and empty
  const float one = 3.f;
  float out = 0;
  strided_copy(4, {}, &one, {}, 0, &out, kSerial);
  EXPECT_EQ(out, 3.f);
  strided_copy(4, {5, 0}, nullptr, {0, 1}, 0, nullptr, kSerial);
}

TEST(DataMovement, ConcatRandom) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 2);
  for (int rep = 0; rep < 100; ++rep) {
    auto base = random_shape(g, 4, 5000);
    if (base.empty()) base.push_back(3);
    const int64_t r = static_cast<int64_t>(base.size());
    const int64_t dim = std::uniform_int_distribution<int64_t>(-r, r - 1)(g);
    const int64_t d = dim < 0 ? dim + r : dim;
    const size_t es = rep % 3 == 0 ? 8 : (rep % 3 == 1 ? 4 : 1);
    const int k = std::uniform_int_distribution<int>(1, 4)(g);
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<unsigned char>> data;
    for (int i = 0; i < k; ++i) {
      auto s = base;
      s[d] = std::uniform_int_distribution<int64_t>(0, 5)(g);  // zero allowed
      if (rep % 7 == 0 && i == 1) s = {0};                   // legacy empty 1-D input
      shapes.push_back(s);
      data.push_back(random_bytes(g, static_cast<size_t>(numel(s)) * es));
    }
    std::vector<const void*> ptrs;
    for (auto& v : data) ptrs.push_back(v.data());
    int64_t total = 0;
    for (auto& s : shapes)
      if (static_cast<int64_t>(s.size()) == r) total += s[d];
    const int64_t n = numel(base) / base[d] * total;
    std::vector<unsigned char> got(static_cast<size_t>(n) * es + 1, 0xCD), ref(got.size(), 0xCD);
    concat(es, ptrs, shapes, dim, got.data(), rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::concat(es, ptrs, shapes, dim, ref.data());
    ASSERT_EQ(got, ref) << "concat base " << shape_str(base) << " dim " << dim;
  }
  const float a[4] = {1, 2, 3, 4};
  float out[8];
  EXPECT_THROW(concat(4, {a, a}, {{2, 2}, {2, 1}}, 0, out, kSerial), Error);  // mismatched non-concat dim
  EXPECT_THROW(concat(4, {a, a}, {{2, 2}, {2, 2}}, 2, out, kSerial), Error);  // bad dim
  EXPECT_THROW(concat(4, {a, a}, {{2, 2}, {4}}, 0, out, kSerial), Error);     // rank mismatch
}

TEST(DataMovement, IndexSelectAndEmbedding) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 3);
  for (int rep = 0; rep < 60; ++rep) {
    const int64_t outer = std::uniform_int_distribution<int64_t>(1, 6)(g);
    const int64_t sd = std::uniform_int_distribution<int64_t>(1, 50)(g);
    const int64_t inner = rep % 4 == 0 ? 1 : std::uniform_int_distribution<int64_t>(1, 300)(g);
    const int64_t ni = std::uniform_int_distribution<int64_t>(0, 40)(g);
    const size_t es = rep % 2 ? 4 : 2;
    const auto src = random_bytes(g, static_cast<size_t>(outer * sd * inner) * es);
    const DType idt = rep % 3 ? DType::Int64 : DType::Int32;
    std::vector<int64_t> i64(ni);
    std::vector<int32_t> i32(ni);
    for (int64_t j = 0; j < ni; ++j) {
      i64[j] = std::uniform_int_distribution<int64_t>(0, sd - 1)(g);
      i32[j] = static_cast<int32_t>(i64[j]);
    }
    const void* idx = idt == DType::Int64 ? static_cast<const void*>(i64.data()) : i32.data();
    std::vector<unsigned char> got(static_cast<size_t>(outer * ni * inner) * es + 1, 0xEE), ref(got.size(), 0xEE);
    index_select(es, src.data(), outer, sd, inner, idx, idt, ni, got.data(), rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::index_select(es, src.data(), outer, sd, inner, idx, idt, ni, ref.data());
    ASSERT_EQ(got, ref) << "index_select outer " << outer << " src_dim " << sd << " inner " << inner;
  }
  const float emb[6] = {0, 1, 2, 3, 4, 5};
  float out[4];
  const int64_t bad[2] = {1, 3};
  try {
    index_select(4, emb, 1, 3, 2, bad, DType::Int64, 2, out, kSerial);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("index 3"), std::string::npos) << m;
    EXPECT_NE(m.find("size 3"), std::string::npos) << m;
  }
  const int64_t neg[1] = {-1};  // eager's index_select and embedding take no negative index
  EXPECT_THROW(index_select(4, emb, 1, 3, 2, neg, DType::Int64, 1, out, kSerial), IndexOutOfRange);
  EXPECT_THROW(reference::index_select(4, emb, 1, 3, 2, neg, DType::Int64, 1, out), IndexOutOfRange);
  EXPECT_THROW(index_select(4, emb, 1, 3, 2, neg, DType::Float32, 1, out, kSerial), Error);
}

TEST(DataMovement, GatherRandom) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 4);
  for (int rep = 0; rep < 80; ++rep) {
    const auto src_shape = random_shape(g, 4, 4000);
    const int64_t r = static_cast<int64_t>(src_shape.size());
    if (r == 0 || numel(src_shape) == 0) continue;
    const int64_t dim = std::uniform_int_distribution<int64_t>(-r, r - 1)(g);
    const int64_t d = dim < 0 ? dim + r : dim;
    std::vector<int64_t> shape(src_shape);
    for (int64_t k = 0; k < r; ++k)
      shape[k] = k == d ? std::uniform_int_distribution<int64_t>(0, 6)(g) : std::uniform_int_distribution<int64_t>(1, src_shape[k])(g);
    const int64_t n = numel(shape);
    std::vector<int64_t> index(std::max<int64_t>(n, 1));
    for (auto& v : index) v = std::uniform_int_distribution<int64_t>(0, src_shape[d] - 1)(g);
    const size_t es = rep % 2 ? 4 : 8;
    const auto src = random_bytes(g, static_cast<size_t>(numel(src_shape)) * es);
    std::vector<unsigned char> got(static_cast<size_t>(n) * es + 1, 0x11), ref(got.size(), 0x11);
    gather(es, src.data(), src_shape, dim, index.data(), shape, got.data(), rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::gather(es, src.data(), src_shape, dim, index.data(), shape, ref.data());
    ASSERT_EQ(got, ref) << "gather src " << shape_str(src_shape) << " index " << shape_str(shape) << " dim " << dim;
  }
  const float s[6] = {0, 1, 2, 3, 4, 5};
  float o[6];
  const int64_t bad[2] = {0, 2};
  EXPECT_THROW(gather(4, s, {3, 2}, 1, bad, {1, 2}, o, kSerial), Error);  // index 2 >= size 2
  const int64_t negative[2] = {0, -1};  // eager's gather takes no negative index
  EXPECT_THROW(gather(4, s, {3, 2}, 1, negative, {1, 2}, o, kSerial), Error);
  EXPECT_THROW(reference::gather(4, s, {3, 2}, 1, negative, {1, 2}, o), Error);
  EXPECT_THROW(gather(4, s, {3, 2}, 1, bad, {2}, o, kSerial), Error);         // rank mismatch
  EXPECT_THROW(gather(4, s, {3, 2}, 0, bad, {1, 3}, o, kSerial), Error);      // index larger than src off-dim
}

TEST(DataMovement, ConstantPadRandom) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 5);
  const DType dts[] = {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Bool, DType::UInt8, DType::Int8};
  for (int rep = 0; rep < 120; ++rep) {
    const DType t = dts[rep % 7];
    auto shape = random_shape(g, 4, 3000);
    const int64_t r = static_cast<int64_t>(shape.size());
    const int np = std::uniform_int_distribution<int>(0, static_cast<int>(r))(g);
    std::vector<int64_t> pads;
    for (int k = 0; k < np; ++k) {
      const int64_t dsz = shape[r - 1 - k];
      for (int side = 0; side < 2; ++side) pads.push_back(std::uniform_int_distribution<int64_t>(-dsz / 2, 3)(g));
    }
    std::vector<int64_t> oshape = shape;
    for (int k = 0; k < np; ++k) oshape[r - 1 - k] += pads[2 * k] + pads[2 * k + 1];
    const double value = t == DType::Bool ? 1.0 : (is_floating(t) ? -2.5 : 7.0);
    const auto src = random_bytes(g, static_cast<size_t>(numel(shape)) * dtype_size(t));
    std::vector<unsigned char> srcv = src;
    if (t == DType::Bool)
      for (auto& c : srcv) c &= 1;
    // random bytes can be signalling NaNs, which the reference's value round trip quiets
    for (int64_t k = 0; k < numel(shape); ++k) {
      const double v = std::uniform_real_distribution<double>(-100, 100)(g);
      if (t == DType::Float32) {
        const float f = static_cast<float>(v);
        std::memcpy(srcv.data() + 4 * k, &f, 4);
      } else if (t == DType::Float64) {
        std::memcpy(srcv.data() + 8 * k, &v, 8);
      }
    }
    const int64_t n = numel(oshape);
    std::vector<unsigned char> got(static_cast<size_t>(n) * dtype_size(t) + 1, 0x22), ref(got.size(), 0x22);
    constant_pad(t, srcv.data(), shape, pads, value, got.data(), rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::constant_pad(t, srcv.data(), shape, pads, value, ref.data());
    std::string ps;
    for (auto p : pads) ps += std::to_string(p) + ",";
    ASSERT_EQ(got, ref) << "constant_pad " << dtype_name(t) << " " << shape_str(shape) << " pads {" << ps << "}";
  }
  const float s[4] = {1, 2, 3, 4};
  float o[16];
  EXPECT_THROW(constant_pad(DType::Float32, s, {2, 2}, {1}, 0, o, kSerial), Error);              // odd pads
  EXPECT_THROW(constant_pad(DType::Float32, s, {2, 2}, {1, 1, 1, 1, 1, 1}, 0, o, kSerial), Error);  // too many
  EXPECT_THROW(constant_pad(DType::Float32, s, {2, 2}, {-2, -1}, 0, o, kSerial), Error);         // negative size
  EXPECT_THROW(constant_pad(DType::Int32, s, {2, 2}, {1, 1}, NAN, o, kSerial), Error);           // NaN into int
  EXPECT_THROW(constant_pad(DType::Float16, s, {2, 2}, {1, 1}, 0, o, kSerial), Error);
}

TEST(DataMovement, FillAndArange) {
  const DType dts[] = {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Bool, DType::UInt8, DType::Int8};
  for (DType t : dts) {
    const int64_t n = 100003;
    std::vector<unsigned char> got(static_cast<size_t>(n) * dtype_size(t)), ref(got.size());
    const double v = t == DType::Bool ? 1.0 : 5.0;
    fill(t, v, n, got.data(), kTwo);
    reference::fill(t, v, n, ref.data());
    EXPECT_EQ(got, ref) << "fill " << dtype_name(t);
    const int64_t m = t == DType::Bool ? 2 : 50;
    std::vector<unsigned char> a(static_cast<size_t>(m) * dtype_size(t)), ra(a.size());
    const double start = is_floating(t) ? -1.25 : (t == DType::UInt8 ? 2 : -3);
    const double step = is_floating(t) ? 0.1 : (t == DType::Bool ? 1 : 2);
    const double st0 = t == DType::Bool ? 0 : start;
    arange(t, st0, step, m, a.data());
    reference::arange(t, st0, step, m, ra.data());
    EXPECT_EQ(a, ra) << "arange " << dtype_name(t);
  }
  float f[3];
  arange(DType::Float32, 0, 0.5, 3, f);
  EXPECT_EQ(f[2], 1.0f);
  int64_t i[2];
  EXPECT_THROW(fill(DType::Int64, INFINITY, 2, i, kSerial), Error);
  EXPECT_THROW(fill(DType::Int8, 300, 2, i, kSerial), Error);
  EXPECT_THROW(arange(DType::Int64, 0.5, 1, 2, i), Error);
  EXPECT_THROW(fill(DType::BFloat16, 1, 2, i, kSerial), Error);
}

}  // namespace
}  // namespace dnnfusion
