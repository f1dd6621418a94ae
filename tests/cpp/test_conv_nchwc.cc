// conv2d_nchwc (NCHW[x]c direct convolution) against the plain NCHW reference, through
// nchw_to_nchwc / nchwc_to_nchw, on every ISA the CPU has, serial and two threads: general convs
// (C=3 first layer, 7x7, stride 2, padding 0/1/3, dilation 2, asymmetric), 1x1 stride 1 (flattened
// plane) and stride 2, 1x1 with padding, depthwise; OW not a multiple of reg_n, C/K not multiples
// of the blocks; bias + residual + each activation; the epilogue hook; layout round trips; every
// tuning candidate on a few shapes; invalid shapes and knobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>

#include "common/error.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/reference/ref_gemm_conv.h"
#include "conv_nchwc_test_util.h"
#include "kernel_test_util.h"

namespace dnnfusion {
namespace {

// check(), shape(), describe(), Options and the kernels:: names they use.
using namespace conv_test;
using testing::ThreadParallel;

struct NamedCase {
  const char* name;
  Conv2dShape s;
};

const NamedCase kCases[] = {
    {"3x3 s1 p1 C,K = blocks", shape(1, 16, 12, 30, 32, 3, 3, 1, 1)},
    {"3x3 s1 p1 odd C,K", shape(2, 19, 9, 31, 21, 3, 3, 1, 1)},
    {"3x3 s2 p1", shape(1, 24, 15, 17, 40, 3, 3, 2, 1)},
    {"3x3 p0", shape(1, 8, 7, 40, 9, 3, 3, 1, 0)},
    {"3x3 dil2 p2", shape(1, 12, 13, 29, 16, 3, 3, 1, 2, 2)},
    {"C=3 7x7 s2 p3 first layer", shape(1, 3, 35, 37, 20, 7, 7, 2, 3)},
    {"5x5 p3 wider than needed", shape(1, 5, 6, 9, 7, 5, 5, 1, 3)},
    {"3x3 p1 many oc blocks (padded input copy)", shape(2, 40, 7, 9, 72, 3, 3, 1, 1)},
    {"3x3 s2 p1 many oc blocks", shape(1, 32, 9, 9, 96, 3, 3, 2, 1)},
    {"3x3 dil2 p2 many oc blocks", shape(1, 16, 8, 8, 64, 3, 3, 1, 2, 2)},
    {"3x3 s1 p1 at 7x7 (two-row tiles, odd row count)", shape(1, 40, 7, 7, 72, 3, 3, 1, 1)},
    {"3x3 s2 p1 14x14 -> 7x7 (two-row tiles)", shape(2, 48, 14, 14, 40, 3, 3, 2, 1)},
    {"3x3 p0 at 5x4 (two-row tiles, no padding)", shape(1, 24, 7, 6, 32, 3, 3, 1, 0)},
    {"1x1 s1 flat", shape(2, 40, 13, 15, 56, 1, 1, 1, 0)},
    {"1x1 s1 flat 7x7", shape(1, 64, 7, 7, 48, 1, 1, 1, 0)},
    {"1x1 s1 flat 7x7, an odd block count (segments raised for 2 threads)", shape(1, 64, 7, 7, 80, 1, 1, 1, 0)},
    {"1x1 s2", shape(1, 32, 15, 14, 24, 1, 1, 2, 0)},
    {"1x1 p1 (borders)", shape(1, 8, 5, 6, 12, 1, 1, 1, 1)},
    {"1x1 p3 (tiles entirely in padding)", shape(1, 5, 4, 3, 6, 1, 1, 1, 3)},
    {"single pixel", shape(1, 7, 1, 1, 9, 1, 1, 1, 0)},
    {"1x1 over 1x1 planes, 17 images (images as tile positions)", shape(17, 40, 1, 1, 72, 1, 1, 1, 0)},
    {"1x1 over 1x1 planes, 3 images, K in one padded block", shape(3, 96, 1, 1, 20, 1, 1, 1, 0)},
    {"kernel = image", shape(2, 4, 5, 5, 6, 5, 5, 1, 0)},
    {"OW = 1 column", shape(1, 6, 9, 1, 10, 3, 3, 1, 1)},
    {"depthwise 3x3 s1", shape(2, 32, 12, 29, 32, 3, 3, 1, 1, 1, 32)},
    {"depthwise 3x3 s2 odd C", shape(1, 21, 13, 11, 21, 3, 3, 2, 1, 1, 21)},
    {"depthwise 5x5 dil2", shape(1, 8, 16, 16, 8, 5, 5, 1, 4, 2, 8)},
    {"depthwise 1x1", shape(1, 16, 6, 7, 16, 1, 1, 1, 0, 1, 16)},
    {"depthwise 3x3 p3 narrow (edge taps all in padding)", shape(1, 16, 3, 2, 16, 3, 3, 1, 3, 1, 16)},
    {"depthwise 7x7 s2 p3 dil2 wide", shape(1, 24, 9, 45, 24, 7, 7, 2, 3, 2, 24)},
};

// Knob sets exercised besides the default: small tiles (many remainders), two-vector blocks,
// narrow blocks, a non-power-of-two ic_bn.
std::vector<ConvNchwcKnobs> knob_variants(const Conv2dShape& s, Isa isa) {
  std::vector<ConvNchwcKnobs> out{kernels::conv_nchwc_default_knobs(s, isa)};
  const bool dw = s.groups > 1;
  auto add = [&](int icb, int ocb, int rn, bool unroll) {
    if (dw) icb = ocb;
    const ConvNchwcKnobs k{icb, ocb, rn, unroll};
    if (kernels::conv_nchwc_max_reg_n(isa, ocb) >= rn) out.push_back(k);
  };
  if (isa == Isa::Avx512) {
    add(16, 16, 5, false);
    add(32, 32, 14, true);
    add(8, 8, 28, true);
    add(3, 32, 3, false);
    add(64, 64, 7, true);
    add(16, 64, 4, false);
  } else if (isa == Isa::Avx2) {
    add(16, 16, 6, true);
    add(8, 8, 5, false);
    add(3, 8, 12, true);
  } else {
    add(5, 3, 7, true);
    add(16, 16, 32, false);
    add(1, 64, 2, true);
  }
  return out;
}

TEST(ConvNchwc, NamedVariantsEveryIsa) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 301);
  for (Isa isa : testing::isas_to_test()) {
    int variant = 0;
    for (const auto& c : kCases) {
      SCOPED_TRACE(c.name);
      for (const ConvNchwcKnobs& k : knob_variants(c.s, isa)) {
        Options o;
        o.bias = variant % 2 == 0;
        o.act = static_cast<Activation>(variant % 3);
        o.residual = variant % 4 == 1;
        const Parallel& par = variant % 2 ? static_cast<const Parallel&>(testing::kTwo)
                                          : static_cast<const Parallel&>(testing::kSerial);
        ++variant;
        check(rng, c.s, k, isa, par, o);
      }
    }
  }
}

// Narrow output rows run two rows per tile with the default knobs on AVX-512 (and with any knobs
// whose reg_n holds two rows, on every ISA); both rows of a tile, an odd last row, a padded input
// (copied with explicit padding first) and each work split match the reference, the hook sees
// every element once.
TEST(ConvNchwc, TwoRowTilesMatchReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 313);
  const testing::ThreadParallel three(3);
  const Conv2dShape resnet_7x7 = shape(1, 512, 7, 7, 512, 3, 3, 1, 1);
  if (kernels::isa_supported(Isa::Avx512)) {
    const ConvNchwcKnobs d = kernels::conv_nchwc_default_knobs(resnet_7x7, Isa::Avx512);
    EXPECT_TRUE(kernels::conv_nchwc_two_row_tiles(resnet_7x7, d, Isa::Avx512)) << describe(resnet_7x7, d);
  }
  const Conv2dShape flat = shape(1, 64, 7, 7, 64, 1, 1, 1, 0), dw = shape(1, 32, 7, 7, 32, 3, 3, 1, 1, 1, 32);
  const Conv2dShape one_row = shape(1, 16, 3, 7, 32, 3, 3, 1, 0);  // OH == 1
  for (Isa isa : testing::isas_to_test()) {
    const int ocb = isa == Isa::Avx2 ? 8 : 16;
    const ConvNchwcKnobs wide{16, ocb, kernels::conv_nchwc_max_reg_n(isa, ocb), true};
    EXPECT_FALSE(kernels::conv_nchwc_two_row_tiles(flat, wide, isa));
    EXPECT_FALSE(kernels::conv_nchwc_two_row_tiles(dw, {ocb, ocb, wide.reg_n, true}, isa));
    EXPECT_FALSE(kernels::conv_nchwc_two_row_tiles(one_row, wide, isa));
    const Conv2dShape cases[] = {
        shape(1, 40, 7, 7, 72, 3, 3, 1, 1),      // 7 rows: three pairs and a single row
        shape(2, 33, 8, 8, 20, 3, 3, 2, 1),      // stride 2, C and K off the blocks, two images
        shape(1, 64, 6, 5, 48, 3, 3, 1, 0),      // no padding: no input copy
        shape(1, 48, 12, 12, 64, 1, 1, 2, 0),    // strided 1x1
        shape(1, 200, 9, 9, 260, 3, 3, 2, 1),    // > 1 MiB of weights: block-major
    };
    int ran = 0;
    for (const Conv2dShape& s : cases) {
      const int64_t ow = s.OW();
      const int rn = static_cast<int>(std::min<int64_t>(2 * ow, kernels::conv_nchwc_max_reg_n(isa, ocb)));
      const ConvNchwcKnobs k{16, ocb, rn, true};
      if (!kernels::conv_nchwc_two_row_tiles(s, k, isa)) continue;  // rows too wide for this ISA's tiles
      Options o;
      o.hook = true;
      o.residual = true;
      o.bias = true;
      o.act = Activation::Relu6;
      check(rng, s, k, isa, testing::kSerial, o);
      check(rng, s, k, isa, three, o);
      ++ran;
    }
    EXPECT_GE(ran, 4) << isa_name(isa);
  }
}

// Position-major and block-major item orders both cover every output exactly once, with the
// hook, serial and on three threads (shares that cut rows and blocks mid-way).
TEST(ConvNchwc, BothWorkSplitsMatchReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 309);
  const testing::ThreadParallel three(3);
  struct Case {
    Conv2dShape s;
    bool spatial;
  };
  const Case cases[] = {
      {shape(1, 24, 10, 9, 40, 3, 3, 1, 1), true},      // small weights: position-major
      {shape(2, 40, 9, 7, 40, 1, 1, 1, 0), true},       // flat 1x1, two images
      {shape(2, 64, 12, 12, 64, 3, 3, 1, 1), true},     // a batch: the zero-padded input copy
      {shape(1, 48, 9, 8, 48, 3, 3, 2, 1, 1, 48), true},  // depthwise
      {shape(1, 192, 7, 6, 200, 3, 3, 1, 1), false},    // 1.4 MB of weights: block-major
      {shape(1, 1040, 5, 5, 256, 1, 1, 1, 0), false},   // flat 1x1 past 1 MiB
      {shape(1, 1024, 4, 4, 256, 1, 1, 1, 0), false},   // exactly 1 MiB of weights: block-major
  };
  for (Isa isa : testing::isas_to_test())
    for (const auto& c : cases) {
      const ConvNchwcKnobs k = kernels::conv_nchwc_default_knobs(c.s, isa);
      EXPECT_EQ(kernels::conv_nchwc_spatial_split(c.s, k), c.spatial) << describe(c.s, k);
      Options o;
      o.hook = true;
      o.residual = true;
      o.act = Activation::Relu;
      check(rng, c.s, k, isa, testing::kSerial, o);
      check(rng, c.s, k, isa, three, o);
    }
}

TEST(ConvNchwc, ResidualRelu6AndHook) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 302);
  const Conv2dShape shapes[] = {shape(2, 19, 9, 31, 21, 3, 3, 1, 1),
                                shape(1, 40, 13, 15, 56, 1, 1, 1, 0),
                                shape(1, 32, 15, 14, 24, 1, 1, 2, 0),
                                shape(1, 21, 13, 11, 21, 3, 3, 2, 1, 1, 21)};
  for (Isa isa : testing::isas_to_test())
    for (const auto& s : shapes)
      for (bool in_place : {false, true}) {
        Options o;
        o.residual = true;
        o.in_place_residual = in_place;
        o.hook = true;
        o.act = Activation::Relu6;
        check(rng, s, kernels::conv_nchwc_default_knobs(s, isa), isa, testing::kTwo, o);
      }
}

// The epilogue's same-index hint (ElementHook::same_index) only makes the kernel prefetch: an
// add-the-operand epilogue gives the same bits with and without it, and the same as the kernel's
// own residual, on outputs above and below the size where the output is prefetched for writing
// too (kernels::nchwc_detail::kPrefetchOutputBytes).
TEST(ConvNchwc, EpilogueOperandHintLeavesResultsUnchanged) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 307);
  struct AddOperand {
    static void fn(const void* ctx, float* data, int64_t start, int64_t count) {
      const float* operand = static_cast<const float*>(ctx) + start;
      for (int64_t i = 0; i < count; ++i) data[i] += operand[i];
    }
  };
  const Conv2dShape shapes[] = {shape(4, 16, 56, 56, 128, 1, 1, 1, 0),  // 6.4 MB output
                                shape(1, 24, 20, 22, 40, 3, 3, 1, 1),
                                shape(2, 48, 14, 14, 40, 3, 3, 2, 1)};  // two-row tiles
  for (Isa isa : testing::isas_to_test())
    for (const auto& s : shapes) {
      const ConvNchwcKnobs k = kernels::conv_nchwc_default_knobs(s, isa);
      SCOPED_TRACE(describe(s, k) + " isa=" + kernels::isa_name(isa));
      const auto x = testing::random_vec(rng, static_cast<size_t>(kernels::nchwc_floats(s.N, s.C, s.H, s.W, k.ic_bn)));
      const auto w = testing::random_vec(rng, static_cast<size_t>(s.K * s.C * s.R * s.S));
      const auto bias = testing::random_vec(rng, static_cast<size_t>(s.K));
      const size_t ysize = static_cast<size_t>(kernels::nchwc_floats(s.N, s.K, s.OH(), s.OW(), k.oc_bn));
      const auto operand = testing::random_vec(rng, ysize);
      std::vector<float> pw(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(s, k)));
      kernels::conv_nchwc_pack_weight(s, k, w.data(), pw.data());
      std::vector<float> hinted(ysize), plain(ysize), residual(ysize);
      kernels::ElementHook hook;
      hook.fn = &AddOperand::fn;
      hook.ctx = operand.data();
      kernels::conv2d_nchwc(s, k, x.data(), pw.data(), bias.data(), nullptr, Activation::None, plain.data(),
                            testing::kTwo, hook, isa);
      hook.same_index[0] = operand.data();
      kernels::conv2d_nchwc(s, k, x.data(), pw.data(), bias.data(), nullptr, Activation::None, hinted.data(),
                            testing::kTwo, hook, isa);
      kernels::conv2d_nchwc(s, k, x.data(), pw.data(), bias.data(), operand.data(), Activation::None,
                            residual.data(), testing::kTwo, {}, isa);
      // Padded lanes: the hook adds the operand there too, the kernel's residual path zeroes them.
      const int64_t Kb = (s.K + k.oc_bn - 1) / k.oc_bn, plane = s.OH() * s.OW();
      size_t diff = 0, diff_res = 0;
      for (size_t i = 0; i < ysize; ++i) {
        diff += hinted[i] != plain[i];
        const int64_t lane = static_cast<int64_t>(i) % k.oc_bn;
        const int64_t kb = static_cast<int64_t>(i) / (plane * k.oc_bn) % Kb;
        if (kb * k.oc_bn + lane < s.K) diff_res += hinted[i] != residual[i];
      }
      EXPECT_EQ(diff, 0u);
      EXPECT_EQ(diff_res, 0u);
    }
}

TEST(ConvNchwc, RandomShapes) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 303);
  for (Isa isa : testing::isas_to_test()) {
    for (int t = 0; t < 25; ++t) {
      Conv2dShape s{};
      const bool dw = t % 5 == 4, grouped = t % 5 == 2;
      s.N = testing::rand_int(rng, 1, 2);
      s.C = testing::rand_int(rng, 1, 40);
      s.K = dw ? s.C : testing::rand_int(rng, 1, 40);
      s.groups = dw ? s.C : 1;
      if (dw && s.C == 1) s.groups = 1;
      if (grouped) {  // groups dividing both channel counts
        s.groups = testing::rand_int(rng, 2, 4);
        s.C = s.groups * testing::rand_int(rng, 1, 10);
        s.K = s.groups * testing::rand_int(rng, 1, 10);
      }
      s.R = testing::rand_int(rng, 1, 4);
      s.S = testing::rand_int(rng, 1, 4);
      s.stride_h = testing::rand_int(rng, 1, 3);
      s.stride_w = testing::rand_int(rng, 1, 3);
      s.dil_h = testing::rand_int(rng, 1, 2);
      s.dil_w = testing::rand_int(rng, 1, 2);
      s.pad_h = testing::rand_int(rng, 0, 3);
      s.pad_w = testing::rand_int(rng, 0, 3);
      s.H = testing::rand_int(rng, s.dil_h * (s.R - 1) + 1, 20);
      s.W = testing::rand_int(rng, s.dil_w * (s.S - 1) + 1, 40);
      if (!kernels::conv_nchwc_supported(s, nullptr, isa)) continue;  // groups no block of the ISA fits
      const auto cands = kernels::conv_nchwc_candidate_knobs(s, isa);
      const ConvNchwcKnobs k = cands[static_cast<size_t>(testing::rand_int(rng, 0, cands.size() - 1))];
      Options o;
      o.bias = t % 2 == 0;
      o.residual = t % 3 == 0;
      o.act = static_cast<Activation>(t % 3);
      o.hook = t % 4 == 0;
      check(rng, s, k, isa, t % 2 ? static_cast<const Parallel&>(testing::kTwo)
                                  : static_cast<const Parallel&>(testing::kSerial),
            o);
    }
  }
}

// Grouped convs (ResNeXt / RegNet style and odd ones): blocks inside one group, whole groups per
// block, padded last blocks, strides, 1x1, a channel multiplier, every candidate block pair of
// the default's oc_bn, serial and on three threads, with the hook and a residual.
TEST(ConvNchwc, GroupedConvsMatchReference) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 310);
  const testing::ThreadParallel three(3);
  const Conv2dShape shapes[] = {
      shape(1, 32, 9, 10, 32, 3, 3, 1, 1, 1, 8),     // 4 channels per group (ResNeXt's first stage)
      shape(2, 64, 7, 9, 64, 3, 3, 2, 1, 1, 4),      // 16 per group, stride 2, a batch
      shape(1, 64, 6, 6, 64, 3, 3, 1, 1, 1, 2),      // 32 per group: blocks inside a group
      shape(1, 48, 8, 8, 48, 3, 3, 1, 1, 1, 6),      // 8 per group (RegNet), 48 = 3 x 16
      shape(1, 40, 5, 7, 40, 3, 3, 1, 1, 1, 5),      // 8 per group, 40 pads to 48
      shape(1, 24, 6, 6, 48, 1, 1, 1, 0, 1, 3),      // 1x1, 8 in / 16 out per group
      shape(1, 8, 7, 7, 16, 3, 3, 1, 1, 1, 8),       // depthwise with a channel multiplier
      shape(1, 12, 9, 5, 18, 3, 2, 1, 1, 2, 3),      // odd groups (4 in / 6 out), dilation 2
  };
  for (Isa isa : testing::isas_to_test())
    for (const auto& s : shapes) {
      std::string why;
      if (!kernels::conv_nchwc_supported(s, &why, isa)) {
        // Only the odd groups on the vector ISAs: 6 output channels per group fit no 8-lane block.
        EXPECT_TRUE(s.K / s.groups == 6 && isa != Isa::Scalar) << describe(s, {}) << " " << why;
        EXPECT_NE(why.find("groups=3"), std::string::npos) << why;
        EXPECT_THROW(kernels::conv_nchwc_default_knobs(s, isa), Error);
        continue;
      }
      const ConvNchwcKnobs def = kernels::conv_nchwc_default_knobs(s, isa);
      EXPECT_TRUE(kernels::conv_nchwc_group_blocks_fit(s, def.ic_bn, def.oc_bn)) << describe(s, def);
      Options o;
      o.hook = true;
      o.residual = true;
      o.act = Activation::Relu;
      check(rng, s, def, isa, testing::kSerial, o);
      check(rng, s, def, isa, three, o);
      int n = 0;
      for (const auto& k : kernels::conv_nchwc_candidate_knobs(s, isa)) {
        EXPECT_TRUE(kernels::conv_nchwc_group_blocks_fit(s, k.ic_bn, k.oc_bn)) << describe(s, k);
        if (k.reg_n != def.reg_n && k.reg_n != 1) continue;  // every block pair, two tile widths
        Options p;
        p.bias = n % 2 == 0;
        check(rng, s, k, isa, n++ % 2 ? static_cast<const Parallel&>(testing::kTwo)
                                      : static_cast<const Parallel&>(testing::kSerial),
              p);
      }
    }
}

TEST(ConvNchwc, EveryCandidateIsCorrect) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 304);
  const Conv2dShape shapes[] = {shape(1, 32, 9, 30, 32, 3, 3, 1, 1),
                                shape(1, 64, 7, 7, 48, 1, 1, 1, 0),
                                shape(1, 32, 10, 11, 32, 3, 3, 2, 1, 1, 32)};
  for (Isa isa : testing::isas_to_test())
    for (const auto& s : shapes) {
      const auto cands = kernels::conv_nchwc_candidate_knobs(s, isa);
      EXPECT_EQ(cands.front(), kernels::conv_nchwc_default_knobs(s, isa));
      EXPECT_GE(cands.size(), 4u);
      for (size_t i = 0; i < cands.size(); ++i) {
        for (size_t j = 0; j < i; ++j) EXPECT_FALSE(cands[i] == cands[j]) << "duplicate candidate";
        EXPECT_NO_THROW(kernels::conv_nchwc_check(s, cands[i], isa));
        Options o;
        o.residual = i % 2 == 1;
        o.act = Activation::Relu;
        check(rng, s, cands[i], isa, testing::kTwo, o);
      }
    }
}

TEST(ConvNchwc, DefaultKnobsAreDeterministicAndValid) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    for (const auto& c : kCases) {
      const ConvNchwcKnobs a = kernels::conv_nchwc_default_knobs(c.s, isa);
      EXPECT_EQ(a, kernels::conv_nchwc_default_knobs(c.s, isa));
      EXPECT_NO_THROW(kernels::conv_nchwc_check(c.s, a, isa)) << c.name;
      for (auto fam : {kernels::ConvTileFamily::Oc64x7, kernels::ConvTileFamily::Oc32x14})
        EXPECT_NO_THROW(kernels::conv_nchwc_check(c.s, kernels::conv_nchwc_default_knobs(c.s, isa, fam), isa))
            << c.name;
    }
  // The RGB first layer gets a block of exactly its 3 channels, and with 32-lane output blocks
  // the 14-position tile (its tap loop is short).
  EXPECT_EQ(kernels::conv_nchwc_default_knobs(shape(1, 3, 224, 224, 64, 7, 7, 2, 3), Isa::Avx512)
                .ic_bn,
            3);
  const ConvNchwcKnobs stem = kernels::conv_nchwc_default_knobs(shape(1, 3, 224, 224, 32, 3, 3, 2, 1), Isa::Avx512);
  EXPECT_EQ(stem.oc_bn, 32);
  EXPECT_EQ(stem.reg_n, 14);
  EXPECT_EQ(kernels::conv_nchwc_default_knobs(shape(1, 32, 56, 56, 32, 3, 3, 1, 1), Isa::Avx512).reg_n, 7);
}

// The tile family decides only the AVX-512 tile of convs with a multiple of 64 output channels
// (depthwise excluded; 7x7 outputs keep their two-row tiles); both run correctly on this CPU.
TEST(ConvNchwc, TileFamilyPicksTheTileOfWideConvs) {
  using kernels::ConvTileFamily;
  const Conv2dShape wide3x3 = shape(1, 64, 28, 28, 128, 3, 3, 2, 1), wide1x1 = shape(1, 96, 14, 14, 256, 1, 1, 1, 0);
  for (const Conv2dShape& s : {wide3x3, wide1x1}) {
    const ConvNchwcKnobs a = kernels::conv_nchwc_default_knobs(s, Isa::Avx512, ConvTileFamily::Oc64x7);
    const ConvNchwcKnobs b = kernels::conv_nchwc_default_knobs(s, Isa::Avx512, ConvTileFamily::Oc32x14);
    EXPECT_EQ(a.oc_bn, 64) << describe(s, a);
    EXPECT_EQ(a.reg_n, 7) << describe(s, a);
    EXPECT_EQ(b.oc_bn, 32) << describe(s, b);
    EXPECT_EQ(b.reg_n, 14) << describe(s, b);
  }
  const Conv2dShape dw = shape(1, 128, 14, 14, 128, 3, 3, 1, 1, 1, 128), narrow = shape(1, 40, 14, 14, 80, 1, 1, 1, 0);
  const Conv2dShape at7 = shape(1, 512, 7, 7, 512, 3, 3, 1, 1);
  for (const Conv2dShape& s : {dw, narrow, at7})
    EXPECT_EQ(kernels::conv_nchwc_default_knobs(s, Isa::Avx512, ConvTileFamily::Oc64x7),
              kernels::conv_nchwc_default_knobs(s, Isa::Avx512, ConvTileFamily::Oc32x14));
  if (kernels::isa_supported(Isa::Avx512)) {
    SCOPED_TRACE(testing::seed_note());
    std::mt19937_64 rng(testing::test_seed() + 331);
    for (const Conv2dShape& s : {wide3x3, wide1x1})
      for (auto fam : {ConvTileFamily::Oc64x7, ConvTileFamily::Oc32x14})
        check(rng, s, kernels::conv_nchwc_default_knobs(s, Isa::Avx512, fam), Isa::Avx512, testing::kTwo, {});
  }
}

TEST(ConvNchwc, LayoutRoundTrips) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 305);
  struct Dims { int64_t N, C, H, W; };
  const Dims dims[] = {{1, 16, 4, 5}, {2, 19, 3, 7}, {1, 3, 5, 5}, {3, 1, 2, 9}, {1, 40, 1, 1}};
  for (const auto& d : dims)
    for (int bn : {1, 3, 8, 16, 32})
      for (int bn2 : {8, 16, 5}) {
        SCOPED_TRACE(::testing::Message() << "N=" << d.N << " C=" << d.C << " H=" << d.H
                                          << " W=" << d.W << " bn=" << bn << " bn2=" << bn2);
        const size_t n = static_cast<size_t>(d.N * d.C * d.H * d.W);
        const auto x = testing::random_vec(rng, n);
        std::vector<float> b1(static_cast<size_t>(kernels::nchwc_floats(d.N, d.C, d.H, d.W, bn)),
                              std::numeric_limits<float>::quiet_NaN());
        kernels::nchw_to_nchwc(x.data(), d.N, d.C, d.H, d.W, bn, b1.data(), testing::kTwo);
        // Element (n, c, h, w) at its blocked position; padding lanes zero.
        const int64_t Cb = (d.C + bn - 1) / bn;
        size_t wrong = 0;
        for (int64_t nn = 0; nn < d.N; ++nn)
          for (int64_t c = 0; c < Cb * bn; ++c)
            for (int64_t hw = 0; hw < d.H * d.W; ++hw) {
              const float got = b1[((nn * Cb + c / bn) * d.H * d.W + hw) * bn + c % bn];
              const float want = c < d.C ? x[(nn * d.C + c) * d.H * d.W + hw] : 0.f;
              wrong += got != want;
            }
        EXPECT_EQ(wrong, 0u);
        std::vector<float> back(n, std::numeric_limits<float>::quiet_NaN());
        kernels::nchwc_to_nchw(b1.data(), d.N, d.C, d.H, d.W, bn, back.data(), testing::kSerial);
        EXPECT_EQ(back, x);
        // Re-blocking equals blocking straight from NCHW.
        std::vector<float> b2(static_cast<size_t>(kernels::nchwc_floats(d.N, d.C, d.H, d.W, bn2)),
                              std::numeric_limits<float>::quiet_NaN());
        std::vector<float> b2_direct(b2.size());
        kernels::nchwc_to_nchwc(b1.data(), d.N, d.C, d.H, d.W, bn, bn2, b2.data(), testing::kTwo);
        kernels::nchw_to_nchwc(x.data(), d.N, d.C, d.H, d.W, bn2, b2_direct.data(),
                               testing::kSerial);
        EXPECT_EQ(b2, b2_direct);
      }
}

TEST(ConvNchwc, InvalidShapesAndKnobsThrow) {
  SerialParallel serial;
  std::vector<float> buf(1 << 16, 0.f);
  const float* x = buf.data();
  float* y = buf.data();
  const Conv2dShape ok = shape(1, 16, 8, 8, 16, 3, 3, 1, 1);
  const ConvNchwcKnobs k16{16, 16, 8, true};
  auto run = [&](const Conv2dShape& s, const ConvNchwcKnobs& k, Isa isa) {
    std::vector<float> out(static_cast<size_t>(kernels::nchwc_floats(s.N, s.K, 16, 16, k.oc_bn)));
    kernels::conv2d_nchwc(s, k, x, x, nullptr, nullptr, Activation::None, out.data(), serial, {},
                          isa);
  };
  // Grouped (4 input, 8 output channels per group): blocks that straddle groups are refused with
  // the reason; whole groups per block and blocks inside a group are fine.
  const Conv2dShape grouped = shape(1, 16, 8, 8, 32, 3, 3, 1, 1, 1, 4);
  EXPECT_TRUE(kernels::conv_nchwc_supported(grouped));
  EXPECT_THROW(run(grouped, {16, 16, 8, true}, Isa::Scalar), Error);  // 16 lanes read 8 channels
  EXPECT_FALSE(kernels::conv_nchwc_group_blocks_fit(grouped, 16, 16));
  EXPECT_FALSE(kernels::conv_nchwc_group_blocks_fit(grouped, 4, 12));  // neither divides the other
  EXPECT_TRUE(kernels::conv_nchwc_group_blocks_fit(grouped, 8, 16));
  EXPECT_TRUE(kernels::conv_nchwc_group_blocks_fit(grouped, 4, 8));
  EXPECT_TRUE(kernels::conv_nchwc_group_blocks_fit(grouped, 2, 4));  // a block inside one group
  EXPECT_FALSE(kernels::conv_nchwc_group_blocks_fit(grouped, 8, 4));
  EXPECT_DOUBLE_EQ(kernels::conv_nchwc_group_waste(grouped, 16), 2.0);
  EXPECT_DOUBLE_EQ(kernels::conv_nchwc_group_waste(grouped, 8), 1.0);
  try {
    kernels::conv_nchwc_check(grouped, {16, 16, 8, true}, Isa::Scalar);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("groups=4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ic_bn=16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::conv_nchwc_pack_weight(grouped, {16, 16, 8, true}, x, y), Error);
  // Invalid convolutions.
  EXPECT_THROW(kernels::conv_nchwc_supported(shape(1, 3, 4, 4, 4, 1, 1, 1, 0, 1, 2)), Error);
  EXPECT_THROW(run(shape(1, 2, 2, 2, 2, 5, 5, 1, 0), k16, Isa::Scalar), Error);
  EXPECT_THROW(run(shape(1, 2, 4, 4, 2, 1, 1, 0, 0), k16, Isa::Scalar), Error);
  // Knobs outside what the ISA's tiles have.
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {16, 12, 8, true}, Isa::Avx512), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {16, 16, 29, true}, Isa::Avx512), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {16, 32, 15, true}, Isa::Avx512), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {16, 32, 4, true}, Isa::Avx2), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {16, 16, 7, true}, Isa::Avx2), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {16, 65, 4, true}, Isa::Scalar), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {16, 16, 0, true}, Isa::Scalar), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {0, 16, 4, true}, Isa::Scalar), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(ok, {257, 16, 4, true}, Isa::Scalar), Error);
  EXPECT_THROW(kernels::conv_nchwc_check(shape(1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 16),
                                         {8, 16, 4, true}, Isa::Scalar),
               Error);  // depthwise needs ic_bn == oc_bn
  try {
    kernels::conv_nchwc_check(ok, {16, 12, 8, true}, Isa::Avx512);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("oc_bn=12"), std::string::npos) << e.what();
  }
  // Null pointers.
  EXPECT_THROW(kernels::conv2d_nchwc(ok, k16, nullptr, x, nullptr, nullptr, Activation::None, y,
                                     serial, {}, Isa::Scalar),
               Error);
  EXPECT_THROW(kernels::conv_nchwc_pack_weight(ok, k16, nullptr, y), Error);
  EXPECT_THROW(kernels::nchw_to_nchwc(x, 1, 4, 2, 2, 0, y, serial), Error);
  // An ISA the CPU lacks.
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (!kernels::isa_supported(isa)) {
      EXPECT_THROW(run(ok, {16, 16, 4, true}, isa), Error);
    }
}

// conv2d_nchwc_scaled_input == conv2d_nchwc of x * s: per-image and shared scales, padded
// channels (NaN in the padded lanes of x and s), 1x1 and padded 3x3, an epilogue that must see
// whole-batch start indices, every ISA.
TEST(ConvNchwc, ScaledInputMatchesScaledActivation) {
  SCOPED_TRACE(testing::seed_note());
  std::mt19937_64 rng(testing::test_seed() + 304);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // The last two: a padded 3x3 with 7-wide rows (two-row tiles on a padded copy, where the ISA
  // has them) and a 1x1 projection with K off the block, four images on their own weight copies.
  const Conv2dShape shapes[] = {shape(2, 24, 6, 7, 40, 1, 1, 1, 0), shape(3, 20, 5, 6, 16, 3, 3, 1, 1),
                                shape(2, 32, 9, 9, 64, 3, 3, 2, 1), shape(3, 40, 7, 7, 36, 3, 3, 1, 1),
                                shape(4, 48, 14, 14, 20, 1, 1, 1, 0)};
  for (Isa isa : testing::isas_to_test())
    for (const auto& s : shapes)
      for (int64_t scale_batch : {int64_t{1}, s.N}) {
        const ConvNchwcKnobs k = kernels::conv_nchwc_default_knobs(s, isa);
        SCOPED_TRACE(describe(s, k) + " isa=" + kernels::isa_name(isa) + " scale_batch=" + std::to_string(scale_batch));
        const int64_t Cb = (s.C + k.ic_bn - 1) / k.ic_bn, HW = s.H * s.W, OHW = s.OH() * s.OW();
        const auto x = testing::random_vec(rng, static_cast<size_t>(s.N * s.C * HW));
        const auto w = testing::random_vec(rng, static_cast<size_t>(s.K * s.C * s.R * s.S));
        const auto bias = testing::random_vec(rng, static_cast<size_t>(s.K));
        const auto sc = testing::random_vec(rng, static_cast<size_t>(scale_batch * s.C), 0.f, 2.f);
        std::vector<float> xs(x.size());  // the reference: conv(x * s)
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t p = 0; p < HW; ++p)
              xs[(n * s.C + c) * HW + p] = x[(n * s.C + c) * HW + p] * sc[(scale_batch > 1 ? n : 0) * s.C + c];
        std::vector<float> ref(static_cast<size_t>(s.N * s.K * OHW));
        reference::ref_conv2d_nchw(s, xs.data(), w.data(), bias.data(), ref.data(), Activation::None);
        for (auto& v : ref) v = 2.f * std::max(v, 0.f) + 1.f;  // relu, then the hook

        std::vector<float> xb(static_cast<size_t>(kernels::nchwc_floats(s.N, s.C, s.H, s.W, k.ic_bn)));
        kernels::nchw_to_nchwc(x.data(), s.N, s.C, s.H, s.W, k.ic_bn, xb.data(), testing::kSerial);
        std::vector<float> sb(static_cast<size_t>(scale_batch * Cb * k.ic_bn), nan);  // padded lanes NaN
        for (int64_t n = 0; n < scale_batch; ++n)
          for (int64_t c = 0; c < s.C; ++c) sb[n * Cb * k.ic_bn + c] = sc[n * s.C + c];
        for (size_t i = 0; i < xb.size(); ++i)
          if (static_cast<int64_t>(i / (HW * k.ic_bn)) % Cb == Cb - 1 &&
              static_cast<int64_t>(i % k.ic_bn) >= s.C - (Cb - 1) * k.ic_bn)
            xb[i] = nan;
        std::vector<float> pw(static_cast<size_t>(kernels::conv_nchwc_packed_weight_floats(s, k)));
        kernels::conv_nchwc_pack_weight(s, k, w.data(), pw.data());
        const size_t yb_size = static_cast<size_t>(kernels::nchwc_floats(s.N, s.K, s.OH(), s.OW(), k.oc_bn));
        std::vector<float> yb(yb_size, nan);
        HookLog log;
        log.calls.reset(new std::atomic<int>[yb_size]);
        for (size_t i = 0; i < yb_size; ++i) log.calls[i] = 0;
        log.y = yb.data();
        kernels::conv2d_nchwc_scaled_input(s, k, xb.data(), pw.data(), sb.data(), scale_batch, bias.data(), nullptr,
                                           Activation::Relu, yb.data(), testing::kTwo, {&count_hook, &log}, isa);
        EXPECT_EQ(log.bad_pointer.load(), 0) << "hook data != y + start";
        size_t wrong = 0;
        for (size_t i = 0; i < yb_size; ++i) wrong += log.calls[i].load() != 1;
        EXPECT_EQ(wrong, 0u) << "elements not passed to the hook exactly once";
        std::vector<float> y(ref.size());
        kernels::nchwc_to_nchw(yb.data(), s.N, s.K, s.OH(), s.OW(), k.oc_bn, y.data(), testing::kSerial);
        EXPECT_TRUE(testing::all_close(y.data(), ref.data(), ref.size()));
      }
  const Conv2dShape dw = shape(1, 16, 4, 4, 16, 3, 3, 1, 1, 1, 16);
  std::vector<float> buf(4096);
  EXPECT_THROW(kernels::conv2d_nchwc_scaled_input(dw, kernels::conv_nchwc_default_knobs(dw), buf.data(), buf.data(),
                                                  buf.data(), 1, nullptr, nullptr, Activation::None, buf.data(),
                                                  testing::kSerial),
               Error);  // depthwise: not supported
}

}  // namespace
}  // namespace dnnfusion
