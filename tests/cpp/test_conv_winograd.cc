// Winograd F(2x2, 3x3) and F(4x4, 3x3) (conv2d_nchwc with knobs.winograd = 2 / 4) against the plain NCHW reference on every
// ISA the CPU has, serial, two and three threads: both work splits (chunked: small weights;
// three-phase: packed weights past a core's L2 share), odd output sizes (partial 2x2 tiles),
// padding 0/1/2, channels that are not multiples of the blocks (poisoned padded input lanes),
// every block size, batches, bias + residual (also in place) + each activation, and the epilogue
// hook (each element exactly once, including chunks that end inside a tile row); the weight
// transform by itself; invalid uses.
#include <gtest/gtest.h>

#include "common/error.h"
#include "conv_nchwc_test_util.h"
#include "kernels/cpu/conv_winograd.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

using conv_test::check;
using conv_test::Options;
using conv_test::shape;
using kernels::Activation;
using kernels::Conv2dShape;
using kernels::ConvNchwcKnobs;
using kernels::Isa;

ConvNchwcKnobs wino(int icb, int ocb, int m = 2) { return {icb, ocb, 1, false, m}; }

// Blocks per ISA: every vector width the transforms pick (16, 8, odd -> scalar lanes).
std::vector<std::pair<int, int>> blocks(Isa isa) {
  if (isa == Isa::Avx512) return {{16, 16}, {32, 32}, {64, 64}, {16, 64}, {8, 8}, {64, 32}};
  if (isa == Isa::Avx2) return {{16, 16}, {8, 8}, {8, 16}};
  return {{16, 16}, {5, 3}, {8, 32}};
}

TEST(ConvWinograd, ChunkedSplitMatchesReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 501);
  // Packed weights within the chunked limit (16 x C x K floats <= 256 Ki).
  const Conv2dShape shapes[] = {
      shape(1, 16, 12, 30, 32, 3, 3, 1, 1),  // even output, whole tiles
      shape(2, 19, 9, 31, 21, 3, 3, 1, 1),   // odd output: partial tiles in both directions
      shape(1, 24, 7, 40, 9, 3, 3, 1, 0),    // no padding
      shape(3, 12, 5, 6, 16, 3, 3, 1, 2),    // padding 2: whole tile rows of zeros
      shape(1, 32, 3, 3, 40, 3, 3, 1, 1),    // one tile row of two tiles
      shape(1, 17, 1, 1, 9, 3, 3, 1, 1),     // single pixel
  };
  for (Isa isa : testing::isas_to_test())
    for (const auto& s : shapes)
      for (auto [icb, ocb] : blocks(isa))
        for (int m : {2, 4}) {
        const ConvNchwcKnobs k = wino(icb, ocb, m);
        if (kernels::conv_nchwc_max_reg_n(isa, ocb) == 0) continue;
        check(rng, s, k, isa, testing::kSerial, Options{});
        check(rng, s, k, isa, testing::kTwo, Options{true, true, true, false, Activation::Relu});
      }
}

TEST(ConvWinograd, ThreePhaseSplitMatchesReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 502);
  // (m+2)^2 x C x K past 256 Ki floats: the whole-layer phases.
  const Conv2dShape shapes[] = {
      shape(1, 144, 7, 7, 136, 3, 3, 1, 1),
      shape(2, 130, 6, 9, 140, 3, 3, 1, 1),
  };
  const testing::ThreadParallel three(3);
  for (Isa isa : testing::isas_to_test())
    for (const auto& s : shapes)
      for (int m : {2, 4}) {
      const int ocb = isa == Isa::Avx512 ? 32 : 16;
      const ConvNchwcKnobs k = wino(16, ocb, m);
      ASSERT_GT(16 * s.C * s.K, 256 * 1024);
      check(rng, s, k, isa, testing::kSerial, Options{});
      check(rng, s, k, isa, testing::kTwo, Options{true, true, true, true, Activation::Relu6});
      check(rng, s, k, isa, three, Options{false, true, false, false, Activation::Relu});
    }
}

// Groups of tiles (the scratch cap) that start and end inside tile rows and images.
TEST(ConvWinograd, ThreePhaseGroupsMatchReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 504);
  const Conv2dShape s = shape(3, 144, 9, 11, 136, 3, 3, 1, 1);
  const Isa isa = testing::isas_to_test().back();
  const int ocb = isa == Isa::Scalar ? 16 : 8;
  for (int m : {2, 4}) {
    const int64_t a = m + 2, per_tile = a * a * (144 + 136);
    for (int64_t tiles : {1, 7, 13}) {
      SCOPED_TRACE("tiles per group " + std::to_string(tiles));
      const int64_t old = kernels::conv_winograd_phase_budget(tiles * per_tile);
      check(rng, s, wino(16, ocb, m), isa, testing::kTwo, Options{true, true, true, false, Activation::Relu});
      kernels::conv_winograd_phase_budget(old);
    }
  }
}

TEST(ConvWinograd, EveryActivationResidualAndHookOnManyThreads) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 503);
  const Conv2dShape s = shape(2, 40, 11, 13, 72, 3, 3, 1, 1);
  const testing::ThreadParallel three(3);
  const Isa isa = testing::isas_to_test().back();
  for (Activation act : {Activation::None, Activation::Relu, Activation::Relu6})
    for (bool hook : {false, true})
      for (int m : {2, 4}) check(rng, s, wino(8, 8, m), isa, three, Options{true, true, hook, false, act});
}

// The packed filters are G g G^T: a single tap g[r][s] = 1 gives u[i][j] = G[i][r] * G[j][s].
TEST(ConvWinograd, WeightTransformIsGgGt) {
  const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const double G4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                           {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  const Conv2dShape s = shape(1, 1, 3, 3, 1, 3, 3, 1, 1);
  for (int m : {2, 4}) {
    const ConvNchwcKnobs k = wino(1, 1, m);
    const int A = m + 2;
    const double(*G)[3] = m == 2 ? G2 : G4;
    ASSERT_EQ(kernels::conv_winograd_packed_weight_floats(s, k), A * A);
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) {
        float w[9] = {};
        w[r * 3 + c] = 1.f;
        std::vector<float> u(A * A);
        kernels::conv_nchwc_pack_weight(s, k, w, u.data());
        for (int i = 0; i < A; ++i)
          for (int j = 0; j < A; ++j)
            EXPECT_EQ(u[A * i + j], static_cast<float>(G[i][r] * G[j][c])) << m << r << c << i << j;
      }
  }
}

TEST(ConvWinograd, InvalidUsesThrowNamingTheProblem) {
  const Isa isa = testing::isas_to_test().front();
  const ConvNchwcKnobs k = wino(16, 16);
  auto msg = [&](const Conv2dShape& s) -> std::string {
    try {
      kernels::conv_nchwc_check(s, k, isa);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg(shape(1, 16, 8, 8, 16, 3, 3, 2, 1)).find("stride 1"), std::string::npos);
  EXPECT_NE(msg(shape(1, 16, 8, 8, 16, 5, 5, 1, 2)).find("3x3"), std::string::npos);
  EXPECT_NE(msg(shape(1, 16, 8, 8, 16, 3, 3, 1, 2, 2)).find("dilation"), std::string::npos);
  EXPECT_NE(msg(shape(1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 16)).find("groups=1"), std::string::npos);
  EXPECT_EQ(msg(shape(1, 16, 8, 8, 16, 3, 3, 1, 1)), "");
  ConvNchwcKnobs bad = k;
  bad.winograd = 3;
  try {
    kernels::conv_nchwc_check(shape(1, 16, 8, 8, 16, 3, 3, 1, 1), bad, isa);
    ADD_FAILURE() << "winograd=3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be 0 (direct), 2"), std::string::npos) << e.what();
  }
  // The scaled-input variant scales direct-layout weight rows: Winograd weights are refused.
  const Conv2dShape s = shape(1, 16, 4, 4, 16, 3, 3, 1, 1);
  std::vector<float> x(16 * 16, 1.f), w(kernels::conv_winograd_packed_weight_floats(s, k)), sc(16, 1.f), y(16 * 16);
  EXPECT_THROW(kernels::conv2d_nchwc_scaled_input(s, k, x.data(), w.data(), sc.data(), 1, nullptr, nullptr,
                                                  Activation::None, y.data(), testing::kSerial, {}, isa),
               Error);
}

TEST(ConvWinograd, TileChoice) {
  EXPECT_EQ(kernels::conv_winograd_tile(shape(1, 64, 56, 56, 64, 3, 3, 2, 1)), 0);   // stride 2
  EXPECT_EQ(kernels::conv_winograd_tile(shape(1, 64, 56, 56, 64, 1, 1, 1, 0)), 0);   // 1x1
  EXPECT_EQ(kernels::conv_winograd_tile(shape(1, 3, 224, 224, 64, 3, 3, 1, 1)), 0);  // RGB input
  EXPECT_EQ(kernels::conv_winograd_tile(shape(1, 128, 7, 7, 32, 3, 3, 1, 1)), 0);    // 3.6 MFLOP
  EXPECT_EQ(kernels::conv_winograd_tile(shape(1, 64, 56, 56, 64, 3, 3, 1, 1)), 4);   // 196 4x4 tiles
  EXPECT_EQ(kernels::conv_winograd_tile(shape(1, 256, 14, 14, 256, 3, 3, 1, 1)), 2); // 16 4x4 tiles
  EXPECT_EQ(kernels::conv_winograd_tile(shape(1, 512, 7, 7, 512, 3, 3, 1, 1)), 2);
  EXPECT_EQ(kernels::conv_winograd_tile(shape(8, 512, 7, 7, 512, 3, 3, 1, 1)), 4);   // 32 4x4 tiles
}

}  // namespace
}  // namespace dnnfusion
