// bf16x6 GEMM (gemm_bf16x6.h): the three-term split is exact; the scalar reference of the six
// products is fp32-accurate; the AMX kernel (where the CPU has AMX) matches the exact product as
// closely as the fp32 GEMM does, on tile edges, both thread splits, every epilogue and hook, and
// follows fp32 for inf and NaN. Tests that need AMX say so and skip on CPUs without it.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <memory>

#include "common/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using kernels::GemmEpilogue;
using kernels::MatrixView;

bool low_half_zero(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u & 0xffffu) == 0;
}

struct Packed {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  Packed(int64_t K, int64_t N, MatrixView B)
      : p(static_cast<float*>(std::aligned_alloc(64, (kernels::bf16x6_packed_b_floats(K, N) * 4 + 63) / 64 * 64)),
          &std::free) {
    kernels::bf16x6_pack_b(K, N, B, p.get());
  }
};

// Exact (double) product and the sum of |a||b| per element: the scale of its rounding errors.
void exact_gemm(int64_t M, int64_t N, int64_t K, const std::vector<float>& A, const std::vector<float>& B,
                std::vector<double>* out, std::vector<double>* scale) {
  out->assign(static_cast<size_t>(M * N), 0.0);
  scale->assign(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double a = A[i * K + k], b = B[k * N + j];
        (*out)[i * N + j] += a * b;
        (*scale)[i * N + j] += std::fabs(a * b);
      }
}

// A plain fp32 GEMM: float sums in k order, the error class every fp32 engine is in.
std::vector<float> fp32_gemm(int64_t M, int64_t N, int64_t K, const std::vector<float>& A, const std::vector<float>& B) {
  std::vector<float> C(static_cast<size_t>(M * N), 0.f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) C[i * N + j] += A[i * K + k] * B[k * N + j];
  return C;
}

// Largest |got - exact| / scale over the matrix.
double worst_relative_error(const std::vector<float>& got, const std::vector<double>& exact,
                            const std::vector<double>& scale) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (scale[i] > 0) worst = std::max(worst, std::fabs(got[i] - exact[i]) / scale[i]);
  return worst;
}

TEST(Bf16x6, SplitIsExactWithThreeBf16Terms) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 61);
  std::vector<float> xs = {0.f, -0.f, 1.f, 1.f + FLT_EPSILON, -3.1415927f, FLT_MAX, -FLT_MAX, FLT_MIN,
                           1e-30f, 65504.f, 0.1f};
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  std::uniform_int_distribution<int> ex(-100, 100);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::ldexp(mant(rng), ex(rng)) * (i % 2 ? -1.f : 1.f));
  for (float x : xs) {
    float t[3];
    kernels::bf16x6_split(x, t);
    EXPECT_EQ(static_cast<double>(t[0]) + t[1] + t[2], static_cast<double>(x)) << x;
    for (float v : t) EXPECT_TRUE(low_half_zero(v)) << x << " term " << v;
  }
  float t[3];
  kernels::bf16x6_split(std::numeric_limits<float>::infinity(), t);
  EXPECT_EQ(t[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(t[1], 0.f);
  kernels::bf16x6_split(std::numeric_limits<float>::quiet_NaN(), t);
  EXPECT_TRUE(std::isnan(t[0]));
}

// a = b = 1 + 2^-9 + 2^-17 puts a bit in each of the three terms: leaving out any of the six
// products moves the result by >= 2^-18, far above fp32's 2^-23 rounding.
std::vector<float> three_term_values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = (1.f + std::ldexp(1.f, -9) + std::ldexp(1.f, -17)) * (i % 3 == 0 ? -1.f : 1.f) * static_cast<float>(1 + i % 5);
  return v;
}

TEST(Bf16x6, ReferenceKeepsFp32Accuracy) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 62);
  for (int structured = 0; structured < 2; ++structured) {
    const int64_t M = 9, N = 13, K = 77;
    const auto A = structured ? three_term_values(M * K) : testing::random_vec(rng, M * K);
    const auto B = structured ? three_term_values(K * N) : testing::random_vec(rng, K * N);
    std::vector<float> C(M * N);
    kernels::sgemm_bf16x6_reference(M, N, K, {A.data(), K, 1}, {B.data(), N, 1}, C.data(), N);
    std::vector<double> exact, scale;
    exact_gemm(M, N, K, A, B, &exact, &scale);
    // Summed exactly, only the dropped products (< 2^-23 of the scale together) and the final
    // rounding remain; leaving out any of the six would cost >= 2^-18 on the structured values.
    EXPECT_LE(worst_relative_error(C, exact, scale), std::ldexp(1.0, -22)) << "structured=" << structured;
  }
}

class Bf16x6Amx : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::bf16x6_available()) GTEST_SKIP() << "this CPU or OS offers no AMX-BF16";
  }
};

TEST_F(Bf16x6Amx, MatchesTheExactProductLikeFp32) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 63);
  kernels::SerialParallel serial;
  testing::ThreadParallel two(2);
  const int64_t shapes[][3] = {{1, 1, 1}, {32, 32, 32}, {33, 31, 33}, {16, 64, 96}, {17, 100, 770},
                               {128, 96, 64}, {300, 70, 45}, {7, 961, 5}, {64, 33, 3000}};
  for (size_t t = 0; t < std::size(shapes) + 6; ++t) {
    int64_t M, N, K;
    if (t < std::size(shapes)) {
      M = shapes[t][0], N = shapes[t][1], K = shapes[t][2];
    } else {
      M = testing::rand_int(rng, 1, 90), N = testing::rand_int(rng, 1, 90), K = testing::rand_int(rng, 0, 100);
    }
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
    const bool structured = t % 3 == 1;
    // A with a padded row stride: the kernel reads rows rs apart.
    const int64_t lda = K + 3;
    std::vector<float> Apad = structured ? three_term_values(M * lda) : testing::random_vec(rng, M * lda);
    std::vector<float> A(M * K);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) A[i * K + k] = Apad[i * lda + k];
    const auto B = structured ? three_term_values(K * N) : testing::random_vec(rng, K * N);
    Packed packed(K, N, {B.data(), N, 1});
    const auto row_bias = testing::random_vec(rng, M), col_bias = testing::random_vec(rng, N);
    std::vector<double> exact, scale;
    exact_gemm(M, N, K, A, B, &exact, &scale);
    const auto F = fp32_gemm(M, N, K, A, B);
    const double fp32 = worst_relative_error(F, exact, scale);
    for (const kernels::Parallel* par : {static_cast<const kernels::Parallel*>(&serial),
                                         static_cast<const kernels::Parallel*>(&two)}) {
      std::vector<float> C(M * N, std::numeric_limits<float>::quiet_NaN());
      kernels::sgemm_bf16x6_packed_b(M, N, K, {Apad.data(), lda, 1}, packed.p.get(), C.data(), N, {}, *par);
      EXPECT_LE(worst_relative_error(C, exact, scale), 4 * fp32 + 1e-7) << par->num_threads() << " threads";
      // Every epilogue: the same products, then alpha, beta * C_old, bias, activation.
      for (int e = 0; e < 3; ++e) {
        GemmEpilogue ep;
        ep.alpha = e == 1 ? -0.75f : 1.f;
        ep.beta = e == 2 ? 0.5f : 0.f;
        ep.bias_mode = e == 0 ? GemmEpilogue::Bias::PerCol : GemmEpilogue::Bias::PerRow;
        ep.bias = e == 0 ? col_bias.data() : row_bias.data();
        ep.act = static_cast<kernels::Activation>(e);
        std::vector<float> old = testing::random_vec(rng, M * N), R = old, G = old;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            float v = ep.alpha * C[i * N + j];
            if (ep.beta != 0.f) v += ep.beta * old[i * N + j];
            v += e == 0 ? col_bias[j] : row_bias[i];
            R[i * N + j] = ep.act == kernels::Activation::None ? v : std::max(v, 0.f);
            if (ep.act == kernels::Activation::Relu6) R[i * N + j] = std::min(R[i * N + j], 6.f);
          }
        kernels::sgemm_bf16x6_packed_b(M, N, K, {Apad.data(), lda, 1}, packed.p.get(), G.data(), N, ep, *par);
        EXPECT_TRUE(testing::all_close(G.data(), R.data(), G.size(), 1e-6f, 1e-7f)) << "epilogue " << e;
      }
    }
  }
}

void count_calls(const void* ctx, float* data, int64_t start, int64_t count) {
  auto* seen = static_cast<std::vector<int>*>(const_cast<void*>(ctx));
  for (int64_t i = 0; i < count; ++i) {
    (*seen)[start + i] += 1;
    data[i] += 1.f;
  }
}

TEST_F(Bf16x6Amx, HookSeesEveryElementOnceAfterItsFinalValue) {
  std::mt19937_64 rng(testing::test_seed() + 64);
  const int64_t M = 45, N = 70, K = 40;
  const auto A = testing::random_vec(rng, M * K), B = testing::random_vec(rng, K * N);
  Packed packed(K, N, {B.data(), N, 1});
  std::vector<int> seen(M * N, 0);
  kernels::ElementHook hook;
  hook.fn = count_calls;
  hook.ctx = &seen;
  std::vector<float> C(M * N);
  kernels::sgemm_bf16x6_packed_b(M, N, K, {A.data(), K, 1}, packed.p.get(), C.data(), N, {}, testing::kTwo, &hook);
  for (int s : seen) ASSERT_EQ(s, 1);
  std::vector<double> exact, scale;
  exact_gemm(M, N, K, A, B, &exact, &scale);
  for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], exact[i] + 1.0, 1e-5 * scale[i] + 1e-6) << i;
}

TEST_F(Bf16x6Amx, ReadsATransposedA) {
  // A given as a column-major view (a transposed activation): the rows are gathered first.
  std::mt19937_64 rng(testing::test_seed() + 66);
  const int64_t M = 70, N = 40, K = 900;
  const auto At = testing::random_vec(rng, K * M), B = testing::random_vec(rng, K * N);
  std::vector<float> A(M * K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) A[i * K + k] = At[k * M + i];
  Packed packed(K, N, {B.data(), N, 1});
  std::vector<float> C(M * N), R(M * N);
  kernels::sgemm_bf16x6_packed_b(M, N, K, {At.data(), 1, M}, packed.p.get(), C.data(), N, {}, testing::kTwo);
  kernels::sgemm_bf16x6_packed_b(M, N, K, {A.data(), K, 1}, packed.p.get(), R.data(), N, {}, testing::kTwo);
  EXPECT_EQ(C, R);
}

TEST_F(Bf16x6Amx, InfAndNanFollowFp32) {
  // inf * x must stay inf (the six products would give inf * 0 = NaN): rows of A with inf or
  // NaN, and all rows when B holds one, are computed in plain fp32.
  std::mt19937_64 rng(testing::test_seed() + 65);
  const int64_t M = 40, N = 36, K = 50;
  const float inf = std::numeric_limits<float>::infinity();
  for (int where = 0; where < 2; ++where) {
    auto A = testing::random_vec(rng, M * K, 0.5f, 1.f), B = testing::random_vec(rng, K * N, 0.5f, 1.f);
    if (where == 0) {
      A[3 * K + 7] = inf;
      A[35 * K + 1] = std::numeric_limits<float>::quiet_NaN();
    } else {
      B[5 * N + 2] = -inf;
    }
    Packed packed(K, N, {B.data(), N, 1});
    std::vector<float> C(M * N), F(M * N);
    kernels::sgemm_bf16x6_packed_b(M, N, K, {A.data(), K, 1}, packed.p.get(), C.data(), N, {}, testing::kTwo);
    reference::ref_sgemm(M, N, K, {A.data(), K, 1}, {B.data(), N, 1}, F.data(), N, {});
    EXPECT_TRUE(testing::all_close(C.data(), F.data(), C.size(), 1e-5f, 1e-6f)) << "where=" << where;
  }
}

TEST(Bf16x6, RefusesWithoutAmx) {
  // Forcing a lower ISA takes the AMX path away as well: the call names what is missing.
  testing::IsaGuard guard(kernels::Isa::Scalar);
  EXPECT_FALSE(kernels::bf16x6_available());
  std::vector<float> b(8, 1.f), a(4, 1.f), c(8);
  Packed packed(4, 2, {b.data(), 2, 1});
  try {
    kernels::sgemm_bf16x6_packed_b(1, 2, 4, {a.data(), 4, 1}, packed.p.get(), c.data(), 2, {}, testing::kTwo);
    ADD_FAILURE() << "ran without AMX";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AMX"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dnnfusion
