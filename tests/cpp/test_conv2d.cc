// conv2d_nchw against the plain reference on every ISA the CPU has, serial and two threads:
// 1x1 (pointwise GEMM path), 3x3 s1/s2 padded, 7x7 s2, depthwise (multiplier 1 and 2), grouped,
// dilated, asymmetric, with/without bias, each activation, N = 1 and 4, plus random shapes.
#include <gtest/gtest.h>

#include <chrono>

#include "common/error.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using kernels::Activation;
using kernels::Conv2dShape;
using kernels::SerialParallel;
using testing::ThreadParallel;

struct ConvCase {
  const char* name;
  Conv2dShape s;
};

void check_conv(std::mt19937_64& rng, const Conv2dShape& s, bool with_bias, Activation act,
                const kernels::Parallel& par) {
  SCOPED_TRACE(::testing::Message() << "N=" << s.N << " C=" << s.C << " H=" << s.H << " W=" << s.W
                                    << " K=" << s.K << " R=" << s.R << " S=" << s.S << " stride="
                                    << s.stride_h << "x" << s.stride_w << " pad=" << s.pad_h << "x"
                                    << s.pad_w << " dil=" << s.dil_h << "x" << s.dil_w
                                    << " groups=" << s.groups << " bias=" << with_bias
                                    << " act=" << int(act) << " threads=" << par.num_threads());
  const auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
  const auto w = testing::random_vec(rng, static_cast<size_t>(s.K * (s.C / s.groups) * s.R * s.S));
  const auto bias = testing::random_vec(rng, static_cast<size_t>(s.K));
  const size_t ysize = static_cast<size_t>(s.N * s.K * s.OH() * s.OW());
  std::vector<float> y(ysize, std::numeric_limits<float>::quiet_NaN()), r(ysize);
  std::vector<unsigned char> scratch_store(kernels::conv2d_scratch_bytes(s, par.num_threads()) + 64);
  void* scratch = scratch_store.data() + (64 - reinterpret_cast<uintptr_t>(scratch_store.data()) % 64);
  reference::ref_conv2d_nchw(s, x.data(), w.data(), with_bias ? bias.data() : nullptr, r.data(), act);
  kernels::conv2d_nchw(s, x.data(), w.data(), with_bias ? bias.data() : nullptr, y.data(), act,
                       scratch, par);
  EXPECT_TRUE(testing::all_close(y.data(), r.data(), ysize));
}

Conv2dShape shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                  int64_t stride, int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  return {N, C, H, W, K, R, S, stride, stride, pad, pad, dil, dil, groups};
}

TEST(Conv2d, NamedVariants) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 10);
  SerialParallel serial;
  ThreadParallel threads(2);
  const ConvCase cases[] = {
      {"1x1", shape(1, 32, 9, 11, 48, 1, 1, 1, 0)},
      {"1x1 N=4", shape(4, 19, 7, 7, 13, 1, 1, 1, 0)},
      {"1x1 s2", shape(2, 16, 10, 9, 24, 1, 1, 2, 0)},
      {"1x1 pad1", shape(1, 8, 5, 6, 12, 1, 1, 1, 1)},
      {"3x3 s1 p1", shape(1, 16, 14, 13, 32, 3, 3, 1, 1)},
      {"3x3 s1 p1 N=4", shape(4, 5, 8, 8, 7, 3, 3, 1, 1)},
      {"3x3 s2 p1", shape(2, 12, 15, 16, 20, 3, 3, 2, 1)},
      {"3x3 s1 p0", shape(1, 3, 6, 40, 5, 3, 3, 1, 0)},
      {"7x7 s2 p3", shape(1, 3, 32, 30, 16, 7, 7, 2, 3)},
      {"7x7 s2 p3 N=4", shape(4, 3, 17, 17, 8, 7, 7, 2, 3)},
      {"depthwise 3x3", shape(2, 24, 12, 12, 24, 3, 3, 1, 1, 1, 24)},
      {"depthwise 3x3 s2", shape(1, 16, 13, 11, 16, 3, 3, 2, 1, 1, 16)},
      {"depthwise 5x5 dil2", shape(1, 8, 16, 16, 8, 5, 5, 1, 4, 2, 8)},
      {"depthwise multiplier 2", shape(2, 6, 9, 9, 12, 3, 3, 1, 1, 1, 6)},
      {"grouped 4", shape(2, 16, 10, 10, 32, 3, 3, 1, 1, 1, 4)},
      {"grouped 2 1x1", shape(1, 8, 6, 6, 12, 1, 1, 1, 0, 1, 2)},
      {"dilated 3x3 d2", shape(1, 8, 20, 20, 10, 3, 3, 1, 2, 2)},
      {"dilated 3x3 d3 s2", shape(2, 4, 23, 21, 6, 3, 3, 2, 3, 3)},
      {"single pixel", shape(1, 7, 1, 1, 9, 1, 1, 1, 0)},
      {"kernel = image", shape(3, 4, 5, 5, 6, 5, 5, 1, 0)},
  };
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    int variant = 0;
    for (const auto& c : cases) {
      SCOPED_TRACE(c.name);
      for (bool bias : {false, true}) {
        const Activation act = static_cast<Activation>(variant++ % 3);
        check_conv(rng, c.s, bias, act, serial);
        check_conv(rng, c.s, bias, act, threads);
      }
    }
    // Asymmetric stride/pad/dilation.
    check_conv(rng, {2, 6, 11, 14, 10, 3, 2, 2, 1, 1, 0, 1, 2, 2}, true, Activation::Relu, threads);
  }
}

TEST(Conv2d, RandomShapes) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 11);
  ThreadParallel threads(2);
  SerialParallel serial;
  for (kernels::Isa isa : testing::isas_to_test()) {
    testing::IsaGuard guard(isa);
    SCOPED_TRACE(kernels::isa_name(isa));
    for (int t = 0; t < 30; ++t) {
      const int64_t groups = testing::rand_int(rng, 1, 3);
      Conv2dShape s{};
      s.N = testing::rand_int(rng, 1, 3);
      s.C = groups * testing::rand_int(rng, 1, 6);
      s.K = groups * testing::rand_int(rng, 1, 20);
      s.groups = groups;
      s.R = testing::rand_int(rng, 1, 4);
      s.S = testing::rand_int(rng, 1, 4);
      s.stride_h = testing::rand_int(rng, 1, 3);
      s.stride_w = testing::rand_int(rng, 1, 3);
      s.dil_h = testing::rand_int(rng, 1, 2);
      s.dil_w = testing::rand_int(rng, 1, 2);
      s.pad_h = testing::rand_int(rng, 0, 2);
      s.pad_w = testing::rand_int(rng, 0, 2);
      s.H = testing::rand_int(rng, s.dil_h * (s.R - 1) + 1, 20);
      s.W = testing::rand_int(rng, s.dil_w * (s.S - 1) + 1, 20);
      check_conv(rng, s, t % 2 == 0, static_cast<Activation>(t % 3),
                 t % 2 ? serial : static_cast<const kernels::Parallel&>(threads));
    }
  }
}

TEST(Conv2d, InvalidShapesThrow) {
  SerialParallel serial;
  float x[64] = {}, w[64] = {}, y[64] = {};
  auto run = [&](const Conv2dShape& s) {
    kernels::conv2d_nchw(s, x, w, nullptr, y, Activation::None, nullptr, serial);
  };
  EXPECT_THROW(run(shape(1, 3, 4, 4, 4, 1, 1, 1, 0, 1, 2)), Error);   // C % groups != 0
  EXPECT_THROW(run(shape(1, 4, 4, 4, 3, 1, 1, 1, 0, 1, 2)), Error);   // K % groups != 0
  EXPECT_THROW(run(shape(1, 2, 2, 2, 2, 5, 5, 1, 0)), Error);         // kernel larger than input
  EXPECT_THROW(run(shape(1, 2, 4, 4, 2, 1, 1, 0, 0)), Error);         // stride 0
  EXPECT_THROW(run(shape(1, 2, 4, 4, 2, 1, 1, 1, -1)), Error);        // negative pad
  EXPECT_THROW(run(shape(1, 2, 4, 4, 2, 3, 3, 1, 1, 0)), Error);      // dilation 0
  EXPECT_THROW(kernels::conv2d_scratch_bytes(shape(1, 3, 4, 4, 4, 1, 1, 1, 0, 1, 2), 1), Error);
}

TEST(BenchmarkInfo, Conv2dResnetLayers) {
  // Prints GFLOP/s of ResNet-50-like layers (N=1, two threads); asserts only correctness.
  std::mt19937_64 rng(testing::test_seed() + 12);
  ThreadParallel threads(2);
  const ConvCase cases[] = {
      {"conv1 7x7 s2 3->64 224", shape(1, 3, 224, 224, 64, 7, 7, 2, 3)},
      {"3x3 64->64 56", shape(1, 64, 56, 56, 64, 3, 3, 1, 1)},
      {"1x1 64->256 56", shape(1, 64, 56, 56, 256, 1, 1, 1, 0)},
      {"1x1 256->64 56", shape(1, 256, 56, 56, 64, 1, 1, 1, 0)},
      {"3x3 128->128 28", shape(1, 128, 28, 28, 128, 3, 3, 1, 1)},
      {"3x3 256->256 14", shape(1, 256, 14, 14, 256, 3, 3, 1, 1)},
      {"3x3 512->512 7", shape(1, 512, 7, 7, 512, 3, 3, 1, 1)},
      {"1x1 s2 512->1024 28", shape(1, 512, 28, 28, 1024, 1, 1, 2, 0)},
      {"depthwise 3x3 256 28", shape(1, 256, 28, 28, 256, 3, 3, 1, 1, 1, 256)},
  };
  for (const auto& c : cases) {
    const Conv2dShape& s = c.s;
    const auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * s.H * s.W));
    const auto w = testing::random_vec(rng, static_cast<size_t>(s.K * (s.C / s.groups) * s.R * s.S));
    const auto bias = testing::random_vec(rng, static_cast<size_t>(s.K));
    std::vector<float> y(static_cast<size_t>(s.N * s.K * s.OH() * s.OW()));
    auto run = [&] {
      kernels::conv2d_nchw(s, x.data(), w.data(), bias.data(), y.data(), Activation::Relu, nullptr,
                           threads);
    };
    run();
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double flops = 2.0 * s.N * s.K * s.OH() * s.OW() * (s.C / s.groups) * s.R * s.S;
    std::printf("[ bench ] conv %-26s %s threads=2: %7.1f GFLOP/s (%.3f ms)\n", c.name,
                kernels::isa_name(kernels::active_isa()), flops / best * 1e-9, best * 1e3);
    // Spot-check a few outputs against a direct sum.
    const int64_t Cg = s.C / s.groups, Kg = s.K / s.groups;
    for (int probe = 0; probe < 20; ++probe) {
      const int64_t k = testing::rand_int(rng, 0, s.K - 1), oh = testing::rand_int(rng, 0, s.OH() - 1),
                    ow = testing::rand_int(rng, 0, s.OW() - 1), g = k / Kg;
      double acc = bias[k];
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t r = 0; r < s.R; ++r)
          for (int64_t q = 0; q < s.S; ++q) {
            const int64_t ih = oh * s.stride_h - s.pad_h + r, iw = ow * s.stride_w - s.pad_w + q;
            if (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W)
              acc += double(x[((g * Cg + c) * s.H + ih) * s.W + iw]) * w[((k * Cg + c) * s.R + r) * s.S + q];
          }
      EXPECT_NEAR(y[(k * s.OH() + oh) * s.OW() + ow], std::max(acc, 0.0), 1e-3) << c.name;
    }
  }
}

}  // namespace
}  // namespace dnnfusion
