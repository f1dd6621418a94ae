// sdpa against the plain reference on every ISA the CPU has (AVX-512 runs its own row softmax),
// serial and two threads: plain,
// float masks (full and broadcast), bool masks, causal (square and Lq != Lk), combined,
// non-contiguous (transposed-head) q/k/v, fully masked rows, logsumexp output.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using kernels::AttnMask;
using kernels::SerialParallel;
using kernels::Tensor4;
using testing::ThreadParallel;

struct AlignedScratch {
  std::vector<unsigned char> store;
  void* ptr;
  explicit AlignedScratch(size_t bytes) : store(bytes + 64) {
    ptr = store.data() + (64 - reinterpret_cast<uintptr_t>(store.data()) % 64);
  }
};

enum class MaskKind { None, Float, FloatBroadcast, Bool, BoolBroadcast };

struct Case {
  int64_t Bt, H, Lq, Lk, D, Dv;
  MaskKind mask;
  bool causal;
  bool bshd;  // q/k/v stored [B][L][H][D] (as after a linear projection), not [B][H][L][D]
};

void check_sdpa(std::mt19937_64& rng, const Case& c, const kernels::Parallel& par) {
  SCOPED_TRACE(::testing::Message() << "Bt=" << c.Bt << " H=" << c.H << " Lq=" << c.Lq << " Lk="
                                    << c.Lk << " D=" << c.D << " Dv=" << c.Dv << " mask="
                                    << int(c.mask) << " causal=" << c.causal << " bshd=" << c.bshd
                                    << " threads=" << par.num_threads());
  auto make = [&](int64_t L, int64_t D, std::vector<float>& buf) {
    buf = testing::random_vec(rng, static_cast<size_t>(std::max<int64_t>(1, c.Bt * c.H * L * D)), -2.f, 2.f);
    if (c.bshd) return Tensor4{buf.data(), L * c.H * D, D, c.H * D, 1};
    return Tensor4{buf.data(), c.H * L * D, L * D, D, 1};
  };
  std::vector<float> qb, kb, vb;
  const Tensor4 q = make(c.Lq, c.D, qb), k = make(c.Lk, c.D, kb), v = make(c.Lk, c.Dv, vb);
  std::vector<float> fmask;
  std::vector<unsigned char> bmask;
  AttnMask mask;
  const size_t full = static_cast<size_t>(std::max<int64_t>(1, c.Bt * c.H * c.Lq * c.Lk));
  switch (c.mask) {
    case MaskKind::None: break;
    case MaskKind::Float:
      fmask = testing::random_vec(rng, full, -3.f, 3.f);
      for (size_t i = 0; i < fmask.size(); i += 5) fmask[i] = -std::numeric_limits<float>::infinity();
      mask = {fmask.data(), false, c.H * c.Lq * c.Lk, c.Lq * c.Lk, c.Lk, 1};
      break;
    case MaskKind::FloatBroadcast:  // one (Lk) row per batch entry, like a padding mask
      fmask = testing::random_vec(rng, static_cast<size_t>(c.Bt * c.Lk) + 1, -1.f, 1.f);
      mask = {fmask.data(), false, c.Lk, 0, 0, 1};
      break;
    case MaskKind::Bool:
      bmask.resize(full);
      for (auto& m : bmask) m = testing::rand_int(rng, 0, 3) != 0;
      mask = {bmask.data(), true, c.H * c.Lq * c.Lk, c.Lq * c.Lk, c.Lk, 1};
      break;
    case MaskKind::BoolBroadcast:  // (Lq, Lk) shared by batch and heads
      bmask.resize(static_cast<size_t>(c.Lq * c.Lk) + 1);
      for (auto& m : bmask) m = testing::rand_int(rng, 0, 4) != 0;
      mask = {bmask.data(), true, 0, 0, c.Lk, 1};
      break;
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(std::max<int64_t>(c.D, 1)));
  const size_t nout = static_cast<size_t>(c.Bt * c.H * c.Lq * c.Dv), nl = static_cast<size_t>(c.Bt * c.H * c.Lq);
  std::vector<float> out(nout, 777.f), ref(nout), lse(nl, 777.f), ref_lse(nl);
  reference::ref_sdpa(c.Bt, c.H, c.Lq, c.Lk, c.D, c.Dv, q, k, v, mask, c.causal, scale, ref.data(),
                      ref_lse.data());
  AlignedScratch scratch(kernels::sdpa_scratch_bytes(c.Lq, c.Lk, par.num_threads()));
  kernels::sdpa(c.Bt, c.H, c.Lq, c.Lk, c.D, c.Dv, q, k, v, mask, c.causal, scale, out.data(),
                lse.data(), scratch.ptr, par);
  EXPECT_TRUE(testing::all_close(out.data(), ref.data(), nout, 2e-4f, 1e-5f));
  EXPECT_TRUE(testing::all_close(lse.data(), ref_lse.data(), nl, 2e-4f, 1e-5f));
  // lse is optional.
  std::vector<float> out2(nout);
  kernels::sdpa(c.Bt, c.H, c.Lq, c.Lk, c.D, c.Dv, q, k, v, mask, c.causal, scale, out2.data(),
                nullptr, scratch.ptr, par);
  EXPECT_TRUE(testing::all_close(out2.data(), ref.data(), nout, 2e-4f, 1e-5f));
}

TEST(Attention, MatchesReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 30);
  SerialParallel serial;
  ThreadParallel threads(2);
  const Case cases[] = {
      {1, 1, 1, 1, 1, 1, MaskKind::None, false, false},
      {2, 3, 10, 10, 16, 16, MaskKind::None, false, false},
      {1, 2, 64, 64, 32, 32, MaskKind::None, true, false},
      {2, 2, 65, 70, 24, 40, MaskKind::Float, false, true},
      {1, 4, 130, 77, 64, 64, MaskKind::FloatBroadcast, false, true},
      {2, 2, 33, 33, 8, 8, MaskKind::Bool, false, false},
      {1, 3, 70, 50, 16, 12, MaskKind::BoolBroadcast, true, false},
      {2, 1, 20, 45, 12, 12, MaskKind::None, true, false},   // causal with Lq < Lk (top-left)
      {1, 2, 45, 20, 12, 12, MaskKind::Float, true, true},   // causal with Lq > Lk
      {3, 2, 129, 129, 64, 64, MaskKind::Bool, true, true},
      {1, 4, 300, 37, 16, 16, MaskKind::Float, true, true},  // 2 threads: 256-row blocks, a tail
      {2, 3, 128, 128, 64, 64, MaskKind::None, false, true},  // bert-like: one block per head
  };
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (const auto& c : cases) {
      check_sdpa(rng, c, serial);
      check_sdpa(rng, c, threads);
    }
    for (int t = 0; t < 15; ++t) {
      Case c{testing::rand_int(rng, 1, 2), testing::rand_int(rng, 1, 3), testing::rand_int(rng, 1, 80),
             testing::rand_int(rng, 1, 80), testing::rand_int(rng, 1, 40), testing::rand_int(rng, 1, 40),
             static_cast<MaskKind>(testing::rand_int(rng, 0, 4)), t % 2 == 0, t % 3 == 0};
      check_sdpa(rng, c, t % 2 ? serial : static_cast<const kernels::Parallel&>(threads));
    }
  }
}

TEST(Attention, FullyMaskedRowsAreZeroLikeSafeSoftmax) {
  // PyTorch >= 2.5 math path (_safe_softmax): an all -inf row has probability 0, so out = 0 and
  // logsumexp = -inf; other rows are unaffected.
  SerialParallel serial;
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    const int64_t L = 4, D = 3;
    std::vector<float> q(L * D, 0.5f), k(L * D, 0.25f), v(L * D);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
    std::vector<unsigned char> m(L * L, 1);
    for (int64_t j = 0; j < L; ++j) m[2 * L + j] = 0;  // row 2 masked out entirely
    const Tensor4 t4q{q.data(), 0, 0, D, 1}, t4k{k.data(), 0, 0, D, 1}, t4v{v.data(), 0, 0, D, 1};
    std::vector<float> out(L * D, 777.f), lse(L, 777.f);
    AlignedScratch scratch(kernels::sdpa_scratch_bytes(L, L, 1));
    kernels::sdpa(1, 1, L, L, D, D, t4q, t4k, t4v, {m.data(), true, 0, 0, L, 1}, false, 1.f,
                  out.data(), lse.data(), scratch.ptr, serial);
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(out[2 * D + d], 0.f);
    EXPECT_EQ(lse[2], -std::numeric_limits<float>::infinity());
    // Equal scores: uniform average of v rows.
    for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(out[0 * D + d], (0 + 3 + 6 + 9) / 4.f + d, 1e-5);
    EXPECT_NEAR(lse[0], 0.5f * 0.25f * 3 + std::log(4.f), 1e-5);
    // A NaN score propagates to its whole row.
    k[1 * D] = std::numeric_limits<float>::quiet_NaN();
    kernels::sdpa(1, 1, L, L, D, D, t4q, t4k, t4v, {}, false, 1.f, out.data(), lse.data(),
                  scratch.ptr, serial);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[D - 1]) && std::isnan(lse[0]));
  }
}

TEST(Attention, EmptyKeysGiveZeros) {
  SerialParallel serial;
  std::vector<float> q(6, 1.f), out(4, 777.f), lse(2, 777.f);
  AlignedScratch scratch(kernels::sdpa_scratch_bytes(2, 0, 1));
  kernels::sdpa(1, 1, 2, 0, 3, 2, {q.data(), 0, 0, 3, 1}, {q.data(), 0, 0, 3, 1},
                {q.data(), 0, 0, 2, 1}, {}, false, 1.f, out.data(), lse.data(), scratch.ptr, serial);
  for (float o : out) EXPECT_EQ(o, 0.f);
  for (float l : lse) EXPECT_EQ(l, -std::numeric_limits<float>::infinity());
  EXPECT_THROW(kernels::sdpa(1, 1, -1, 2, 3, 2, {q.data(), 0, 0, 3, 1}, {q.data(), 0, 0, 3, 1},
                             {q.data(), 0, 0, 2, 1}, {}, false, 1.f, out.data(), nullptr,
                             scratch.ptr, serial),
               Error);
}

TEST(BenchmarkInfo, AttentionBertBase) {
  // BERT-base-like self-attention (B=1, H=12, L=128/384, D=64), two threads; correctness only.
  std::mt19937_64 rng(testing::test_seed() + 31);
  ThreadParallel threads(2);
  for (int64_t L : {128, 384}) {
    const int64_t H = 12, D = 64;
    auto q = testing::random_vec(rng, H * L * D), k = testing::random_vec(rng, H * L * D),
         v = testing::random_vec(rng, H * L * D);
    const Tensor4 tq{q.data(), H * L * D, L * D, D, 1}, tk{k.data(), H * L * D, L * D, D, 1},
        tv{v.data(), H * L * D, L * D, D, 1};
    std::vector<float> out(H * L * D), ref(out.size());
    AlignedScratch scratch(kernels::sdpa_scratch_bytes(L, L, 2));
    auto run = [&] {
      kernels::sdpa(1, H, L, L, D, D, tq, tk, tv, {}, false, 0.125f, out.data(), nullptr,
                    scratch.ptr, threads);
    };
    run();
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("[ bench ] sdpa H=12 L=%lld D=64 %s threads=2: %.1f GFLOP/s (%.3f ms)\n",
                (long long)L, kernels::isa_name(kernels::active_isa()),
                4.0 * H * L * L * D / best * 1e-9, best * 1e3);
    reference::ref_sdpa(1, H, L, L, D, D, tq, tk, tv, {}, false, 0.125f, ref.data(), nullptr);
    EXPECT_TRUE(testing::all_close(out.data(), ref.data(), out.size(), 2e-4f, 1e-5f));
  }
}

}  // namespace
}  // namespace dnnfusion
