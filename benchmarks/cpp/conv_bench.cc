// Kernel-efficiency benchmark of the NCHW[x]c direct convolution (kernels/cpu/conv_nchwc) against
// the implicit-im2col conv2d_nchw, on every distinct convolution of ResNet-50 (batch 1, 224x224),
// with the runtime's ThreadPool. First measures the machine's fp32 FMA peak with the same thread
// count (independent FMA chains, AVX-512 when the CPU has it), then per layer prints GFLOP/s and
// % of that peak for: conv2d_nchw, conv2d_nchwc with the default knobs, and conv2d_nchwc with the
// best knobs of a small local search (coordinate descent over the candidate knobs, the winner
// re-timed afterwards so its number carries no selection bias). Layout
// transforms and weight packing are not timed (they happen once per model / between blocks).
// Each configuration is checked against conv2d_nchw (max abs difference printed).
//
// Then the GEMMs of bert-base (batch 1, sequence 128: fused QKV projection, attention output,
// FFN up/down, and the per-head attention bmm's) through kernels::sgemm / sgemm_batched with the
// bias epilogue, in GFLOP/s and % of the same peak: B packed per call, B packed once (hot: one
// copy, re-used), and packed with cold weights (a different copy per call, as a model streams
// its layers); bert-base's whole attention through kernels::sdpa; batch-1 classifier GEMVs.
//
// `dnnfusion_conv_bench THREADS winograd` instead times the stride-1 3x3 convolutions of
// ResNet-18/50, VGG-16 and DenseNet-121 (batch 1, and batch 8 for ResNet's) with the direct
// kernel (default knobs) against Winograd F(2x2, 3x3) and F(4x4, 3x3) on the same blocks, marks
// the tile conv_winograd_tile picks, and prints each one's max error relative to the output's
// magnitude (against conv2d_nchw).
//
// `dnnfusion_conv_bench THREADS mobile` instead times the layer kinds of the mobile networks
// (mobilenet_v2 / v3, efficientnet_b0): depthwise 3x3 and 5x5 (stride 1 and 2) and 1x1 expand /
// project convs, batch 1 and 8, default knobs, in GFLOP/s and % of the peak, plus GB/s of the
// tensors read and written once (depthwise convs are bound by those bytes, not by FMAs).
//
// `dnnfusion_conv_bench THREADS expand_dw` times the fused front half of the mobile networks'
// inverted-residual blocks (kernels/cpu/conv_nchwc_expand_dw: 1x1 expand + relu6 + depthwise +
// relu6), batch 1, 32- or 16-lane blocks, against the same two convs unfused (conv2d_nchwc, relu6
// in the tile, conv2d_nchwc), with the fused output's max difference from the unfused one.
//
// `dnnfusion_conv_bench THREADS amx` times ResNet-50's direct convs (1x1, strided 1x1 and 3x3) on the
// direct kernel and on the AMX bf16x6 GEMM (where the CPU has AMX), with each one's error and
// whether the pass takes AMX.
//
//   dnnfusion_conv_bench [THREADS=2] [gemm | winograd | mobile | expand_dw | amx]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <fstream>
#include <functional>
#include <immintrin.h>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/conv_nchwc_expand_dw.h"
#include "kernels/cpu/conv_winograd.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16x6.h"
#include "target/cpu/layout/use_amx_convs.h"
#include "runtime/thread_pool.h"

namespace {

using dnnfusion::kernels::Activation;
using dnnfusion::kernels::Conv2dShape;
using dnnfusion::kernels::ConvNchwcKnobs;
using dnnfusion::kernels::Isa;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// FMA-throughput loops: 24 (AVX-512) / 12 (AVX2) independent accumulator chains, more than
// latency x FMA ports on current x86 cores, so the loop is throughput-bound. Returns flops done.
__attribute__((target("avx512f"), noinline)) double fma_loop_avx512(int64_t iters, float* sink) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it
  _mm512_store_ps(lanes, s);
  float total = 0.f;
  for (float l : lanes) total += l;
  *sink = total;
  return 2.0 * 16 * 24 * static_cast<double>(iters);
}

__attribute__((target("avx2,fma"), noinline)) double fma_loop_avx2(int64_t iters, float* sink) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  *sink = t[0] + t[7];
  return 2.0 * 8 * 12 * static_cast<double>(iters);
}

double measure_peak(dnnfusion::runtime::ThreadPool& pool, const char** how) {
  const bool avx512 = dnnfusion::kernels::isa_supported(Isa::Avx512);
  const bool avx2 = dnnfusion::kernels::isa_supported(Isa::Avx2);
  *how = avx512 ? "avx512 zmm FMA" : avx2 ? "avx2 ymm FMA" : "none (no FMA unit)";
  if (!avx512 && !avx2) return 0.0;
  const int T = pool.num_threads();
  double best = 0;
  for (int rep = 0; rep < 7; ++rep) {
    // Each thread times its own loop, so waking the pool is not charged to the FMA units; the
    // threads run concurrently (one chunk each), so shared clocks/power limits are included.
    std::vector<double> rate(static_cast<size_t>(T));
    std::vector<float> sink(static_cast<size_t>(T) * 16);
    const int64_t iters = 30'000'000;
    pool.parallel_for(T, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const auto t0 = Clock::now();
        const double f =
            avx512 ? fma_loop_avx512(iters, &sink[t * 16]) : fma_loop_avx2(iters, &sink[t * 16]);
        rate[t] = f / seconds_since(t0) * 1e-9;
      }
    });
    double total = 0;
    for (double r : rate) total += r;
    best = std::max(best, total);
  }
  return best;
}

// Median seconds of fn over enough runs for ~0.25 s (at least 5), after one warm-up run.
double time_median(const std::function<void()>& fn) {
  fn();
  const auto t0 = Clock::now();
  fn();
  const double once = std::max(seconds_since(t0), 1e-7);
  const int reps = std::clamp(static_cast<int>(0.25 / once), 5, 200);
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    const auto t1 = Clock::now();
    fn();
    ts.push_back(seconds_since(t1));
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

struct Layer {
  const char* name;
  Conv2dShape s;
};

Conv2dShape conv(int64_t C, int64_t HW, int64_t K, int64_t RS, int64_t stride, int64_t pad) {
  return {1, C, HW, HW, K, RS, RS, stride, stride, pad, pad, 1, 1, 1};
}

// Every distinct convolution of torchvision's resnet50 (stride on the 3x3 of each first block,
// "v1.5"), batch 1, 224x224 input.
const Layer kLayers[] = {
    {"conv1 7x7/2 3->64 @224", conv(3, 224, 64, 7, 2, 3)},
    {"l1 1x1 64->64 @56", conv(64, 56, 64, 1, 1, 0)},
    {"l1 3x3 64->64 @56", conv(64, 56, 64, 3, 1, 1)},
    {"l1 1x1 64->256 @56", conv(64, 56, 256, 1, 1, 0)},
    {"l1 1x1 256->64 @56", conv(256, 56, 64, 1, 1, 0)},
    {"l2 1x1 256->128 @56", conv(256, 56, 128, 1, 1, 0)},
    {"l2 3x3/2 128->128 @56", conv(128, 56, 128, 3, 2, 1)},
    {"l2 1x1 128->512 @28", conv(128, 28, 512, 1, 1, 0)},
    {"l2 ds 1x1/2 256->512 @56", conv(256, 56, 512, 1, 2, 0)},
    {"l2 1x1 512->128 @28", conv(512, 28, 128, 1, 1, 0)},
    {"l2 3x3 128->128 @28", conv(128, 28, 128, 3, 1, 1)},
    {"l3 1x1 512->256 @28", conv(512, 28, 256, 1, 1, 0)},
    {"l3 3x3/2 256->256 @28", conv(256, 28, 256, 3, 2, 1)},
    {"l3 1x1 256->1024 @14", conv(256, 14, 1024, 1, 1, 0)},
    {"l3 ds 1x1/2 512->1024 @28", conv(512, 28, 1024, 1, 2, 0)},
    {"l3 1x1 1024->256 @14", conv(1024, 14, 256, 1, 1, 0)},
    {"l3 3x3 256->256 @14", conv(256, 14, 256, 3, 1, 1)},
    {"l4 1x1 1024->512 @14", conv(1024, 14, 512, 1, 1, 0)},
    {"l4 3x3/2 512->512 @14", conv(512, 14, 512, 3, 2, 1)},
    {"l4 1x1 512->2048 @7", conv(512, 7, 2048, 1, 1, 0)},
    {"l4 ds 1x1/2 1024->2048 @14", conv(1024, 14, 2048, 1, 2, 0)},
    {"l4 1x1 2048->512 @7", conv(2048, 7, 512, 1, 1, 0)},
    {"l4 3x3 512->512 @7", conv(512, 7, 512, 3, 1, 1)},
};

Conv2dShape batched(Conv2dShape s, int64_t n) {
  s.N = n;
  return s;
}

Conv2dShape depthwise(int64_t C, int64_t HW, int64_t RS, int64_t stride) {
  Conv2dShape s = conv(C, HW, C, RS, stride, RS / 2);
  s.groups = C;
  return s;
}

// The layer kinds of mobilenet_v2 / v3 and efficientnet_b0 (224x224), timed at batch 1 and 8.
const Layer kMobileLayers[] = {
    {"dw 3x3 144 @56", depthwise(144, 56, 3, 1)},
    {"dw 3x3/2 96 @112", depthwise(96, 112, 3, 2)},
    {"dw 3x3 240 @28", depthwise(240, 28, 3, 1)},
    {"dw 5x5 672 @14", depthwise(672, 14, 5, 1)},
    {"dw 3x3 960 @7", depthwise(960, 7, 3, 1)},
    {"1x1 24->144 @56", conv(24, 56, 144, 1, 1, 0)},
    {"1x1 240->40 @28", conv(240, 28, 40, 1, 1, 0)},
    {"1x1 672->112 @14", conv(672, 14, 112, 1, 1, 0)},
    {"1x1 112->672 @14", conv(112, 14, 672, 1, 1, 0)},
    {"1x1 960->160 @7", conv(960, 7, 160, 1, 1, 0)},
};

std::string knobs_str(const ConvNchwcKnobs& k) {
  char b[64];
  std::snprintf(b, sizeof b, "ic%d oc%d rn%d %s", k.ic_bn, k.oc_bn, k.reg_n, k.unroll_ker ? "U" : "-");
  return b;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return dnnfusion::kernels::cpu_brand();
}

// One layer's data in NCHW plus the blocked copies for the knobs being timed.
struct Bench {
  const Conv2dShape& s;
  dnnfusion::runtime::ThreadPool& pool;
  std::vector<float> x, w, bias, y_ref;
  double flops;

  Bench(const Conv2dShape& shape, dnnfusion::runtime::ThreadPool& p, std::mt19937_64& rng)
      : s(shape), pool(p) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(static_cast<size_t>(n));
      for (auto& e : v) e = d(rng);
    };
    fill(x, s.N * s.C * s.H * s.W);
    fill(w, s.K * (s.C / s.groups) * s.R * s.S);
    fill(bias, s.K);
    y_ref.resize(static_cast<size_t>(s.N * s.K * s.OH() * s.OW()));
    flops = 2.0 * s.N * s.K * s.OH() * s.OW() * (s.C / s.groups) * s.R * s.S;
  }

  // y_ref = the NCHW conv (im2col GEMM), the reference every blocked run is checked against.
  void reference() {
    dnnfusion::kernels::conv2d_nchw(s, x.data(), w.data(), bias.data(), y_ref.data(), Activation::Relu, nullptr,
                                    pool);
  }

  double time_nchw() {
    return time_median([&] { reference(); });
  }

  // Seconds for one conv2d_nchwc call with knobs k; *err = max |y - y_ref|.
  double time_nchwc(const ConvNchwcKnobs& k, double* err) {
    namespace K = dnnfusion::kernels;
    std::vector<float> xb(static_cast<size_t>(K::nchwc_floats(s.N, s.C, s.H, s.W, k.ic_bn)));
    K::nchw_to_nchwc(x.data(), s.N, s.C, s.H, s.W, k.ic_bn, xb.data(), pool);
    std::vector<float> pw(static_cast<size_t>(K::conv_nchwc_packed_weight_floats(s, k)));
    K::conv_nchwc_pack_weight(s, k, w.data(), pw.data());
    std::vector<float> yb(static_cast<size_t>(K::nchwc_floats(s.N, s.K, s.OH(), s.OW(), k.oc_bn)));
    const double t = time_median([&] {
      K::conv2d_nchwc(s, k, xb.data(), pw.data(), bias.data(), nullptr, Activation::Relu,
                      yb.data(), pool);
    });
    std::vector<float> y(y_ref.size());
    K::nchwc_to_nchw(yb.data(), s.N, s.K, s.OH(), s.OW(), k.oc_bn, y.data(), pool);
    double e = 0;
    for (size_t i = 0; i < y.size(); ++i) e = std::max(e, static_cast<double>(std::fabs(y[i] - y_ref[i])));
    *err = e;
    return t;
  }
};

// Coordinate descent over the candidate knobs: starting from the default, for each knob in turn
// try every value some candidate has (others fixed at the best so far), two passes.
ConvNchwcKnobs local_search(Bench& b, double* best_t, double* err, int* tried) {
  const Isa isa = dnnfusion::kernels::active_isa();
  const auto cands = dnnfusion::kernels::conv_nchwc_candidate_knobs(b.s, isa);
  ConvNchwcKnobs best = cands.front();
  std::vector<std::pair<ConvNchwcKnobs, double>> seen;
  auto eval = [&](const ConvNchwcKnobs& k) {
    for (auto& [kk, t] : seen)
      if (kk == k) return t;
    double e = 0;
    const double t = b.time_nchwc(k, &e);
    seen.emplace_back(k, t);
    if (t < *best_t || seen.size() == 1) {
      *best_t = t;
      *err = e;
    }
    return t;
  };
  *best_t = 1e30;
  eval(best);
  for (int pass = 0; pass < 2; ++pass)
    for (int dim = 0; dim < 4; ++dim) {
      ConvNchwcKnobs cur = best;
      double cur_t = eval(best);
      for (const auto& c : cands) {
        ConvNchwcKnobs k = best;
        if (dim == 0) k.oc_bn = c.oc_bn, k.reg_n = std::min(k.reg_n, dnnfusion::kernels::conv_nchwc_max_reg_n(isa, c.oc_bn));
        if (dim == 1) k.ic_bn = c.ic_bn;
        if (dim == 2) k.reg_n = c.reg_n;
        if (dim == 3) k.unroll_ker = c.unroll_ker;
        if (b.s.groups > 1) k.ic_bn = k.oc_bn;
        if (std::find(cands.begin(), cands.end(), k) == cands.end()) continue;
        const double t = eval(k);
        if (t < cur_t) cur = k, cur_t = t;
      }
      best = cur;
    }
  *tried = static_cast<int>(seen.size());
  return best;
}

struct GemmLayer {
  const char* name;
  int64_t batch, M, N, K;
};

// bert-base at sequence 128 (hidden 768, 12 heads of 64, FFN 3072): batch 1 (M = 128), then its
// weight GEMMs at batch 8 (M = 1024).
const GemmLayer kBertGemms[] = {
    {"qkv proj 128x768 * 768x2304", 1, 128, 2304, 768},
    {"attn out 128x768 * 768x768", 1, 128, 768, 768},
    {"ffn up 128x768 * 768x3072", 1, 128, 3072, 768},
    {"ffn down 128x3072 * 3072x768", 1, 128, 768, 3072},
    {"qkv proj 1024x768 * 768x2304", 1, 1024, 2304, 768},
    {"attn out 1024x768 * 768x768", 1, 1024, 768, 768},
    {"ffn up 1024x768 * 768x3072", 1, 1024, 3072, 768},
    {"ffn down 1024x3072 * 3072x768", 1, 1024, 768, 3072},
    {"scores 12 x 128x64 * 64x128", 12, 128, 128, 64},
    {"context 12 x 128x128 * 128x64", 12, 128, 64, 128},
};

// 64-byte aligned floats for a packed weight.
struct Packed {
  float* p = nullptr;
  explicit Packed(size_t n) : p(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64))) {}
  ~Packed() { std::free(p); }
};

// sgemm as the library runs a runtime B (packed per call) and sgemm_packed_b as compiled models
// run a linear layer (weight packed once at compile time, mm_packed).
void gemm_section(dnnfusion::runtime::ThreadPool& pool, double peak, std::mt19937_64& rng) {
  namespace K = dnnfusion::kernels;
  std::printf("\n# bert-base GEMMs (seq 128; batch 1, then the weight GEMMs at batch 8) with bias epilogue, median time: kernels::sgemm/sgemm_batched\n"
              "# (B packed per call) and kernels::sgemm_packed_b (weight packed once, as compiled models run them)\n");
  std::printf("# cold: packed, but a different weight copy per call (600 MB in all), as in a model; amx: the\n"
              "# bf16x6 GEMM (kernels::sgemm_bf16x6_packed_b, fp32 accuracy from six bf16 products), where the CPU has AMX\n");
  const bool amx = K::bf16x6_available();
  std::printf("%-32s %9s | %8s %5s | %8s %5s | %8s %5s | %8s %5s | %8s %5s\n", "layer", "MFLOP", "GFLOP/s", "%pk", "packed",
              "%pk", "cold", "%pk", "amx", "%pk", "amx cold", "%pk");
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  // Flop-weighted sums per bert batch size (index 0: batch 1, 1: batch 8), as separate summaries.
  double flops_all[2] = {}, t_all[2] = {}, t_packed_all[2] = {}, t_cold_all[2] = {}, t_amx_all[2] = {},
         t_amx_cold_all[2] = {};
  const int nr = K::sgemm_panel_width();
  for (const auto& L : kBertGemms) {
    const int bi = L.M > 128 ? 1 : 0;
    std::vector<float> a(static_cast<size_t>(L.batch * L.M * L.K)), b(static_cast<size_t>(L.batch * L.K * L.N)),
        bias(static_cast<size_t>(L.N)), c(static_cast<size_t>(L.batch * L.M * L.N));
    for (auto* v : {&a, &b, &bias})
      for (auto& e : *v) e = d(rng);
    K::GemmEpilogue ep;
    ep.bias = bias.data();
    ep.bias_mode = K::GemmEpilogue::Bias::PerCol;
    const double t = time_median([&] {
      if (L.batch == 1)
        K::sgemm(L.M, L.N, L.K, {a.data(), L.K, 1}, {b.data(), L.N, 1}, c.data(), L.N, ep, pool);
      else
        K::sgemm_batched(L.batch, L.M, L.N, L.K, {a.data(), L.K, 1}, L.M * L.K, {b.data(), L.N, 1}, L.K * L.N,
                         c.data(), L.N, L.M * L.N, ep, pool);
    });
    double tcold = t;
    double tp = t;  // attention's batched GEMMs multiply two activations: nothing to pre-pack
    // Hot (one packed weight) and cold (a different copy per call: a model streams each layer's
    // weight from memory once per call) times of run(packed weight).
    auto hot_and_cold = [&](const Packed& pk, size_t floats, const auto& run, double* hot, double* cold_time) {
      *hot = time_median([&] { run(pk.p); });
      const int copies = static_cast<int>(std::max<size_t>(4, (size_t(600) << 20) / (floats * 4)));
      std::vector<std::unique_ptr<Packed>> cold;
      for (int i = 0; i < copies; ++i) {
        cold.emplace_back(new Packed(floats));
        std::memcpy(cold.back()->p, pk.p, floats * 4);
      }
      int which = 0;
      *cold_time = time_median([&] {
        run(cold[which]->p);
        which = (which + 1) % copies;
      });
    };
    if (L.batch == 1) {
      const size_t fl = static_cast<size_t>(K::sgemm_packed_b_floats(L.K, L.N, nr));
      Packed pk(fl);
      K::sgemm_pack_b(L.K, L.N, {b.data(), L.N, 1}, nr, pk.p);
      hot_and_cold(pk, fl, [&](const float* w) {
        K::sgemm_packed_b(L.M, L.N, L.K, {a.data(), L.K, 1}, w, nr, c.data(), L.N, ep, pool);
      }, &tp, &tcold);
    }
    double tamx = tp, tamx_cold = tcold;
    if (L.batch == 1 && amx) {
      const size_t fl = static_cast<size_t>(K::bf16x6_packed_b_floats(L.K, L.N));
      Packed pk(fl);
      K::bf16x6_pack_b(L.K, L.N, {b.data(), L.N, 1}, pk.p);
      hot_and_cold(pk, fl, [&](const float* w) {
        K::sgemm_bf16x6_packed_b(L.M, L.N, L.K, {a.data(), L.K, 1}, w, c.data(), L.N, ep, pool);
      }, &tamx, &tamx_cold);
    }
    const double flops = 2.0 * L.batch * L.M * L.N * L.K;
    auto rate = [&](double tt) { return flops / tt * 1e-9; };
    auto pct = [&](double tt) { return peak > 0 ? 100 * rate(tt) / peak : 0.0; };
    std::printf("%-32s %9.1f | %8.1f %5.1f | %8.1f %5.1f | %8.1f %5.1f | %8.1f %5.1f | %8.1f %5.1f\n", L.name, flops * 1e-6,
                rate(t), pct(t), rate(tp), pct(tp), rate(tcold), pct(tcold), rate(tamx), pct(tamx), rate(tamx_cold),
                pct(tamx_cold));
    t_amx_all[bi] += tamx;
    t_amx_cold_all[bi] += tamx_cold;
    flops_all[bi] += flops;
    t_all[bi] += t;
    t_packed_all[bi] += tp;
    t_cold_all[bi] += tcold;
  }
  for (int bi = 0; bi < 2; ++bi) {
    const double f = flops_all[bi];
    auto pct = [&](double t) { return peak > 0 ? 100 * f / t * 1e-9 / peak : 0.0; };
    std::printf("# bert-base GEMMs at batch %d, flop-weighted: %.1f GFLOP/s = %.1f%% of peak (B packed per call); "
                "%.1f GFLOP/s = %.1f%% (weights packed once); %.1f GFLOP/s = %.1f%% (packed, cold weights)\n",
                bi ? 8 : 1, f / t_all[bi] * 1e-9, pct(t_all[bi]), f / t_packed_all[bi] * 1e-9, pct(t_packed_all[bi]),
                f / t_cold_all[bi] * 1e-9, pct(t_cold_all[bi]));
    if (amx)
      std::printf("# ... the AMX bf16x6 GEMM: %.1f GFLOP/s = %.1f%% of the fp32 peak (hot weights), %.1f GFLOP/s = %.1f%% "
                  "(cold); attention's batched GEMMs stay fp32\n",
                  f / t_amx_all[bi] * 1e-9, pct(t_amx_all[bi]), f / t_amx_cold_all[bi] * 1e-9, pct(t_amx_cold_all[bi]));
  }
  {
    // bert-base's whole attention (kernels::sdpa: scores, softmax, P v) on [1, 128, 12, 64]
    // q/k/v as the fused QKV projection leaves them (heads interleaved along a row).
    const int64_t H = 12, L = 128, D = 64;
    std::vector<float> qkv(static_cast<size_t>(L * 3 * H * D)), out(static_cast<size_t>(L * H * D));
    for (auto& e : qkv) e = d(rng);
    const int64_t rs = 3 * H * D;
    const K::Tensor4 q{qkv.data(), 0, D, rs, 1}, k{qkv.data() + H * D, 0, D, rs, 1},
        v{qkv.data() + 2 * H * D, 0, D, rs, 1};
    Packed scratch(K::sdpa_scratch_bytes(L, L, pool.num_threads()) / sizeof(float));
    const int64_t os[3] = {L * H * D, D, H * D};
    const double ta = time_median([&] {
      K::sdpa(1, H, L, L, D, D, q, k, v, {}, false, 0.125f, out.data(), nullptr, scratch.p, pool, os);
    });
    const double fa = 4.0 * H * L * L * D;
    std::printf("%-32s %9.1f | %8.1f %5.1f   (kernels::sdpa, %.3f ms)\n", "attention 12 heads 128x128x64", fa * 1e-6,
                fa / ta * 1e-9, peak > 0 ? 100 * fa / ta * 1e-9 / peak : 0.0, ta * 1e3);
  }
  // Classifier layers at batch 1 are matrix-vector products: bound by reading the weight.
  struct Gemv {
    const char* name;
    int64_t K, N;
  };
  const Gemv gemvs[] = {{"vgg16 fc1 1x25088 * 25088x4096", 25088, 4096},
                        {"vgg16 fc2 1x4096 * 4096x4096", 4096, 4096},
                        {"resnet50 fc 1x2048 * 2048x1000", 2048, 1000}};
  std::printf("\n# batch-1 classifier layers (GEMV), median time, weight GB/s: B packed per call vs packed once\n");
  std::printf("%-32s %9s | %8s %6s | %8s %6s\n", "layer", "MB", "ms", "GB/s", "packed", "GB/s");
  for (const auto& G : gemvs) {
    std::vector<float> a(static_cast<size_t>(G.K)), b(static_cast<size_t>(G.K * G.N)), c(static_cast<size_t>(G.N));
    for (auto* v : {&a, &b})
      for (auto& e : *v) e = d(rng);
    const double t = time_median([&] { K::sgemm(1, G.N, G.K, {a.data(), G.K, 1}, {b.data(), G.N, 1}, c.data(), G.N, {}, pool); });
    Packed pk(static_cast<size_t>(K::sgemm_packed_b_floats(G.K, G.N, nr)));
    K::sgemm_pack_b(G.K, G.N, {b.data(), G.N, 1}, nr, pk.p);
    const double tp = time_median([&] { K::sgemm_packed_b(1, G.N, G.K, {a.data(), G.K, 1}, pk.p, nr, c.data(), G.N, {}, pool); });
    const double mb = 4.0 * G.K * G.N * 1e-6;
    std::printf("%-32s %9.1f | %8.3f %6.1f | %8.3f %6.1f\n", G.name, mb, t * 1e3, mb / t * 1e-3, tp * 1e3, mb / tp * 1e-3);
  }
}

// The winograd section: per layer, median time of direct / F2 / F4 and their max error relative
// to max |y_ref|.
void winograd_section(dnnfusion::runtime::ThreadPool& pool, std::mt19937_64& rng) {
  auto at = [](int64_t N, int64_t C, int64_t HW, int64_t K) {
    return Conv2dShape{N, C, HW, HW, K, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  };
  const Layer layers[] = {
      {"resnet 64 @56", at(1, 64, 56, 64)},         {"resnet 128 @28", at(1, 128, 28, 128)},
      {"resnet 256 @14", at(1, 256, 14, 256)},      {"resnet 512 @7", at(1, 512, 7, 512)},
      {"vgg 64 @224", at(1, 64, 224, 64)},          {"vgg 128 @112", at(1, 128, 112, 128)},
      {"vgg 256 @56", at(1, 256, 56, 256)},         {"vgg 512 @28", at(1, 512, 28, 512)},
      {"vgg 512 @14", at(1, 512, 14, 512)},         {"densenet 128->32 @56", at(1, 128, 56, 32)},
      {"densenet 128->32 @14", at(1, 128, 14, 32)}, {"densenet 128->32 @7", at(1, 128, 7, 32)},
      {"resnet b8 64 @56", at(8, 64, 56, 64)},      {"resnet b8 256 @14", at(8, 256, 14, 256)},
      {"resnet b8 512 @7", at(8, 512, 7, 512)},
  };
  const Isa isa = dnnfusion::kernels::active_isa();
  std::printf("# stride-1 3x3 convs, ReLU epilogue, bias; median time; same blocks for all three; "
              "'*' = conv_winograd_tile's pick; err = max|y - y_nchw| / max|y_nchw|\n");
  std::printf("%-24s %8s | %9s %8s | %9s %6s %8s | %9s %6s %8s\n", "layer", "MFLOP", "direct us", "err", "F2 us",
              "x", "err", "F4 us", "x", "err");
  for (const auto& L : layers) {
    Bench b(L.s, pool, rng);
    b.time_nchw();  // fills y_ref
    double mag = 0;
    for (float v : b.y_ref) mag = std::max(mag, static_cast<double>(std::fabs(v)));
    ConvNchwcKnobs k = dnnfusion::kernels::conv_nchwc_default_knobs(L.s, isa);
    double t[3], e[3];
    for (int i = 0; i < 3; ++i) {
      k.winograd = i == 0 ? 0 : 2 * i;
      t[i] = b.time_nchwc(k, &e[i]);
      e[i] /= mag;
    }
    const int pick = dnnfusion::kernels::conv_winograd_tile(L.s);
    std::printf("%-24s %8.1f | %8.1f%s %8.1e | %8.1f%s %5.2fx %8.1e | %8.1f%s %5.2fx %8.1e\n", L.name, b.flops * 1e-6,
                t[0] * 1e6, pick == 0 ? "*" : " ", e[0], t[1] * 1e6, pick == 2 ? "*" : " ", t[0] / t[1], e[1],
                t[2] * 1e6, pick == 4 ? "*" : " ", t[0] / t[2], e[2]);
    std::fflush(stdout);
  }
}

void mobile_section(dnnfusion::runtime::ThreadPool& pool, double peak, std::mt19937_64& rng) {
  std::printf("# mobile-network layers, ReLU epilogue, bias, default knobs, median time\n");
  std::printf("%-24s %5s %9s | %9s %8s %5s %7s %-18s | %8s\n", "layer", "batch", "MFLOP", "us", "GFLOP/s", "%pk",
              "GB/s", "knobs", "maxerr");
  const Isa isa = dnnfusion::kernels::active_isa();
  for (const auto& L : kMobileLayers)
    for (int64_t n : {1, 8}) {
      const Conv2dShape s = batched(L.s, n);
      Bench b(s, pool, rng);
      b.reference();
      const ConvNchwcKnobs k = dnnfusion::kernels::conv_nchwc_default_knobs(s, isa);
      double err = 0;
      const double t = b.time_nchwc(k, &err);
      const double bytes = 4.0 * (s.N * s.C * s.H * s.W + s.N * s.K * s.OH() * s.OW() +
                                  s.K * (s.C / s.groups) * s.R * s.S);
      const double gf = b.flops / t * 1e-9;
      std::printf("%-24s %5lld %9.1f | %9.1f %8.1f %5.1f %7.1f %-18s | %8.1e\n", L.name, static_cast<long long>(n),
                  b.flops * 1e-6, t * 1e6, gf, peak > 0 ? 100 * gf / peak : 0.0, bytes / t * 1e-9,
                  knobs_str(k).c_str(), err);
      std::fflush(stdout);
    }
}

// The expand (1x1 C -> M) and depthwise (R x R, stride) halves of the mobile networks' inverted
// residual blocks at batch 1: mobilenet_v2 (3x3) and efficientnet_b0 / mobilenet_v3 (5x5).
struct ExpandDwLayer {
  const char* name;
  int64_t C, HW, M, R, stride;
};
const ExpandDwLayer kExpandDwLayers[] = {
    {"16->96 @112, dw 3x3/2", 16, 112, 96, 3, 2},  {"24->144 @56, dw 3x3", 24, 56, 144, 3, 1},
    {"24->144 @56, dw 3x3/2", 24, 56, 144, 3, 2},  {"32->192 @28, dw 3x3", 32, 28, 192, 3, 1},
    {"64->384 @14, dw 3x3", 64, 14, 384, 3, 1},    {"160->960 @7, dw 3x3", 160, 7, 960, 3, 1},
    {"40->240 @28, dw 5x5", 40, 28, 240, 5, 1},    {"112->672 @14, dw 5x5", 112, 14, 672, 5, 1},
    {"192->1152 @7, dw 5x5", 192, 7, 1152, 5, 1},
};

// Zeroed 64-byte aligned floats (NCHW[x]c tensors and packed weights are, in the runtime).
struct AlignedFloats {
  dnnfusion::kernels::AlignedBuffer<float> buf;
  float* p;
  explicit AlignedFloats(int64_t n) : p(buf.get(static_cast<size_t>(n))) { std::fill(p, p + n, 0.f); }
  float* get() const { return p; }
};

void expand_dw_section(dnnfusion::runtime::ThreadPool& pool, double peak, std::mt19937_64& rng) {
  namespace K = dnnfusion::kernels;
  const Isa isa = K::active_isa();
  std::printf("# fused expand + relu6 + depthwise + relu6 (conv2d_nchwc_expand_dw) vs the two convs unfused, batch 1\n");
  std::printf("%-24s %4s %7s | %9s %8s %5s | %9s %8s | %6s %8s\n", "layer", "b", "MFLOP", "fused us", "GFLOP/s",
              "%pk", "unfused", "GFLOP/s", "ratio", "maxdiff");
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (const auto& L : kExpandDwLayers)
    for (int b : {32, 16}) {
      if (isa != Isa::Avx512 && b != 16) continue;
      const Conv2dShape e{1, L.C, L.HW, L.HW, L.M, 1, 1, 1, 1, 0, 0, 1, 1, 1};
      const Conv2dShape dw{1, L.M, L.HW, L.HW, L.M, L.R, L.R, L.stride, L.stride, L.R / 2, L.R / 2, 1, 1, L.M};
      ConvNchwcKnobs kd = K::conv_nchwc_default_knobs(dw, isa), ke = K::conv_nchwc_default_knobs(e, isa);
      kd.oc_bn = kd.ic_bn = ke.oc_bn = b;
      kd.reg_n = std::min(kd.reg_n, K::conv_nchwc_max_reg_n(isa, b));
      ke.reg_n = std::min(ke.reg_n, K::conv_nchwc_max_reg_n(isa, b));
      AlignedFloats x(K::nchwc_floats(1, L.C, L.HW, L.HW, ke.ic_bn)), mid(K::nchwc_floats(1, L.M, L.HW, L.HW, b)),
          y(K::nchwc_floats(1, L.M, dw.OH(), dw.OW(), b)), y_ref(K::nchwc_floats(1, L.M, dw.OH(), dw.OW(), b)),
          pe(K::conv_nchwc_packed_weight_floats(e, ke)), pd(K::conv_nchwc_packed_weight_floats(dw, kd));
      std::vector<float> we(static_cast<size_t>(L.M * L.C)), wd(static_cast<size_t>(L.M * L.R * L.R)),
          be(static_cast<size_t>(L.M)), bd(static_cast<size_t>(L.M));
      for (auto* v : {&we, &wd, &be, &bd})
        for (auto& f : *v) f = d(rng);
      // Real channels only: the padded lanes of the last input block stay 0.
      std::vector<float> x_nchw(static_cast<size_t>(L.C * L.HW * L.HW));
      for (auto& f : x_nchw) f = d(rng);
      K::nchw_to_nchwc(x_nchw.data(), 1, L.C, L.HW, L.HW, ke.ic_bn, x.get(), pool);
      K::conv_nchwc_pack_weight(e, ke, we.data(), pe.get());
      K::conv_nchwc_pack_weight(dw, kd, wd.data(), pd.get());
      const double t_fused = time_median([&] {
        K::conv2d_nchwc_expand_dw(e, ke, dw, kd, x.get(), pe.get(), be.data(), K::ExpandAct::Relu6, pd.get(),
                                  bd.data(), K::ExpandAct::Relu6, y.get(), nullptr, pool);
      });
      const double t_unfused = time_median([&] {
        K::conv2d_nchwc(e, ke, x.get(), pe.get(), be.data(), nullptr, Activation::Relu6, mid.get(), pool);
        K::conv2d_nchwc(dw, kd, mid.get(), pd.get(), bd.data(), nullptr, Activation::Relu6, y_ref.get(), pool);
      });
      double diff = 0;
      const int64_t yn = K::nchwc_floats(1, L.M, dw.OH(), dw.OW(), b);
      for (int64_t i = 0; i < yn; ++i)
        diff = std::max(diff, static_cast<double>(std::fabs(y.get()[i] - y_ref.get()[i])));
      const double flops = 2.0 * L.HW * L.HW * L.C * L.M + 2.0 * dw.OH() * dw.OW() * L.M * L.R * L.R;
      std::printf("%-24s %4d %7.1f | %9.1f %8.1f %5.1f | %9.1f %8.1f | %5.2fx %8.1e\n", L.name, b, flops * 1e-6,
                  t_fused * 1e6, flops / t_fused * 1e-9, peak > 0 ? 100 * flops / t_fused * 1e-9 / peak : 0.0,
                  t_unfused * 1e6, flops / t_unfused * 1e-9, t_unfused / t_fused, diff);
      std::fflush(stdout);
    }
}

// ResNet-50's direct (not Winograd) convs, direct kernel against the AMX bf16x6 GEMM
// (conv_bf16x6.h: 1x1 stride-1 rows in place, the others as implicit GEMMs over gathered taps),
// same blocks, batch 1 and 8; "taken" says whether layout/use_amx_convs would switch the layer.
void amx_section(dnnfusion::runtime::ThreadPool& pool, std::mt19937_64& rng) {
  if (!dnnfusion::kernels::bf16x6_available()) {
    std::printf("# amx: this CPU or OS offers no AMX-BF16 (or DNNFUSION_AMX=0)\n");
    return;
  }
  std::printf("# ResNet-50's direct convs, bias, default knobs: direct NCHW[x]c kernel vs the AMX bf16x6 GEMM, median time\n");
  std::printf("%-24s %5s | %9s %8s | %9s %8s %6s | %8s %8s %s\n", "layer", "batch", "direct us", "GFLOP/s", "amx us",
              "GFLOP/s", "ratio", "err dir", "err amx", "taken");
  const Layer layers[] = {
      {"1x1 64->64 @56", conv(64, 56, 64, 1, 1, 0)},         {"1x1 64->256 @56", conv(64, 56, 256, 1, 1, 0)},
      {"1x1 256->64 @56", conv(256, 56, 64, 1, 1, 0)},       {"1x1 256->128 @56", conv(256, 56, 128, 1, 1, 0)},
      {"1x1 128->512 @28", conv(128, 28, 512, 1, 1, 0)},     {"1x1 512->128 @28", conv(512, 28, 128, 1, 1, 0)},
      {"1x1 512->256 @28", conv(512, 28, 256, 1, 1, 0)},     {"1x1 256->1024 @14", conv(256, 14, 1024, 1, 1, 0)},
      {"1x1 1024->256 @14", conv(1024, 14, 256, 1, 1, 0)},   {"1x1 1024->512 @14", conv(1024, 14, 512, 1, 1, 0)},
      {"1x1 512->2048 @7", conv(512, 7, 2048, 1, 1, 0)},     {"1x1 2048->512 @7", conv(2048, 7, 512, 1, 1, 0)},
      {"3x3/2 128 @56", conv(128, 56, 128, 3, 2, 1)},        {"3x3/2 256 @28", conv(256, 28, 256, 3, 2, 1)},
      {"3x3/2 512 @14", conv(512, 14, 512, 3, 2, 1)},        {"1x1/2 256->512 @56", conv(256, 56, 512, 1, 2, 0)},
      {"1x1/2 512->1024 @28", conv(512, 28, 1024, 1, 2, 0)}, {"1x1/2 1024->2048 @14", conv(1024, 14, 2048, 1, 2, 0)},
  };
  for (int64_t n : {1, 8}) {
    double t_dir = 0, t_amx = 0, t_taken = 0;
    for (const auto& L : layers) {
      const Conv2dShape s = batched(L.s, n);
      Bench b(s, pool, rng);
      b.reference();
      const ConvNchwcKnobs k = dnnfusion::kernels::conv_nchwc_default_knobs(s);
      ConvNchwcKnobs ka = k;
      ka.amx = true;
      double e_dir = 0, e_amx = 0;
      const double td = b.time_nchwc(k, &e_dir), ta = b.time_nchwc(ka, &e_amx);
      const bool taken = dnnfusion::layout::amx_conv_pays_off(s);
      t_dir += td;
      t_amx += ta;
      t_taken += taken ? ta : td;
      std::printf("%-24s %5lld | %9.1f %8.1f | %9.1f %8.1f %5.2fx | %8.1e %8.1e %s\n", L.name,
                  static_cast<long long>(n), td * 1e6, b.flops / td * 1e-9, ta * 1e6, b.flops / ta * 1e-9, td / ta,
                  e_dir, e_amx, taken ? "yes" : "no");
      std::fflush(stdout);
    }
    std::printf("# batch %lld, the layers once each: direct %.2f ms, amx %.2f ms (%.2fx), as the pass "
                "chooses %.2f ms (%.2fx)\n", static_cast<long long>(n), t_dir * 1e3, t_amx * 1e3, t_dir / t_amx,
                t_taken * 1e3, t_dir / t_taken);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  dnnfusion::runtime::ThreadPool pool(threads);
  const Isa isa = dnnfusion::kernels::active_isa();
  const char* how = "";
  const double peak = measure_peak(pool, &how);
  std::printf("# conv kernel efficiency: conv2d_nchw (im2col GEMM) vs conv2d_nchwc (NCHW[x]c direct)\n");
  std::printf("# machine: %s, %d threads, kernels ISA %s\n", cpu_model().c_str(), threads,
              dnnfusion::kernels::isa_name(isa));
  std::printf("# measured fp32 FMA peak (%s, %d threads): %.1f GFLOP/s\n", how, threads, peak);
  if (argc > 2 && std::string(argv[2]) == "gemm") {  // `dnnfusion_conv_bench T gemm`: the GEMM table only
    std::mt19937_64 grng(12345);
    gemm_section(pool, peak, grng);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "amx") {
    std::mt19937_64 arng(12345);
    amx_section(pool, arng);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "mobile") {
    std::mt19937_64 mrng(12345);
    mobile_section(pool, peak, mrng);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "expand_dw") {
    std::mt19937_64 erng(12345);
    expand_dw_section(pool, peak, erng);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "winograd") {
    std::mt19937_64 wrng(12345);
    winograd_section(pool, wrng);
    return 0;
  }
  std::printf("# batch 1, ReLU epilogue, bias; median time; layout transforms / weight packing untimed\n");
  std::printf("%-28s %9s | %8s %5s | %8s %5s | %8s %5s %-18s %4s | %8s\n", "layer", "MFLOP",
              "nchw", "%pk", "nchwc-df", "%pk", "nchwc-tn", "%pk", "tuned knobs", "#try", "maxerr");
  std::mt19937_64 rng(12345);
  double sum3_def = 0, sum3_tun = 0, sum3_nchw = 0;
  int n3 = 0;
  double tot_nchw = 0, tot_def = 0, tot_tun = 0, tot_flops = 0;
  for (const auto& L : kLayers) {
    Bench b(L.s, pool, rng);
    const double t_nchw = b.time_nchw();
    double err_def = 0, err_tun = 0, t_tun = 0;
    const double t_def =
        b.time_nchwc(dnnfusion::kernels::conv_nchwc_default_knobs(L.s, isa), &err_def);
    int tried = 0;
    const ConvNchwcKnobs best = local_search(b, &t_tun, &err_tun, &tried);
    // The search's best time is the minimum of many noisy medians (biased low): re-time it.
    t_tun = b.time_nchwc(best, &err_tun);
    auto gf = [&](double t) { return b.flops / t * 1e-9; };
    auto pk = [&](double t) { return peak > 0 ? 100.0 * gf(t) / peak : 0.0; };
    std::printf("%-28s %9.1f | %8.1f %5.1f | %8.1f %5.1f | %8.1f %5.1f %-18s %4d | %8.1e\n", L.name,
                b.flops * 1e-6, gf(t_nchw), pk(t_nchw), gf(t_def), pk(t_def), gf(t_tun), pk(t_tun),
                knobs_str(best).c_str(), tried, std::max(err_def, err_tun));
    std::fflush(stdout);
    if (L.s.R == 3) {
      sum3_nchw += pk(t_nchw);
      sum3_def += pk(t_def);
      sum3_tun += pk(t_tun);
      ++n3;
    }
    tot_nchw += t_nchw;
    tot_def += t_def;
    tot_tun += t_tun;
    tot_flops += b.flops;
  }
  std::printf("# average %% of peak over the %d 3x3 layers: nchw %.1f%%, nchwc default %.1f%%, "
              "nchwc tuned %.1f%%\n",
              n3, sum3_nchw / n3, sum3_def / n3, sum3_tun / n3);
  std::printf("# all %zu layers once each: nchw %.2f ms (%.1f%% pk), nchwc default %.2f ms "
              "(%.1f%% pk), nchwc tuned %.2f ms (%.1f%% pk)\n",
              sizeof(kLayers) / sizeof(kLayers[0]), tot_nchw * 1e3,
              100 * tot_flops / tot_nchw * 1e-9 / peak, tot_def * 1e3,
              100 * tot_flops / tot_def * 1e-9 / peak, tot_tun * 1e3,
              100 * tot_flops / tot_tun * 1e-9 / peak);
  gemm_section(pool, peak, rng);
  return 0;
}
