// Randomized tests of kernels/cpu/elementwise against the naive reference: every UnaryOp and
// BinaryOp, where, casts between all supported dtypes, broadcast patterns (scalar, per-channel,
// innermost, random), non-contiguous inputs, special values, errors; serial and 2 threads.
// Replay a failure with DNNFUSION_TEST_SEED=<printed seed>.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/reference/ref_elementwise_misc.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using namespace kernels;
using namespace testing;  // kernel_test_util.h: seed, kSerial/kTwo, shape and buffer helpers

const DType kAll[] = {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Bool, DType::UInt8, DType::Int8};

enum class Dist { Normal, Positive, NonZero, SmallInt, Special };

double draw(std::mt19937_64& g, DType t, Dist d) {
  std::uniform_real_distribution<double> u(0, 1);
  if (t == DType::Bool) return u(g) < 0.5;
  if (is_integral(t)) {
    int64_t lo = -20, hi = 20;
    if (t == DType::UInt8) lo = 0;
    if (d == Dist::SmallInt) { lo = t == DType::UInt8 ? 0 : -3; hi = 4; }
    if (d == Dist::Positive) lo = 1;
    int64_t v = lo + static_cast<int64_t>(u(g) * static_cast<double>(hi - lo + 1));
    if (d == Dist::NonZero && v == 0) v = 3;
    return static_cast<double>(v);
  }
  if (d == Dist::Special) {
    static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, 1e-30, 100.0, -100.0, 88.8, -104.0, 3.0, -3.0, 1e10};
    return sp[static_cast<size_t>(u(g) * (sizeof(sp) / sizeof(sp[0])))];
  }
  if (d == Dist::Positive) return 0.01 + u(g) * 10;
  std::normal_distribution<double> n(0, 3);
  double v = n(g);
  if (d == Dist::NonZero && std::fabs(v) < 0.05) v = 0.5;
  if (d == Dist::Normal && u(g) < 0.02) v = std::round(v);  // exact integers / ties for floor, round, eq
  return v;
}

// An operand laid out over `shape`: broadcast dims (size 1 in the operand) get stride 0, the rest
// a random storage order and optionally a gap, so the strides are genuinely non-contiguous.
struct Operand {
  std::vector<char> buf;
  DType dtype;
  std::vector<int64_t> strides;
  StridedArg arg() const { return StridedArg{buf.data(), dtype, strides}; }
};

enum class Bcast { None, Scalar, PerChannel, Innermost, Random };

Operand make_operand(std::mt19937_64& g, const std::vector<int64_t>& shape, DType t, Dist d, Bcast b, bool contiguous) {
  const size_t r = shape.size();
  std::vector<int64_t> osz(shape);
  std::uniform_int_distribution<int> coin(0, 1);
  for (size_t k = 0; k < r; ++k) {
    bool keep = true;
    switch (b) {
      case Bcast::None: break;
      case Bcast::Scalar: keep = false; break;
      case Bcast::PerChannel: keep = (r >= 2 ? k == 1 : k == 0); break;
      case Bcast::Innermost: keep = k + 1 == r; break;
      case Bcast::Random: keep = coin(g); break;
    }
    if (!keep) osz[k] = 1;
  }
  std::vector<size_t> order(r);
  for (size_t k = 0; k < r; ++k) order[k] = k;
  if (!contiguous) std::shuffle(order.begin(), order.end(), g);
  Operand op;
  op.dtype = t;
  op.strides.assign(r, 0);
  int64_t st = 1;
  for (size_t j = r; j-- > 0;) {
    const size_t k = order[j];
    if (osz[k] == 1) continue;
    op.strides[k] = st;
    st *= osz[k] * ((!contiguous && coin(g)) ? 2 : 1);
  }
  const int64_t span = st;
  op.buf.assign(static_cast<size_t>(span) * dtype_size(t), 0);
  for (int64_t i = 0; i < span; ++i) write_value(op.buf, t, i, draw(g, t, d));
  return op;
}

std::vector<int64_t> random_shape(std::mt19937_64& g, int max_rank = 5) {
  static const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 33};
  return random_shape_from(g, sizes, max_rank, 20000);
}

// Compares all elements; integral outputs must match exactly.
void expect_match(const std::vector<char>& got, const std::vector<char>& ref, DType t, int64_t n, double rtol,
                  double atol, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    const double a = read_value(got, t, i), b = read_value(ref, t, i);
    const bool ok = is_integral(t) ? (a == b) : values_close(a, b, rtol, atol);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": got " << a << " expected " << b;
    }
  }
}

const char* unary_name(UnaryOp op) {
  static const char* names[] = {"Identity", "Relu", "Hardtanh", "Clamp", "Hardswish", "Hardsigmoid", "Sigmoid", "Silu",
                                "Gelu", "GeluTanh", "Tanh", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Neg", "Abs",
                                "Erf", "PowScalar", "LeakyRelu", "Elu", "Softplus", "Mish", "LogicalNot", "Sign",
                                "Square", "Sin", "Cos", "Floor", "Ceil", "Round"};
  return names[static_cast<int>(op)];
}
constexpr int kNumUnary = static_cast<int>(UnaryOp::Round) + 1;
constexpr int kNumBinary = static_cast<int>(BinaryOp::Atan2) + 1;

UnaryAttrs attrs_for(UnaryOp op, std::mt19937_64& g) {
  UnaryAttrs at;
  switch (op) {
    case UnaryOp::Hardtanh: at.a = -1; at.b = 1; break;
    case UnaryOp::Clamp: at.a = -0.5; at.b = std::uniform_int_distribution<int>(0, 1)(g) ? 2.0 : INFINITY; break;
    case UnaryOp::PowScalar: {
      static const double e[] = {2, 3, 0.5, -1, 1.7, -2, -0.5, 1};
      at.a = e[std::uniform_int_distribution<int>(0, 7)(g)];
      break;
    }
    case UnaryOp::LeakyRelu: at.a = 0.01; break;
    case UnaryOp::Elu: at.a = 1.3; break;
    case UnaryOp::Softplus: at.a = 1.5; at.b = 20; break;
    default: break;
  }
  return at;
}

Dist dist_for(UnaryOp op) {
  switch (op) {
    case UnaryOp::Log: case UnaryOp::Sqrt: case UnaryOp::Rsqrt: case UnaryOp::PowScalar: return Dist::Positive;
    case UnaryOp::Reciprocal: return Dist::NonZero;
    default: return Dist::Normal;
  }
}

double rtol_for(UnaryOp op, DType t) {
  if (t == DType::Float64) return 1e-12;
  switch (op) {
    case UnaryOp::Exp: return 3e-7;  // exp_f32 is within ~1 ulp
    case UnaryOp::Sigmoid: case UnaryOp::Silu: case UnaryOp::Tanh: case UnaryOp::GeluTanh: case UnaryOp::Gelu:
    case UnaryOp::Erf:
      return 1e-6;
    default: return 2e-6;
  }
}

void run_unary_case(std::mt19937_64& g, UnaryOp op, DType in, DType out, Dist d, const Parallel& par,
                    const std::vector<int64_t>& shape, bool contiguous) {
  const UnaryAttrs at = attrs_for(op, g);
  const Operand x = make_operand(g, shape, in, d, Bcast::None, contiguous);
  const int64_t n = numel(shape);
  std::vector<char> got(static_cast<size_t>(n) * dtype_size(out) + 1, 0x55), ref(got.size(), 0x55);
  unary(op, at, shape, x.arg(), got.data(), out, par);
  reference::unary(op, at, shape, x.arg(), ref.data(), out);
  const std::string what = std::string(unary_name(op)) + " " + dtype_name(in) + "->" + dtype_name(out) + " shape " +
                           shape_str(shape) + " a=" + std::to_string(at.a);
  expect_match(got, ref, out, n, rtol_for(op, out), out == DType::Float64 ? 1e-12 : 1e-6, what);
  EXPECT_EQ(got.back(), 0x55) << "wrote past the end: " << what;
}

TEST(Elementwise, EveryUnaryOpFloat32RandomShapes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed);
  for (int o = 0; o < kNumUnary; ++o)
    for (int rep = 0; rep < 6; ++rep) {
      const Parallel& par = rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial;
      run_unary_case(g, static_cast<UnaryOp>(o), DType::Float32, o == static_cast<int>(UnaryOp::LogicalNot) ? DType::Bool : DType::Float32,
                     dist_for(static_cast<UnaryOp>(o)), par, random_shape(g), rep < 3);
    }
}

TEST(Elementwise, EveryUnaryOpFloat64AndLarge) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 1);
  for (int o = 0; o < kNumUnary; ++o) {
    const UnaryOp op = static_cast<UnaryOp>(o);
    run_unary_case(g, op, DType::Float64, DType::Float64, dist_for(op), kTwo, random_shape(g), false);
    // large contiguous float32 tensor, split over two threads, odd length for the vector tails
    run_unary_case(g, op, DType::Float32, DType::Float32, dist_for(op), kTwo, {3, 40001}, true);
  }
}

TEST(Elementwise, UnarySpecialValues) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 2);
  for (int o = 0; o < kNumUnary; ++o)
    for (DType t : {DType::Float32, DType::Float64}) {
      const UnaryOp op = static_cast<UnaryOp>(o);
      run_unary_case(g, op, t, op == UnaryOp::LogicalNot ? DType::Bool : t, Dist::Special, kSerial, {257}, true);
    }
}

TEST(Elementwise, ExpAndTanhAccuracySweep) {
  // dense sweep through the polynomial ranges and the exp over/underflow edges
  std::vector<float> xs;
  for (float x = -110.f; x < 95.f; x += 0.0137f) xs.push_back(x);
  for (float x = -0.7f; x < 0.7f; x += 0.00031f) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> y(xs.size());
  StridedArg a{xs.data(), DType::Float32, {1}};
  unary(UnaryOp::Exp, {}, {n}, a, y.data(), DType::Float32, kSerial);
  for (int64_t i = 0; i < n; ++i) {
    const double r = std::exp(static_cast<double>(xs[i]));
    if (r > 3.4e38) EXPECT_TRUE(std::isinf(y[i])) << xs[i];
    else if (r > 1.2e-38) EXPECT_NEAR(y[i], r, 2.5e-7 * r) << "exp(" << xs[i] << ")";
    else EXPECT_NEAR(y[i], r, 1.5e-44) << "exp(" << xs[i] << ")";
  }
  unary(UnaryOp::Tanh, {}, {n}, a, y.data(), DType::Float32, kSerial);
  for (int64_t i = 0; i < n; ++i) {
    const double r = std::tanh(static_cast<double>(xs[i]));
    EXPECT_NEAR(y[i], r, 3.6e-7 * std::fabs(r) + 1e-45) << "tanh(" << xs[i] << ")";
  }
}

TEST(Elementwise, UnaryIntegralOps) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 3);
  const UnaryOp ops[] = {UnaryOp::Identity, UnaryOp::Relu, UnaryOp::Clamp, UnaryOp::Hardtanh, UnaryOp::Neg, UnaryOp::Abs,
                         UnaryOp::Sign, UnaryOp::Square, UnaryOp::PowScalar, UnaryOp::Floor, UnaryOp::Ceil,
                         UnaryOp::Round, UnaryOp::LogicalNot};
  for (UnaryOp op : ops)
    for (DType t : {DType::Int64, DType::Int32, DType::Int8, DType::UInt8, DType::Bool}) {
      UnaryAttrs at = attrs_for(op, g);
      if (op == UnaryOp::PowScalar) at.a = 3;
      if (op == UnaryOp::Clamp) { at.a = -5; at.b = 7; }
      const auto shape = random_shape(g, 3);
      const Operand x = make_operand(g, shape, t, Dist::Normal, Bcast::None, false);
      const DType out = op == UnaryOp::LogicalNot ? DType::Bool : t;
      const int64_t n = numel(shape);
      std::vector<char> got(static_cast<size_t>(n) * dtype_size(out)), ref(got.size());
      unary(op, at, shape, x.arg(), got.data(), out, kTwo);
      reference::unary(op, at, shape, x.arg(), ref.data(), out);
      expect_match(got, ref, out, n, 0, 0, std::string(unary_name(op)) + " " + dtype_name(t));
    }
  // sigmoid of an int64 tensor into float32 computes in float
  const auto shape = std::vector<int64_t>{5, 7};
  const Operand x = make_operand(g, shape, DType::Int64, Dist::Normal, Bcast::None, true);
  std::vector<char> got(35 * 4), ref(35 * 4);
  unary(UnaryOp::Sigmoid, {}, shape, x.arg(), got.data(), DType::Float32, kSerial);
  reference::unary(UnaryOp::Sigmoid, {}, shape, x.arg(), ref.data(), DType::Float32);
  expect_match(got, ref, DType::Float32, 35, 1e-6, 1e-7, "sigmoid int64->float32");
}

TEST(Elementwise, CastsBetweenAllDtypes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 4);
  for (DType in : kAll)
    for (DType out : kAll) {
      const auto shape = random_shape(g, 4);
      const Operand x = make_operand(g, shape, in, Dist::Normal, Bcast::Random, false);
      // spice: fractional values to truncate, values outside int8/uint8 range to wrap
      const int64_t n = numel(shape);
      std::vector<char> got(static_cast<size_t>(n) * dtype_size(out)), ref(got.size());
      unary(UnaryOp::Identity, {}, shape, x.arg(), got.data(), out, kTwo);
      reference::unary(UnaryOp::Identity, {}, shape, x.arg(), ref.data(), out);
      expect_match(got, ref, out, n, 0, 0, std::string("cast ") + dtype_name(in) + "->" + dtype_name(out));
    }
  // explicit truncation / wrapping / bool facts
  const float src[] = {2.7f, -2.7f, 300.5f, -0.0f, NAN, 0.25f};
  StridedArg a{src, DType::Float32, {1}};
  int64_t i64[6];
  unary(UnaryOp::Identity, {}, {4}, a, i64, DType::Int64, kSerial);  // NaN -> int is unspecified, skip it
  EXPECT_EQ(i64[0], 2);
  EXPECT_EQ(i64[1], -2);
  EXPECT_EQ(i64[2], 300);
  uint8_t u8[6];
  unary(UnaryOp::Identity, {}, {4}, a, u8, DType::UInt8, kSerial);
  EXPECT_EQ(u8[2], 44);  // 300 wraps modulo 256
  EXPECT_EQ(u8[1], 254);
  uint8_t b[6];
  unary(UnaryOp::Identity, {}, {6}, a, b, DType::Bool, kSerial);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[3], 0);  // -0.0 is false
  EXPECT_EQ(b[4], 1);  // NaN is true
  EXPECT_EQ(b[5], 1);  // 0.25 is true (no truncation before the bool test)
}

const char* binary_name(BinaryOp op) {
  static const char* names[] = {"Add", "Sub", "Mul", "Div", "FloorDiv", "Pow", "Maximum", "Minimum", "Eq", "Ne",
                                "Lt", "Le", "Gt", "Ge", "LogicalAnd", "LogicalOr", "BitwiseAnd", "BitwiseOr",
                                "Remainder", "Atan2"};
  return names[static_cast<int>(op)];
}
bool is_cmp(BinaryOp op) { return op >= BinaryOp::Eq && op <= BinaryOp::LogicalOr; }

void run_binary_case(std::mt19937_64& g, BinaryOp op, double alpha, DType ta, DType tb, DType compute, DType out,
                     const std::vector<int64_t>& shape, Bcast ba, Bcast bb, bool contiguous, Dist da, Dist db,
                     const Parallel& par, double rtol, double atol) {
  const Operand a = make_operand(g, shape, ta, da, ba, contiguous);
  const Operand b = make_operand(g, shape, tb, db, bb, contiguous);
  const int64_t n = numel(shape);
  std::vector<char> got(static_cast<size_t>(n) * dtype_size(out) + 1, 0x55), ref(got.size(), 0x55);
  binary(op, alpha, shape, a.arg(), b.arg(), got.data(), out, compute, par);
  reference::binary(op, alpha, shape, a.arg(), b.arg(), ref.data(), out, compute);
  const std::string what = std::string(binary_name(op)) + " " + dtype_name(ta) + "," + dtype_name(tb) + " compute " +
                           dtype_name(compute) + " out " + dtype_name(out) + " shape " + shape_str(shape) +
                           " bcast " + std::to_string(static_cast<int>(ba)) + "/" + std::to_string(static_cast<int>(bb));
  expect_match(got, ref, out, n, rtol, atol, what);
  EXPECT_EQ(got.back(), 0x55) << "wrote past the end: " << what;
}

TEST(Elementwise, EveryBinaryOpFloat32Broadcasts) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 5);
  const Bcast pats[] = {Bcast::None, Bcast::Scalar, Bcast::PerChannel, Bcast::Innermost, Bcast::Random};
  for (int o = 0; o < kNumBinary; ++o) {
    const BinaryOp op = static_cast<BinaryOp>(o);
    if (op == BinaryOp::BitwiseAnd || op == BinaryOp::BitwiseOr) continue;  // integral only, below
    for (int rep = 0; rep < 10; ++rep) {
      const Bcast ba = pats[rep % 5 == 1 ? 0 : std::uniform_int_distribution<int>(0, 4)(g)];
      const Bcast bb = pats[rep % 5];
      const Dist da = op == BinaryOp::Pow ? Dist::Positive : Dist::Normal;
      const Dist db = (op == BinaryOp::FloorDiv || op == BinaryOp::Remainder || op == BinaryOp::Div) ? Dist::NonZero : Dist::Normal;
      const double alpha = (op == BinaryOp::Add || op == BinaryOp::Sub) && rep % 3 == 0 ? -0.5 : 1.0;
      const Parallel& par = rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial;
      run_binary_case(g, op, alpha, DType::Float32, DType::Float32, DType::Float32, is_cmp(op) ? DType::Bool : DType::Float32,
                      random_shape(g), ba, bb, rep < 5, da, db, par, 2e-6, 1e-6);
    }
    // large: contiguous, per-channel bias on NCHW, scalar, innermost
    run_binary_case(g, op, 1.0, DType::Float32, DType::Float32, DType::Float32, is_cmp(op) ? DType::Bool : DType::Float32,
                    {2, 24, 33, 35}, Bcast::None, Bcast::PerChannel, true, Dist::Positive, Dist::NonZero, kTwo, 2e-6, 1e-6);
    run_binary_case(g, op, 1.0, DType::Float32, DType::Float32, DType::Float32, is_cmp(op) ? DType::Bool : DType::Float32,
                    {70001}, Bcast::None, Bcast::None, true, Dist::Positive, Dist::NonZero, kTwo, 2e-6, 1e-6);
    run_binary_case(g, op, 1.0, DType::Float32, DType::Float32, DType::Float32, is_cmp(op) ? DType::Bool : DType::Float32,
                    {129, 515}, Bcast::Scalar, Bcast::Innermost, true, Dist::Positive, Dist::NonZero, kTwo, 2e-6, 1e-6);
  }
}

TEST(Elementwise, BinarySpecialValues) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 6);
  for (int o = 0; o < kNumBinary; ++o) {
    const BinaryOp op = static_cast<BinaryOp>(o);
    if (op == BinaryOp::BitwiseAnd || op == BinaryOp::BitwiseOr) continue;
    for (DType t : {DType::Float32, DType::Float64})
      run_binary_case(g, op, 1.0, t, t, t, is_cmp(op) ? DType::Bool : t, {19, 23}, Bcast::None, Bcast::None, true,
                      Dist::Special, Dist::Special, kSerial, t == DType::Float64 ? 1e-13 : 2e-6, 1e-6);
  }
  // NaN propagation in maximum / minimum, both argument orders
  const float a[] = {NAN, 1.f, 3.f};
  const float b[] = {2.f, NAN, -1.f};
  float y[3];
  binary(BinaryOp::Maximum, 1, {3}, {a, DType::Float32, {1}}, {b, DType::Float32, {1}}, y, DType::Float32, DType::Float32, kSerial);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_EQ(y[2], 3.f);
  binary(BinaryOp::Minimum, 1, {3}, {a, DType::Float32, {1}}, {b, DType::Float32, {1}}, y, DType::Float32, DType::Float32, kSerial);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_EQ(y[2], -1.f);
}

TEST(Elementwise, BinaryIntegralAndMixedDtypes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 7);
  const Bcast pats[] = {Bcast::None, Bcast::Scalar, Bcast::PerChannel, Bcast::Innermost, Bcast::Random};
  for (int o = 0; o < kNumBinary; ++o) {
    const BinaryOp op = static_cast<BinaryOp>(o);
    for (DType compute : {DType::Int64, DType::Int32, DType::Int8, DType::UInt8, DType::Bool}) {
      if (compute == DType::Bool && (op == BinaryOp::Sub || op == BinaryOp::FloorDiv || op == BinaryOp::Remainder || op == BinaryOp::Pow))
        continue;
      for (int rep = 0; rep < 3; ++rep) {
        const DType ta = kAll[std::uniform_int_distribution<int>(2, 6)(g)];  // integral inputs
        const DType tb = rep == 2 ? compute : kAll[std::uniform_int_distribution<int>(2, 6)(g)];
        DType out = is_cmp(op) ? DType::Bool : compute;
        if (op == BinaryOp::Div || op == BinaryOp::Atan2) out = DType::Float32;
        const bool divides = op == BinaryOp::FloorDiv || op == BinaryOp::Remainder;
        const Dist db = op == BinaryOp::Pow ? Dist::SmallInt : divides ? Dist::NonZero : Dist::Normal;
        // inputs converted to an unsigned/narrow compute type can become 0: keep divisors positive there
        const Dist db2 = (divides && (compute == DType::UInt8 || compute == DType::Int8 || tb == DType::Bool)) ? Dist::Positive : db;
        if (divides && tb == DType::Bool) continue;  // bool divisors are 0 half the time
        const double alpha = (op == BinaryOp::Add || op == BinaryOp::Sub) && rep == 1 && compute != DType::Bool ? 3.0 : 1.0;
        run_binary_case(g, op, alpha, ta, tb, compute, out, random_shape(g, 4), pats[rep], pats[(rep + 2) % 5], rep == 0,
                        Dist::Normal, db2, rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial, 2e-6, 1e-6);
      }
    }
  }
  // mixed: int64 + float32 computed in float32, comparisons of int vs float into bool, float -> int64 compute
  for (int rep = 0; rep < 10; ++rep) {
    const auto shape = random_shape(g);
    run_binary_case(g, BinaryOp::Add, 1, DType::Int64, DType::Float32, DType::Float32, DType::Float32, shape, Bcast::None,
                    Bcast::Random, false, Dist::Normal, Dist::Normal, kTwo, 2e-6, 1e-6);
    run_binary_case(g, BinaryOp::Lt, 1, DType::Int32, DType::Float64, DType::Float64, DType::Bool, shape, Bcast::Random,
                    Bcast::Innermost, false, Dist::Normal, Dist::Normal, kTwo, 0, 0);
    run_binary_case(g, BinaryOp::Mul, 1, DType::Float32, DType::Int64, DType::Int64, DType::Int64, shape, Bcast::Scalar,
                    Bcast::None, false, Dist::Normal, Dist::Normal, kSerial, 0, 0);
    run_binary_case(g, BinaryOp::Eq, 1, DType::Bool, DType::UInt8, DType::UInt8, DType::Float32, shape, Bcast::PerChannel,
                    Bcast::None, true, Dist::Normal, Dist::SmallInt, kSerial, 0, 0);
    run_binary_case(g, BinaryOp::Div, 1, DType::Int64, DType::Int64, DType::Int64, DType::Float32, shape, Bcast::None,
                    Bcast::Scalar, true, Dist::Normal, Dist::NonZero, kTwo, 2e-6, 1e-6);
  }
}

TEST(Elementwise, IntegerOverflowWrapsAndPythonDivision) {
  const int8_t a[] = {100, -128, 7, -7, 7, -7};
  const int8_t b[] = {100, -1, 2, 2, -2, -2};
  int8_t y[6];
  StridedArg A{a, DType::Int8, {1}}, B{b, DType::Int8, {1}};
  binary(BinaryOp::Add, 1, {2}, A, B, y, DType::Int8, DType::Int8, kSerial);
  EXPECT_EQ(y[0], static_cast<int8_t>(200 - 256));
  EXPECT_EQ(y[1], 127);
  binary(BinaryOp::FloorDiv, 1, {6}, A, B, y, DType::Int8, DType::Int8, kSerial);
  EXPECT_EQ(y[2], 3);
  EXPECT_EQ(y[3], -4);
  EXPECT_EQ(y[4], -4);
  EXPECT_EQ(y[5], 3);
  EXPECT_EQ(y[1], -128);  // -128 // -1 wraps like torch instead of trapping
  binary(BinaryOp::Remainder, 1, {6}, A, B, y, DType::Int8, DType::Int8, kSerial);
  EXPECT_EQ(y[2], 1);
  EXPECT_EQ(y[3], 1);
  EXPECT_EQ(y[4], -1);
  EXPECT_EQ(y[5], -1);
}

TEST(Elementwise, IntegerDivisionByZeroThrows) {
  const int64_t a[] = {1, 2, 3, 4};
  const int64_t b[] = {1, 2, 0, 4};
  int64_t y[4];
  StridedArg A{a, DType::Int64, {1}}, B{b, DType::Int64, {1}};
  EXPECT_THROW(binary(BinaryOp::FloorDiv, 1, {4}, A, B, y, DType::Int64, DType::Int64, kSerial), Error);
  EXPECT_THROW(binary(BinaryOp::Remainder, 1, {4}, A, B, y, DType::Int64, DType::Int64, kTwo), Error);
  // true division promotes to floating, so dividing by zero is inf, not an error
  float f[4];
  binary(BinaryOp::Div, 1, {4}, A, B, f, DType::Float32, DType::Int64, kSerial);
  EXPECT_TRUE(std::isinf(f[2]));
  EXPECT_EQ(f[1], 1.0f);
}

TEST(Elementwise, WhereBroadcastAndDtypes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 g(seed + 8);
  const Bcast pats[] = {Bcast::None, Bcast::Scalar, Bcast::PerChannel, Bcast::Innermost, Bcast::Random};
  for (int rep = 0; rep < 40; ++rep) {
    const auto shape = random_shape(g);
    const DType out = kAll[rep % 7];
    const DType tc = rep % 3 ? DType::Bool : DType::Float32;
    const Operand c = make_operand(g, shape, tc, Dist::Normal, pats[rep % 5], rep % 2);
    const Operand a = make_operand(g, shape, rep % 4 ? out : DType::Int64, Dist::Normal, pats[(rep + 1) % 5], rep % 2);
    const Operand b = make_operand(g, shape, out, Dist::Special, pats[(rep + 3) % 5], rep % 2);
    const int64_t n = numel(shape);
    std::vector<char> got(static_cast<size_t>(n) * dtype_size(out)), ref(got.size());
    where(shape, c.arg(), a.arg(), b.arg(), got.data(), out, rep % 2 ? static_cast<const Parallel&>(kTwo) : kSerial);
    reference::where(shape, c.arg(), a.arg(), b.arg(), ref.data(), out);
    expect_match(got, ref, out, n, 0, 0, std::string("where out ") + dtype_name(out) + " " + shape_str(shape));
  }
}

TEST(Elementwise, InPlaceUnaryAndBinary) {
  std::vector<float> x = {-1.f, 2.f, -3.f, 4.f, 0.5f};
  unary(UnaryOp::Relu, {}, {5}, {x.data(), DType::Float32, {1}}, x.data(), DType::Float32, kSerial);
  EXPECT_EQ(x, (std::vector<float>{0.f, 2.f, 0.f, 4.f, 0.5f}));
  binary(BinaryOp::Mul, 1, {5}, {x.data(), DType::Float32, {1}}, {x.data(), DType::Float32, {1}}, x.data(), DType::Float32,
         DType::Float32, kSerial);
  EXPECT_EQ(x, (std::vector<float>{0.f, 4.f, 0.f, 16.f, 0.25f}));
}

TEST(Elementwise, ZeroSizedAndScalar) {
  float y = 0;
  const float x = -2.f;
  unary(UnaryOp::Abs, {}, {}, {&x, DType::Float32, {}}, &y, DType::Float32, kSerial);
  EXPECT_EQ(y, 2.f);
  unary(UnaryOp::Abs, {}, {3, 0, 2}, {&x, DType::Float32, {0, 0, 0}}, nullptr, DType::Float32, kSerial);
}

TEST(Elementwise, InvalidArgumentsThrow) {
  const float x[4] = {1, 2, 3, 4};
  float y[4];
  EXPECT_THROW(unary(UnaryOp::Relu, {}, {4}, {x, DType::Float32, {1, 1}}, y, DType::Float32, kSerial), Error);
  EXPECT_THROW(unary(UnaryOp::Relu, {}, {4}, {x, DType::Float16, {1}}, y, DType::Float32, kSerial), Error);
  EXPECT_THROW(binary(BinaryOp::Add, 1, {4}, {x, DType::Float32, {1}}, {x, DType::Float32, {1}}, y, DType::BFloat16,
                      DType::Float32, kSerial),
               Error);
  EXPECT_THROW(binary(BinaryOp::BitwiseAnd, 1, {4}, {x, DType::Float32, {1}}, {x, DType::Float32, {1}}, y, DType::Float32,
                      DType::Float32, kSerial),
               Error);
  const uint8_t bb[4] = {1, 0, 1, 0};
  EXPECT_THROW(binary(BinaryOp::Sub, 1, {4}, {bb, DType::Bool, {1}}, {bb, DType::Bool, {1}}, y, DType::Bool, DType::Bool,
                      kSerial),
               Error);
  try {
    unary(UnaryOp::Exp, {}, {4}, {x, DType::Float16, {1}}, y, DType::Float32, kSerial);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dnnfusion
