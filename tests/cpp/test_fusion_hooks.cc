// Fusion hooks inside the library kernels (kernels/cpu/fusion_hooks.h). For every kernel and
// strategy, an epilogue that is neither idempotent nor position-independent must see each output
// element exactly once, at the address and linear index the kernel's header promises, holding its
// final value: the hooked kernel must equal the hookless kernel followed by the same function.
// A prologue generating x = g(index) must give what the kernel gives on the materialised x, and
// must be asked for each input element exactly once. Serial and two threads; the GEMM-based
// kernels on every ISA the CPU has; the ops_nn bindings through OpKernel::run. Replay with
// DNNFUSION_TEST_SEED.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "target/target.h"
#include "ecg/graph.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/normalization.h"
#include "kernels/cpu/pooling.h"
#include "kernels/cpu/softmax.h"
#include "runtime/op_kernels.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using kernels::Activation;
using kernels::ElementHook;
using kernels::GemmEpilogue;
using kernels::Parallel;
using testing::kSerial;
using testing::kTwo;

void announce_seed() {
  static std::once_flag once;
  std::call_once(once, [] { std::printf("[ seed ] fusion hooks: %s\n", testing::seed_note().c_str()); });
}

// Applied twice, or at the wrong index, it gives a different value. k is taken mod 4096 so the
// values stay O(1) and the comparison tolerance stays tight.
float epi_fn(float v, int64_t k) {
  return static_cast<float>(1.5 * static_cast<double>(v) + 1e-3 * static_cast<double>(k % 4096));
}

// The input a prologue generates for linear index k.
float pro_fn(int64_t k) {
  return static_cast<float>(3.0 * std::sin(0.37 * static_cast<double>(k)) +
                            0.5 * std::cos(0.011 * static_cast<double>(k)));
}

std::vector<float> generated_input(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) x[k] = pro_fn(k);
  return x;
}

// The hook under test: counts how often each linear index is passed, flags calls whose range is
// out of bounds or whose data pointer is not where index `start` lives, and applies epi_fn (or,
// as a prologue, writes pro_fn). Callable from any thread.
class Probe {
 public:
  using AddrFn = std::function<const float*(int64_t)>;
  // addr: where output element k lives (epilogue address check); empty for prologues, whose
  // buffer is the kernel's own.
  Probe(int64_t total, bool prologue, AddrFn addr = nullptr)
      : total_(total), prologue_(prologue), addr_(std::move(addr)),
        hits_(new std::atomic<int>[static_cast<size_t>(std::max<int64_t>(total, 1))]()) {}

  ElementHook hook() const { return ElementHook{&Probe::call, this}; }

  ::testing::AssertionResult exactly_once() const {
    if (bad_range_ || bad_addr_)
      return ::testing::AssertionFailure() << bad_range_.load() << " calls out of range, "
                                           << bad_addr_.load() << " calls at the wrong address (of "
                                           << calls_.load() << ")";
    for (int64_t k = 0; k < total_; ++k) {
      if (hits_[k] != 1)
        return ::testing::AssertionFailure() << "element " << k << " of " << total_ << " passed "
                                             << hits_[k].load() << " times (" << calls_.load()
                                             << " calls)";
    }
    return ::testing::AssertionSuccess();
  }

 private:
  static void call(const void* ctx, float* data, int64_t start, int64_t count) {
    const Probe* p = static_cast<const Probe*>(ctx);
    ++p->calls_;
    if (start < 0 || count < 0 || start + count > p->total_) {
      ++p->bad_range_;
      return;
    }
    if (p->addr_ && count > 0 &&
        (data != p->addr_(start) || data + (count - 1) != p->addr_(start + count - 1)))
      ++p->bad_addr_;
    for (int64_t t = 0; t < count; ++t) {
      const int64_t k = start + t;
      ++p->hits_[k];
      data[t] = p->prologue_ ? pro_fn(k) : epi_fn(data[t], k);
    }
  }

  int64_t total_;
  bool prologue_;
  AddrFn addr_;
  std::unique_ptr<std::atomic<int>[]> hits_;
  mutable std::atomic<int64_t> calls_{0}, bad_range_{0}, bad_addr_{0};
};

// Dense output: element k at base + k.
Probe::AddrFn dense(const float* base) {
  return [base](int64_t k) { return base + k; };
}

void apply_epi_dense(std::vector<float>& r) {
  for (size_t k = 0; k < r.size(); ++k) r[k] = epi_fn(r[k], static_cast<int64_t>(k));
}

// Hooked and reference results come from the same arithmetic, so only rounding noise is allowed.
::testing::AssertionResult same(const std::vector<float>& got, const std::vector<float>& ref) {
  return testing::all_close(got.data(), ref.data(), got.size(), 1e-6f, 1e-6f);
}

const Parallel& pick(int i) { return i % 2 ? static_cast<const Parallel&>(kTwo) : kSerial; }

// ---------------------------------------------------------------- GEMM ----

GemmEpilogue random_gemm_epilogue(std::mt19937_64& rng, const std::vector<float>& row_bias,
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

// batch == 0 means plain sgemm (one entry); else sgemm_batched with padded ldc and strideC, where
// the hook's start is still (b*M + i)*N + j.
void check_gemm(std::mt19937_64& rng, int64_t batch, int64_t M, int64_t N, int64_t K,
                const Parallel& par) {
  const bool plain = batch == 0;
  const int64_t nb = plain ? 1 : batch;
  const bool at = testing::rand_int(rng, 0, 1), bt = testing::rand_int(rng, 0, 1);
  const int64_t ldc = N + testing::rand_int(rng, 0, 3);
  const int64_t sc = M * ldc + testing::rand_int(rng, 0, 3);
  const int64_t sa = M * K + 1, sb = K * N + 2;
  SCOPED_TRACE(::testing::Message() << "batch=" << batch << " M=" << M << " N=" << N << " K=" << K
                                    << " ldc=" << ldc << " A^T=" << at << " B^T=" << bt
                                    << " threads=" << par.num_threads());
  const auto A = testing::random_vec(rng, static_cast<size_t>(nb * sa));
  const auto B = testing::random_vec(rng, static_cast<size_t>(nb * sb));
  const kernels::MatrixView Av{A.data(), at ? 1 : K, at ? M : 1};
  const kernels::MatrixView Bv{B.data(), bt ? 1 : N, bt ? K : 1};
  const auto row_bias = testing::random_vec(rng, static_cast<size_t>(M));
  const auto col_bias = testing::random_vec(rng, static_cast<size_t>(N));
  const GemmEpilogue ep = random_gemm_epilogue(rng, row_bias, col_bias);
  SCOPED_TRACE(::testing::Message() << "bias=" << int(ep.bias_mode) << " alpha=" << ep.alpha
                                    << " beta=" << ep.beta << " act=" << int(ep.act));
  std::vector<float> C = testing::random_vec(rng, static_cast<size_t>(nb * sc + 3));
  std::vector<float> R = C;

  auto gemm = [&](std::vector<float>& out, const ElementHook* hook) {
    if (plain) {
      kernels::sgemm(M, N, K, Av, Bv, out.data(), ldc, ep, par, hook);
    } else {
      kernels::sgemm_batched(batch, M, N, K, Av, sa, Bv, sb, out.data(), ldc, sc, ep, par, hook);
    }
  };
  gemm(R, nullptr);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float& v = R[b * sc + i * ldc + j];
        v = epi_fn(v, (b * M + i) * N + j);
      }

  const float* base = C.data();
  Probe probe(nb * M * N, false, [=](int64_t k) {
    const int64_t b = k / (M * N), i = (k / N) % M, j = k % N;
    return base + b * sc + i * ldc + j;
  });
  const ElementHook hook = probe.hook();
  gemm(C, &hook);
  EXPECT_TRUE(probe.exactly_once());
  // Also covers the padding between rows and entries: it must stay untouched.
  EXPECT_TRUE(same(C, R));
}

TEST(FusionHookGemm, ShapesAroundTheTileOnEveryIsa) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 100);
  // Smaller than, equal to and larger than each ISA's tile (scalar 4x8, AVX2 6x16, AVX-512
  // 12x32); K over one cache block (several K passes: only the last may run the hook); N over NC
  // and M over MC (several column / row blocks); K == 0 (epilogue-only path).
  const int64_t shapes[][3] = {
      {1, 1, 1},    {3, 5, 2},     {4, 8, 5},     {6, 16, 9},     {12, 32, 16},  {13, 33, 17},
      {24, 64, 385}, {37, 70, 800}, {100, 3, 50}, {3, 100, 50},   {1, 1000, 64}, {1600, 9, 20},
      {5, 7, 0},    {48, 130, 257},
  };
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (const auto& s : shapes)
      for (int t = 0; t < 2; ++t) check_gemm(rng, 0, s[0], s[1], s[2], pick(t));
  }
}

TEST(FusionHookGemm, BatchedWithPaddedStrides) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 101);
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int t = 0; t < 16; ++t) {
      const int64_t batch = testing::rand_int(rng, 1, 9), M = testing::rand_int(rng, 1, 40),
                    N = testing::rand_int(rng, 1, 70), K = testing::rand_int(rng, 0, 120);
      check_gemm(rng, batch, M, N, K, pick(t));
    }
    // Large enough per entry that two threads split each entry's columns or rows.
    check_gemm(rng, 3, 64, 200, 96, kTwo);
    check_gemm(rng, 2, 300, 20, 96, kTwo);
  }
}

// Weights packed once (sgemm_packed_b, the compiled models' linear layers): its own blocking
// (column blocks of 96, K blocks of 512 on AVX-512), rows of bands spanning several tiles and
// edge tiles; every element goes through the hook exactly once, after its last K block.
TEST(FusionHookGemm, PackedWeightsEveryIsa) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 102);
  const int64_t shapes[][3] = {{1, 40, 16}, {13, 33, 17}, {30, 250, 600}, {100, 97, 64}, {7, 1000, 40}};
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    const int nr = kernels::sgemm_panel_width();
    int t = 0;
    for (const auto& sh : shapes) {
      const int64_t M = sh[0], N = sh[1], K = sh[2], ldc = N + 2;
      SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
      const auto A = testing::random_vec(rng, static_cast<size_t>(M * K));
      const auto B = testing::random_vec(rng, static_cast<size_t>(K * N));
      const auto col_bias = testing::random_vec(rng, static_cast<size_t>(N));
      std::vector<float> Bp(static_cast<size_t>(kernels::sgemm_packed_b_floats(K, N, nr)) + 16);
      float* bp = Bp.data() + (16 - reinterpret_cast<uintptr_t>(Bp.data()) / 4 % 16) % 16;  // 64-byte aligned
      kernels::sgemm_pack_b(K, N, {B.data(), N, 1}, nr, bp);
      GemmEpilogue ep;
      ep.bias_mode = GemmEpilogue::Bias::PerCol;
      ep.bias = col_bias.data();
      ep.act = Activation::Relu;
      std::vector<float> C(static_cast<size_t>(M * ldc), 0.f), R = C;
      kernels::sgemm_packed_b(M, N, K, {A.data(), K, 1}, bp, nr, R.data(), ldc, ep, pick(t), nullptr);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) R[i * ldc + j] = epi_fn(R[i * ldc + j], i * N + j);
      const float* base = C.data();
      Probe probe(M * N, false, [=](int64_t k) { return base + (k / N) * ldc + k % N; });
      const ElementHook hook = probe.hook();
      kernels::sgemm_packed_b(M, N, K, {A.data(), K, 1}, bp, nr, C.data(), ldc, ep, pick(t++), &hook);
      EXPECT_TRUE(probe.exactly_once());
      EXPECT_TRUE(same(C, R));
    }
  }
}

TEST(FusionHookGemm, EmptyHookIsNoHook) {
  std::mt19937_64 rng(testing::test_seed() + 102);
  const int64_t M = 9, N = 21, K = 13;
  const auto A = testing::random_vec(rng, M * K), B = testing::random_vec(rng, K * N);
  std::vector<float> C(M * N, 0.f), R(M * N, 0.f);
  kernels::sgemm(M, N, K, {A.data(), K, 1}, {B.data(), N, 1}, R.data(), N, {}, kSerial);
  const ElementHook empty{};
  kernels::sgemm(M, N, K, {A.data(), K, 1}, {B.data(), N, 1}, C.data(), N, {}, kSerial, &empty);
  EXPECT_EQ(C, R);
}

// ---------------------------------------------------------------- conv2d ----

kernels::Conv2dShape conv_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R,
                                int64_t S, int64_t stride, int64_t pad, int64_t dil = 1,
                                int64_t groups = 1) {
  return {N, C, H, W, K, R, S, stride, stride, pad, pad, dil, dil, groups};
}

void check_conv(std::mt19937_64& rng, const char* name, const kernels::Conv2dShape& s,
                const Parallel& par) {
  const bool with_bias = testing::rand_int(rng, 0, 1);
  const auto act = static_cast<Activation>(testing::rand_int(rng, 0, 2));
  SCOPED_TRACE(::testing::Message() << name << " bias=" << with_bias << " act=" << int(act)
                                    << " threads=" << par.num_threads());
  const auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
  const auto w = testing::random_vec(rng, static_cast<size_t>(s.K * (s.C / s.groups) * s.R * s.S));
  const auto bias = testing::random_vec(rng, static_cast<size_t>(s.K));
  const int64_t ysize = s.N * s.K * s.OH() * s.OW();
  std::vector<float> y(static_cast<size_t>(ysize), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> r = y;
  ASSERT_EQ(kernels::conv2d_scratch_bytes(s, par.num_threads()), 0u);
  kernels::conv2d_nchw(s, x.data(), w.data(), with_bias ? bias.data() : nullptr, r.data(), act,
                       nullptr, par);
  apply_epi_dense(r);
  Probe probe(ysize, false, dense(y.data()));
  const ElementHook hook = probe.hook();
  kernels::conv2d_nchw(s, x.data(), w.data(), with_bias ? bias.data() : nullptr, y.data(), act,
                       nullptr, par, &hook);
  EXPECT_TRUE(probe.exactly_once());
  EXPECT_TRUE(same(y, r));
}

TEST(FusionHookConv2d, EveryStrategy) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 110);
  struct Case {
    const char* name;
    kernels::Conv2dShape s;
  };
  const Case cases[] = {
      {"1x1 pointwise", conv_shape(2, 16, 7, 9, 24, 1, 1, 1, 0)},
      {"1x1 s2 (implicit GEMM)", conv_shape(2, 16, 10, 9, 24, 1, 1, 2, 0)},
      {"3x3 s2 p1", conv_shape(2, 12, 15, 16, 20, 3, 3, 2, 1)},
      {"3x3 s1 p1 wide (several column blocks)", conv_shape(1, 32, 28, 28, 40, 3, 3, 1, 1)},
      {"grouped 4", conv_shape(2, 16, 10, 10, 32, 3, 3, 1, 1, 1, 4)},
      {"grouped 2 1x1", conv_shape(1, 8, 6, 6, 12, 1, 1, 1, 0, 1, 2)},
      {"depthwise 3x3 s1 (3x3 row kernel)", conv_shape(2, 24, 12, 12, 24, 3, 3, 1, 1, 1, 24)},
      {"depthwise 3x3 s2", conv_shape(1, 16, 13, 11, 16, 3, 3, 2, 1, 1, 16)},
      {"depthwise multiplier 2", conv_shape(2, 6, 9, 9, 12, 3, 3, 1, 1, 1, 6)},
      {"depthwise 5x5 dil2", conv_shape(1, 8, 16, 16, 8, 5, 5, 1, 4, 2, 8)},
      {"1-D as H=1", conv_shape(3, 5, 1, 40, 7, 1, 3, 1, 1)},
  };
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (const Case& c : cases)
      for (int t = 0; t < 2; ++t) check_conv(rng, c.name, c.s, pick(t));
  }
}

// ---------------------------------------------------------------- softmax ----

struct SoftmaxCase {
  int64_t outer, dim, inner;
};
// inner == 1 (row path) and inner > 1: one tile spanning inner (the prologue's single slab
// request), exactly one full tile, and several tiles with a partial last one.
const SoftmaxCase kSoftmaxCases[] = {
    {1, 1, 1},  {7, 100, 1}, {3, 4099, 1}, {300, 17, 1}, {5, 9, 3},
    {3, 7, 256}, {2, 31, 300}, {1, 40, 700}, {4, 1, 5},
};

TEST(FusionHookSoftmax, EpilogueBothFormsAndInPlace) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 120);
  int t = 0;
  for (const auto& c : kSoftmaxCases) {
    for (bool log : {false, true}) {
      for (bool in_place : {false, true}) {
        const Parallel& par = pick(t++);
        SCOPED_TRACE(::testing::Message() << "outer=" << c.outer << " dim=" << c.dim << " inner="
                                          << c.inner << " log=" << log << " in_place=" << in_place
                                          << " threads=" << par.num_threads());
        const int64_t n = c.outer * c.dim * c.inner;
        const auto x = testing::random_vec(rng, static_cast<size_t>(n), -4.f, 4.f);
        std::vector<float> r = x, y = x;
        kernels::softmax(r.data(), r.data(), c.outer, c.dim, c.inner, log, par);
        apply_epi_dense(r);
        Probe probe(n, false, dense(y.data()));
        const ElementHook hook = probe.hook();
        if (in_place) {
          kernels::softmax(y.data(), y.data(), c.outer, c.dim, c.inner, log, par, &hook);
        } else {
          std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
          kernels::softmax(x.data(), y.data(), c.outer, c.dim, c.inner, log, par, &hook);
        }
        EXPECT_TRUE(probe.exactly_once());
        EXPECT_TRUE(same(y, r));
      }
    }
  }
}

TEST(FusionHookSoftmax, PrologueAloneAndWithEpilogue) {
  announce_seed();
  int t = 0;
  for (const auto& c : kSoftmaxCases) {
    for (bool log : {false, true}) {
      for (bool with_epi : {false, true}) {
        const Parallel& par = pick(t++);
        SCOPED_TRACE(::testing::Message() << "outer=" << c.outer << " dim=" << c.dim << " inner="
                                          << c.inner << " log=" << log << " epilogue=" << with_epi
                                          << " threads=" << par.num_threads());
        const int64_t n = c.outer * c.dim * c.inner;
        const auto x = generated_input(n);
        std::vector<float> r(static_cast<size_t>(n));
        kernels::softmax(x.data(), r.data(), c.outer, c.dim, c.inner, log, par);
        if (with_epi) apply_epi_dense(r);
        std::vector<float> y(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
        Probe pro(n, true), epi(n, false, dense(y.data()));
        const ElementHook pro_hook = pro.hook(), epi_hook = epi.hook();
        kernels::softmax(nullptr, y.data(), c.outer, c.dim, c.inner, log, par,
                         with_epi ? &epi_hook : nullptr, &pro_hook);
        EXPECT_TRUE(pro.exactly_once()) << "prologue";
        if (with_epi) {
          EXPECT_TRUE(epi.exactly_once()) << "epilogue";
        }
        EXPECT_TRUE(same(y, r));
      }
    }
  }
}

// ---------------------------------------------------------------- layer norm ----

TEST(FusionHookLayerNorm, EpiloguePrologueAndStatistics) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 130);
  const int64_t shapes[][2] = {{1, 1}, {5, 7}, {64, 768}, {300, 33}, {3, 4097}, {40, 0}};
  int t = 0;
  for (const auto& s : shapes) {
    const int64_t rows = s[0], cols = s[1], n = rows * cols;
    for (int mode = 0; mode < 3; ++mode) {  // 0: epilogue, 1: prologue, 2: both
      const Parallel& par = pick(t++);
      const bool use_w = testing::rand_int(rng, 0, 1), use_b = testing::rand_int(rng, 0, 1);
      SCOPED_TRACE(::testing::Message() << "rows=" << rows << " cols=" << cols << " mode=" << mode
                                        << " weight=" << use_w << " bias=" << use_b
                                        << " threads=" << par.num_threads());
      const auto w = testing::random_vec(rng, static_cast<size_t>(cols));
      const auto b = testing::random_vec(rng, static_cast<size_t>(cols));
      const auto x = mode == 0 ? testing::random_vec(rng, static_cast<size_t>(n), -3.f, 5.f)
                               : generated_input(n);
      std::vector<float> r(static_cast<size_t>(n)), rmean(rows), rrstd(rows);
      kernels::layer_norm(x.data(), use_w ? w.data() : nullptr, use_b ? b.data() : nullptr, 1e-5f,
                          rows, cols, r.data(), rmean.data(), rrstd.data(), par);
      if (mode != 1) apply_epi_dense(r);
      std::vector<float> y(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> mean(rows, -7.f), rstd(rows, -7.f);
      Probe pro(n, true), epi(n, false, dense(y.data()));
      const ElementHook pro_hook = pro.hook(), epi_hook = epi.hook();
      kernels::layer_norm(mode == 0 ? x.data() : nullptr, use_w ? w.data() : nullptr,
                          use_b ? b.data() : nullptr, 1e-5f, rows, cols, y.data(), mean.data(),
                          rstd.data(), par, mode != 1 ? &epi_hook : nullptr,
                          mode != 0 ? &pro_hook : nullptr);
      if (mode != 0) {
        EXPECT_TRUE(pro.exactly_once()) << "prologue";
      }
      if (mode != 1) {
        EXPECT_TRUE(epi.exactly_once()) << "epilogue";
      }
      EXPECT_TRUE(same(y, r));
      // The statistics are outputs 1 and 2: never passed to the epilogue.
      EXPECT_TRUE(same(mean, rmean));
      EXPECT_TRUE(same(rstd, rrstd));
    }
  }
}

// ---------------------------------------------------------------- pooling ----

kernels::Pool2dShape pool_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                                int64_t stride, int64_t pad, int64_t dil = 1) {
  kernels::Pool2dShape s{N, C, H, W, 0, 0, k, k, stride, stride, pad, pad, dil, dil};
  s.OH = (H + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  s.OW = (W + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  return s;
}

// 7x7 maps (a run spans several rows), 40x70 (several runs per plane), one plane, many planes.
const kernels::Pool2dShape kPoolShapes[] = {
    pool_shape(2, 5, 14, 14, 2, 2, 0), pool_shape(1, 3, 42, 72, 3, 1, 1),
    pool_shape(1, 1, 9, 11, 3, 2, 1),  pool_shape(4, 16, 8, 8, 3, 1, 1, 1),
    pool_shape(1, 2, 30, 30, 3, 2, 1, 2),
};

template <class Run>
void check_pool(const char* what, int64_t ysize, const Parallel& par, Run&& run) {
  SCOPED_TRACE(::testing::Message() << what << " threads=" << par.num_threads());
  std::vector<float> r(static_cast<size_t>(ysize), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> y = r;
  run(r.data(), nullptr);
  apply_epi_dense(r);
  Probe probe(ysize, false, dense(y.data()));
  const ElementHook hook = probe.hook();
  run(y.data(), &hook);
  EXPECT_TRUE(probe.exactly_once());
  EXPECT_TRUE(same(y, r));
}

TEST(FusionHookPool, MaxAvgAdaptive) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 140);
  int t = 0;
  for (const auto& s : kPoolShapes) {
    SCOPED_TRACE(::testing::Message() << "N=" << s.N << " C=" << s.C << " H=" << s.H << " W="
                                      << s.W << " out=" << s.OH << "x" << s.OW << " k=" << s.kh
                                      << " stride=" << s.sh << " pad=" << s.ph << " dil=" << s.dh);
    const auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
    const int64_t ysize = s.N * s.C * s.OH * s.OW;
    for (int rep = 0; rep < 2; ++rep, ++t) {
      const Parallel& par = pick(t);
      std::vector<int64_t> ri(static_cast<size_t>(ysize), -5), yi = ri;
      bool first = true;
      check_pool("max_pool2d", ysize, par, [&](float* y, const ElementHook* h) {
        kernels::max_pool2d_nchw(s, x.data(), y, first ? ri.data() : yi.data(), par, h);
        first = false;
      });
      EXPECT_EQ(yi, ri) << "indices are not passed to the hook";
      check_pool("max_pool2d without indices", ysize, par, [&](float* y, const ElementHook* h) {
        kernels::max_pool2d_nchw(s, x.data(), y, nullptr, par, h);
      });
      if (s.dh == 1) {
        for (bool include_pad : {false, true}) {
          for (int64_t div : {int64_t{0}, int64_t{5}}) {
            check_pool("avg_pool2d", ysize, par, [&](float* y, const ElementHook* h) {
              kernels::avg_pool2d_nchw(s, x.data(), y, include_pad, div, par, h);
            });
          }
        }
      }
      check_pool("adaptive_avg_pool2d", ysize, par, [&](float* y, const ElementHook* h) {
        kernels::adaptive_avg_pool2d_nchw(s.N, s.C, s.H, s.W, s.OH, s.OW, x.data(), y, par, h);
      });
    }
  }
}

// ---------------------------------------------------------------- ops_nn bindings ----

struct NodeRun {
  std::vector<std::vector<char>> out;
};

// Runs node `id` of g through its OpKernel with the given input buffers and hooks.
NodeRun run_node(const ecg::Graph& g, int id, const std::vector<const void*>& in,
                 const ElementHook* epi, const ElementHook* pro, const Parallel& par) {
  const ecg::Node& n = g.node(id);
  const runtime::OpKernel* k = target::registry().get("cpu").find_kernel(n.op);
  EXPECT_NE(k, nullptr);
  EXPECT_EQ(target::registry().get("cpu").supports(g, n), "");
  NodeRun r;
  std::vector<void*> outs;
  for (int v : n.outputs) {
    r.out.emplace_back(static_cast<size_t>(g.value(v).nbytes()), '\0');
    outs.push_back(r.out.back().data());
  }
  const size_t scratch_bytes = k->scratch_bytes ? k->scratch_bytes(g, n, par.num_threads()) : 0;
  std::vector<char> scratch_store(scratch_bytes + 64);
  void* scratch = scratch_store.data() + (64 - reinterpret_cast<uintptr_t>(scratch_store.data()) % 64);
  runtime::KernelCall call{g, n, in, outs, scratch, par, epi, pro};
  k->run(call);
  return r;
}

std::vector<float> as_floats(const std::vector<char>& b) {
  std::vector<float> f(b.size() / sizeof(float));
  std::memcpy(f.data(), b.data(), f.size() * sizeof(float));
  return f;
}

// One node whose first input is `x0`; the other inputs are random. Checks output 0 with an
// epilogue (and, if the op advertises it, with a prologue generating input 0) against the
// hookless run; every other output must not change.
void check_binding(std::mt19937_64& rng, const std::string& op,
                   const std::vector<std::vector<int64_t>>& in_shapes,
                   const std::vector<ecg::OutputSpec>& outs, ecg::AttrMap attrs,
                   const Parallel& par) {
  SCOPED_TRACE(::testing::Message() << op << " threads=" << par.num_threads());
  ecg::Graph g;
  std::vector<int> ins;
  std::vector<std::vector<float>> data;
  std::vector<const void*> ptrs;
  for (size_t i = 0; i < in_shapes.size(); ++i) {
    ins.push_back(g.add_input(in_shapes[i], DType::Float32));
    const int64_t n = testing::numel(in_shapes[i]);
    data.push_back(i == 0 ? generated_input(n) : testing::random_vec(rng, static_cast<size_t>(n)));
  }
  for (auto& d : data) ptrs.push_back(d.data());
  const int id = g.add_node(op, ins, outs, std::move(attrs));
  const runtime::OpKernel* k = target::registry().get("cpu").find_kernel(op);
  ASSERT_NE(k, nullptr);
  ASSERT_TRUE(k->epilogue_hook);
  const NodeRun ref = run_node(g, id, ptrs, nullptr, nullptr, par);
  std::vector<float> r0 = as_floats(ref.out[0]);
  apply_epi_dense(r0);
  const int64_t n0 = static_cast<int64_t>(r0.size());
  {
    Probe epi(n0, false);
    const ElementHook hook = epi.hook();
    const NodeRun got = run_node(g, id, ptrs, &hook, nullptr, par);
    EXPECT_TRUE(epi.exactly_once());
    EXPECT_TRUE(same(as_floats(got.out[0]), r0));
    for (size_t o = 1; o < got.out.size(); ++o) EXPECT_EQ(got.out[o], ref.out[o]) << "output " << o;
  }
  if (k->prologue_hook) {
    Probe pro(testing::numel(in_shapes[0]), true), epi(n0, false);
    const ElementHook pro_hook = pro.hook(), epi_hook = epi.hook();
    std::vector<const void*> no_x = ptrs;
    no_x[0] = nullptr;
    const NodeRun got = run_node(g, id, no_x, &epi_hook, &pro_hook, par);
    EXPECT_TRUE(pro.exactly_once()) << "prologue";
    EXPECT_TRUE(epi.exactly_once()) << "epilogue with prologue";
    EXPECT_TRUE(same(as_floats(got.out[0]), r0));
    for (size_t o = 1; o < got.out.size(); ++o) EXPECT_EQ(got.out[o], ref.out[o]) << "output " << o;
  }
}

TEST(FusionHookBindings, AdvertisedExactlyWhereHonoured) {
  const char* epi_ops[] = {"convolution",    "addmm",      "mm",
                           "bmm",            "baddbmm",    "_softmax",
                           "_log_softmax",   "native_layer_norm", "max_pool2d_with_indices",
                           "avg_pool2d",     "_adaptive_avg_pool2d"};
  for (const char* op : epi_ops) {
    const runtime::OpKernel* k = target::registry().get("cpu").find_kernel(op);
    ASSERT_NE(k, nullptr) << op;
    EXPECT_TRUE(k->epilogue_hook) << op;
    const bool row_wise = std::string(op) == "_softmax" || std::string(op) == "_log_softmax" ||
                          std::string(op) == "native_layer_norm";
    EXPECT_EQ(k->prologue_hook, row_wise) << op;
  }
  for (const char* op : {"_scaled_dot_product_flash_attention_for_cpu", "native_group_norm",
                         "_native_batch_norm_legit_no_training"}) {
    const runtime::OpKernel* k = target::registry().get("cpu").find_kernel(op);
    ASSERT_NE(k, nullptr) << op;
    EXPECT_FALSE(k->epilogue_hook) << op;
    EXPECT_FALSE(k->prologue_hook) << op;
  }
}

TEST(FusionHookBindings, OpsPassHooksThrough) {
  announce_seed();
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 150);
  using V = std::vector<int64_t>;
  const DType f32 = DType::Float32;
  for (int t = 0; t < 2; ++t) {
    const Parallel& par = pick(t);
    check_binding(rng, "convolution", {{2, 6, 9, 9}, {8, 3, 3, 3}, {8}}, {{{2, 8, 5, 5}, f32}},
                  {{"stride", V{2, 2}}, {"padding", V{1, 1}}, {"dilation", V{1, 1}},
                   {"groups", int64_t{2}}, {"transposed", int64_t{0}}},
                  par);
    check_binding(rng, "convolution", {{1, 4, 6, 6}, {4, 1, 3, 3}}, {{{1, 4, 6, 6}, f32}},
                  {{"stride", V{1, 1}}, {"padding", V{1, 1}}, {"groups", int64_t{4}}}, par);
    // Per-column bias (folded into the GEMM) and a general broadcast with beta != 1 (written to
    // C before the GEMM accumulates into it: the hook must still run once, on final values).
    check_binding(rng, "addmm", {{19}, {13, 11}, {11, 19}}, {{{13, 19}, f32}}, {}, par);
    check_binding(rng, "addmm", {{13, 1}, {13, 11}, {11, 19}}, {{{13, 19}, f32}},
                  {{"beta", 0.5}, {"alpha", 2.0}}, par);
    check_binding(rng, "addmm", {{13, 19}, {13, 0}, {0, 19}}, {{{13, 19}, f32}}, {{"beta", 0.5}},
                  par);
    check_binding(rng, "mm", {{40, 23}, {23, 37}}, {{{40, 37}, f32}}, {}, par);
    check_binding(rng, "bmm", {{3, 14, 9}, {3, 9, 33}}, {{{3, 14, 33}, f32}}, {}, par);
    check_binding(rng, "baddbmm", {{3, 1, 33}, {3, 14, 9}, {3, 9, 33}}, {{{3, 14, 33}, f32}},
                  {{"beta", 0.25}}, par);
    check_binding(rng, "_softmax", {{4, 50}}, {{{4, 50}, f32}},
                  {{"dim", int64_t{-1}}, {"half_to_float", int64_t{0}}}, par);
    check_binding(rng, "_softmax", {{2, 9, 300}}, {{{2, 9, 300}, f32}},
                  {{"dim", int64_t{1}}, {"half_to_float", int64_t{0}}}, par);
    check_binding(rng, "_log_softmax", {{3, 5, 7}}, {{{3, 5, 7}, f32}},
                  {{"dim", int64_t{1}}, {"half_to_float", int64_t{0}}}, par);
    check_binding(rng, "native_layer_norm", {{2, 6, 32}, {32}, {32}},
                  {{{2, 6, 32}, f32}, {{2, 6, 1}, f32}, {{2, 6, 1}, f32}},
                  {{"normalized_shape", V{32}}, {"eps", 1e-5}}, par);
    check_binding(rng, "max_pool2d_with_indices", {{2, 3, 11, 12}},
                  {{{2, 3, 6, 6}, f32}, {{2, 3, 6, 6}, DType::Int64}},
                  {{"kernel_size", V{3, 3}}, {"stride", V{2, 2}}, {"padding", V{1, 1}}}, par);
    check_binding(rng, "avg_pool2d", {{2, 3, 11, 12}}, {{{2, 3, 6, 6}, f32}},
                  {{"kernel_size", V{3, 3}}, {"stride", V{2, 2}}, {"padding", V{1, 1}},
                   {"count_include_pad", int64_t{0}}},
                  par);
    check_binding(rng, "_adaptive_avg_pool2d", {{2, 3, 11, 12}}, {{{2, 3, 4, 5}, f32}}, {}, par);
  }
}

}  // namespace
}  // namespace dnnfusion
