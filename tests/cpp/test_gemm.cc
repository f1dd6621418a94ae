// sgemm / sgemm_batched against the plain reference on every ISA the CPU has, serial and with two
// threads: tile-sized, tile-multiple, smaller, larger and odd shapes, transposed and broadcast
// operands, every epilogue, beta accumulation, K == 0, batched, and untouched memory around C.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <memory>

#include "common/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using kernels::Activation;
using kernels::GemmEpilogue;
using kernels::MatrixView;
using kernels::SerialParallel;
using testing::ThreadParallel;

struct Operand {
  std::vector<float> buf;
  MatrixView view;
};

// rows x cols matrix, row-major with padded leading dimension or stored transposed.
Operand make_operand(std::mt19937_64& rng, int64_t rows, int64_t cols, bool transposed) {
  Operand o;
  const int64_t pad = testing::rand_int(rng, 0, 3);
  if (!transposed) {
    const int64_t ld = cols + pad;
    o.buf = testing::random_vec(rng, static_cast<size_t>(std::max<int64_t>(1, rows * ld)));
    o.view = {o.buf.data(), ld, 1};
  } else {
    const int64_t ld = rows + pad;
    o.buf = testing::random_vec(rng, static_cast<size_t>(std::max<int64_t>(1, cols * ld)));
    o.view = {o.buf.data(), 1, ld};
  }
  return o;
}

GemmEpilogue random_epilogue(std::mt19937_64& rng, const std::vector<float>& row_bias,
                             const std::vector<float>& col_bias) {
  GemmEpilogue ep;
  switch (testing::rand_int(rng, 0, 2)) {
    case 1: ep.bias_mode = GemmEpilogue::Bias::PerRow; ep.bias = row_bias.data(); break;
    case 2: ep.bias_mode = GemmEpilogue::Bias::PerCol; ep.bias = col_bias.data(); break;
    default: break;
  }
  ep.alpha = testing::rand_int(rng, 0, 1) ? 1.f : -0.75f;
  ep.beta = testing::rand_int(rng, 0, 1) ? 0.f : 0.5f;
  ep.act = static_cast<Activation>(testing::rand_int(rng, 0, 2));
  return ep;
}

// Runs one sgemm and the reference on identical inputs; checks C and the padding around it.
void check_gemm(std::mt19937_64& rng, int64_t M, int64_t N, int64_t K, const kernels::Parallel& par,
                bool allow_broadcast = false) {
  SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
  Operand A = make_operand(rng, M, K, testing::rand_int(rng, 0, 1));
  Operand B = make_operand(rng, K, N, testing::rand_int(rng, 0, 1));
  if (allow_broadcast && testing::rand_int(rng, 0, 1)) A.view.rs = 0;  // every row of A the same
  if (allow_broadcast && testing::rand_int(rng, 0, 1)) B.view.cs = 0;  // every column of B the same
  const auto row_bias = testing::random_vec(rng, static_cast<size_t>(M) + 1);
  const auto col_bias = testing::random_vec(rng, static_cast<size_t>(N) + 1);
  GemmEpilogue ep = random_epilogue(rng, row_bias, col_bias);
  SCOPED_TRACE(::testing::Message() << "bias=" << int(ep.bias_mode) << " alpha=" << ep.alpha
                                    << " beta=" << ep.beta << " act=" << int(ep.act)
                                    << " A(rs,cs)=" << A.view.rs << "," << A.view.cs
                                    << " B(rs,cs)=" << B.view.rs << "," << B.view.cs);
  const int64_t ldc = N + testing::rand_int(rng, 0, 5);
  const float sentinel = 12345.f;
  std::vector<float> C(static_cast<size_t>(M * ldc + 7), sentinel);
  if (ep.beta != 0.f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = std::sin(float(i * 7 + j));
  } else {
    // beta == 0: C must not be read, so NaN garbage there must not leak into the result.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<float> R = C;
  reference::ref_sgemm(M, N, K, A.view, B.view, R.data(), ldc, ep);
  kernels::sgemm(M, N, K, A.view, B.view, C.data(), ldc, ep, par);
  EXPECT_TRUE(testing::all_close(C.data(), R.data(), C.size()));
}

TEST(Gemm, ShapesAroundTheTile) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed());
  SerialParallel serial;
  ThreadParallel threads(2);
  const int64_t shapes[][3] = {
      {1, 1, 1},     {1, 7, 3},      {4, 8, 5},     {6, 16, 9},     {12, 32, 16},  {12, 32, 384},
      {24, 64, 385}, {13, 33, 17},   {5, 15, 2},    {11, 31, 100},  {7, 17, 1},    {100, 3, 50},
      {3, 100, 50},  {36, 96, 768},  {1, 1000, 64}, {500, 1, 64},   {48, 130, 257}, {97, 61, 33},
  };
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (const auto& s : shapes) {
      check_gemm(rng, s[0], s[1], s[2], serial);
      check_gemm(rng, s[0], s[1], s[2], threads);
    }
  }
}

TEST(Gemm, RandomShapesAndBroadcastStrides) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 1);
  SerialParallel serial;
  ThreadParallel threads(2);
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int t = 0; t < 40; ++t) {
      const int64_t M = testing::rand_int(rng, 1, 70), N = testing::rand_int(rng, 1, 90),
                    K = testing::rand_int(rng, 1, 120);
      check_gemm(rng, M, N, K, t % 2 ? serial : static_cast<const kernels::Parallel&>(threads),
                 /*allow_broadcast=*/true);
    }
  }
}

TEST(Gemm, LargerThanEveryCacheBlock) {
  // M > MC (1536), N > NC, K > KC for every ISA: exercises multi-block accumulation.
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 2);
  ThreadParallel threads(2);
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    check_gemm(rng, 1543, 40, 390, threads);
    check_gemm(rng, 50, 1100, 800, threads);
    check_gemm(rng, 1100, 45, 30, threads);  // M-split across threads
  }
}

TEST(Gemm, KZeroIsEpilogueOnly) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 3);
  SerialParallel serial;
  for (int trial = 0; trial < 12; ++trial) check_gemm(rng, 1 + trial, 3 + 2 * trial, 0, serial);
  // Explicit: beta*C + bias then relu.
  std::vector<float> C = {1.f, -2.f, 3.f, -4.f};
  const float bias[2] = {0.5f, 10.f};
  GemmEpilogue ep;
  ep.beta = 2.f;
  ep.bias = bias;
  ep.bias_mode = GemmEpilogue::Bias::PerCol;
  ep.act = Activation::Relu;
  kernels::sgemm(2, 2, 0, {nullptr, 0, 0}, {nullptr, 0, 0}, C.data(), 2, ep, serial);
  EXPECT_EQ(C, (std::vector<float>{2.5f, 6.f, 6.5f, 2.f}));
}

TEST(Gemm, SpecialValuesPropagate) {
  SerialParallel serial;
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (Activation act : {Activation::None, Activation::Relu, Activation::Relu6}) {
      const int64_t M = 13, N = 40, K = 5;
      std::vector<float> A(M * K, 1.f), B(K * N, 1.f), C(M * N, 0.f);
      A[3 * K + 2] = std::numeric_limits<float>::quiet_NaN();          // row 3 all NaN
      B[1 * N + 7] = std::numeric_limits<float>::infinity();           // column 7 +inf
      B[2 * N + 9] = -std::numeric_limits<float>::infinity();          // column 9 -inf
      GemmEpilogue ep;
      ep.act = act;
      kernels::sgemm(M, N, K, {A.data(), K, 1}, {B.data(), N, 1}, C.data(), N, ep, serial);
      for (int64_t j = 0; j < N; ++j) EXPECT_TRUE(std::isnan(C[3 * N + j])) << "j=" << j;
      const float pos = act == Activation::Relu6 ? 6.f : std::numeric_limits<float>::infinity();
      const float neg = act == Activation::None ? -std::numeric_limits<float>::infinity() : 0.f;
      EXPECT_EQ(C[0 * N + 7], pos);
      EXPECT_EQ(C[12 * N + 9], neg);
      EXPECT_EQ(C[5 * N + 0], act == Activation::Relu6 ? 5.f : 5.f);
    }
  }
}

TEST(Gemm, Batched) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 4);
  SerialParallel serial;
  ThreadParallel threads(2);
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int t = 0; t < 12; ++t) {
      const int64_t batch = testing::rand_int(rng, 1, 5), M = testing::rand_int(rng, 1, 40),
                    N = testing::rand_int(rng, 1, 70), K = testing::rand_int(rng, 0, 60);
      SCOPED_TRACE(::testing::Message() << "batch=" << batch << " M=" << M << " N=" << N << " K=" << K);
      const bool shared_a = t % 3 == 0;  // strideA == 0: one weight matrix for every entry
      const int64_t sa = shared_a ? 0 : M * K + 3, sb = K * N + 1, ldc = N + 2, sc = M * ldc + 5;
      auto A = testing::random_vec(rng, static_cast<size_t>(std::max<int64_t>(1, batch * (M * K + 3))));
      auto B = testing::random_vec(rng, static_cast<size_t>(batch * sb + 1));
      const auto row_bias = testing::random_vec(rng, static_cast<size_t>(M));
      const auto col_bias = testing::random_vec(rng, static_cast<size_t>(N));
      GemmEpilogue ep = random_epilogue(rng, row_bias, col_bias);
      auto C = testing::random_vec(rng, static_cast<size_t>(batch * sc));
      std::vector<float> R = C;
      const bool bt = t % 2 == 1;  // B transposed within each entry
      MatrixView Av{A.data(), K, 1}, Bv{B.data(), bt ? 1 : N, bt ? K : 1};
      for (int64_t b = 0; b < batch; ++b)
        reference::ref_sgemm(M, N, K, {A.data() + b * sa, Av.rs, Av.cs},
                             {B.data() + b * sb, Bv.rs, Bv.cs}, R.data() + b * sc, ldc, ep);
      kernels::sgemm_batched(batch, M, N, K, Av, sa, Bv, sb, C.data(), ldc, sc, ep,
                             t % 2 ? serial : static_cast<const kernels::Parallel&>(threads));
      EXPECT_TRUE(testing::all_close(C.data(), R.data(), C.size()));
    }
  }
}

// 64-byte aligned float buffer, as graph constants are.
struct AlignedFloats {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  explicit AlignedFloats(int64_t n)
      : p(static_cast<float*>(std::aligned_alloc(64, (static_cast<size_t>(std::max<int64_t>(n, 1)) * 4 + 63) / 64 * 64)),
          &std::free) {}
  float* get() const { return p.get(); }
};

TEST(Gemm, PackedWeightsMatchReference) {
  // B packed once (sgemm_pack_b) and read in place by sgemm_packed_b: tile edges, several K and
  // N cache blocks, M split across threads, strided A, every epilogue except beta (C not read).
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 5);
  SerialParallel serial;
  ThreadParallel threads(2);
  const int64_t shapes[][3] = {{1, 1, 1},   {12, 32, 16},  {13, 33, 17}, {1, 1000, 64}, {128, 100, 770},
                               {7, 961, 5}, {500, 3, 40},  {1543, 40, 20}, {40, 1100, 800}};
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    const int nr = kernels::sgemm_panel_width();
    for (int t = 0; t < 24; ++t) {
      int64_t M, N, K;
      if (t < static_cast<int>(std::size(shapes))) {
        M = shapes[t][0], N = shapes[t][1], K = shapes[t][2];
      } else {
        M = testing::rand_int(rng, 1, 60), N = testing::rand_int(rng, 1, 90), K = testing::rand_int(rng, 0, 100);
      }
      SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
      Operand A = make_operand(rng, M, K, testing::rand_int(rng, 0, 1));
      Operand B = make_operand(rng, K, N, testing::rand_int(rng, 0, 1));
      AlignedFloats packed(kernels::sgemm_packed_b_floats(K, N, nr));
      kernels::sgemm_pack_b(K, N, B.view, nr, packed.get());
      const auto row_bias = testing::random_vec(rng, static_cast<size_t>(M));
      const auto col_bias = testing::random_vec(rng, static_cast<size_t>(N));
      GemmEpilogue ep = random_epilogue(rng, row_bias, col_bias);
      ep.beta = 0.f;
      std::vector<float> C(static_cast<size_t>(M * N), std::numeric_limits<float>::quiet_NaN()), R = C;
      reference::ref_sgemm(M, N, K, A.view, B.view, R.data(), N, ep);
      // Serial, and two threads (one shared packed A, columns handed out in chunks).
      for (const kernels::Parallel* par : {static_cast<const kernels::Parallel*>(&serial),
                                           static_cast<const kernels::Parallel*>(&threads)}) {
        std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
        kernels::sgemm_packed_b(M, N, K, A.view, packed.get(), nr, C.data(), N, ep, *par);
        EXPECT_TRUE(testing::all_close(C.data(), R.data(), C.size())) << par->num_threads() << " threads";
      }
    }
  }
}

TEST(Gemm, PackedWeightsRejectAnotherPanelWidthOrMisalignment) {
  SerialParallel serial;
  const int nr = kernels::sgemm_panel_width();
  AlignedFloats packed(kernels::sgemm_packed_b_floats(4, 40, 32) + 16);
  std::vector<float> a(16, 1.f), b(160, 1.f), c(160);
  EXPECT_THROW(kernels::sgemm_pack_b(4, 40, {b.data(), 40, 1}, 12, packed.get()), Error);
  kernels::sgemm_pack_b(4, 40, {b.data(), 40, 1}, nr, packed.get());
  const int other = nr == 32 ? 16 : 32;
  try {
    kernels::sgemm_packed_b(4, 40, 4, {a.data(), 4, 1}, packed.get(), other, c.data(), 40, {}, serial);
    ADD_FAILURE() << "a B packed for another panel width was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("panel width"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::sgemm_packed_b(4, 40, 4, {a.data(), 4, 1}, packed.get() + 1, nr, c.data(), 40, {}, serial),
               Error);
  kernels::sgemm_packed_b(4, 40, 4, {a.data(), 4, 1}, packed.get(), nr, c.data(), 40, {}, serial);
  for (float v : c) EXPECT_EQ(v, 4.f);
}

TEST(Gemm, InvalidArgumentsThrow) {
  SerialParallel serial;
  float x = 0.f;
  GemmEpilogue ep;
  EXPECT_THROW(kernels::sgemm(-1, 1, 1, {&x, 1, 1}, {&x, 1, 1}, &x, 1, ep, serial), Error);
  ep.bias_mode = GemmEpilogue::Bias::PerRow;
  EXPECT_THROW(kernels::sgemm(1, 1, 1, {&x, 1, 1}, {&x, 1, 1}, &x, 1, ep, serial), Error);
  ep.bias_mode = GemmEpilogue::Bias::None;
  EXPECT_THROW(kernels::sgemm(2, 4, 1, {&x, 1, 1}, {&x, 1, 1}, &x, 3, ep, serial), Error);
}

TEST(CpuFeatures, ForceAndReset) {
  using kernels::Isa;
  const Isa before = kernels::active_isa();
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (kernels::isa_supported(isa)) {
      kernels::force_isa(isa);
      EXPECT_EQ(kernels::active_isa(), isa);
    } else {
      EXPECT_THROW(kernels::force_isa(isa), Error) << kernels::isa_name(isa);
    }
  }
  kernels::reset_isa();
  EXPECT_EQ(kernels::active_isa(), before);
  EXPECT_TRUE(kernels::isa_supported(kernels::best_isa()));
  EXPECT_STREQ(kernels::isa_name(Isa::Avx512), "avx512");
  EXPECT_STREQ(kernels::isa_name(Isa::Avx2), "avx2");
  EXPECT_STREQ(kernels::isa_name(Isa::Scalar), "scalar");
}

TEST(BenchmarkInfo, GemmGflops) {
  // Prints throughput only; asserts correctness of sampled entries (timings are never asserted).
  std::mt19937_64 rng(testing::test_seed() + 5);
  ThreadParallel threads(2);
  SerialParallel serial;
  for (int64_t n : {512, 1024}) {
    auto A = testing::random_vec(rng, n * n), B = testing::random_vec(rng, n * n);
    std::vector<float> C(n * n);
    for (const kernels::Parallel* par : {static_cast<const kernels::Parallel*>(&serial),
                                         static_cast<const kernels::Parallel*>(&threads)}) {
      kernels::sgemm(n, n, n, {A.data(), n, 1}, {B.data(), n, 1}, C.data(), n, {}, *par);
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        kernels::sgemm(n, n, n, {A.data(), n, 1}, {B.data(), n, 1}, C.data(), n, {}, *par);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("[ bench ] sgemm %lld^3 %s threads=%d: %.1f GFLOP/s\n", (long long)n,
                  kernels::isa_name(kernels::active_isa()), par->num_threads(),
                  2.0 * n * n * n / best * 1e-9);
      for (int s = 0; s < 50; ++s) {
        const int64_t i = testing::rand_int(rng, 0, n - 1), j = testing::rand_int(rng, 0, n - 1);
        double ref = 0;
        for (int64_t k = 0; k < n; ++k) ref += double(A[i * n + k]) * B[k * n + j];
        EXPECT_NEAR(C[i * n + j], ref, 1e-3) << "i=" << i << " j=" << j;
      }
    }
  }
}

}  // namespace
}  // namespace dnnfusion
