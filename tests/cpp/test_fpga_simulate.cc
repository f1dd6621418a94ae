// The fpga datapath model against the naive int8 reference, bit for bit: 2,000 random single-layer
// configurations (400 per layer type: odd sizes, channels not multiples of 8, stride 2, pool
// windows up to 8, requantization shifts 0..31 all covered, ReLU / ReLU6 / none / arbitrary clamps,
// biases near the int32 limits so the accumulator wraps), garbage in the input's padded lanes and
// around every region, plus chained multi-layer programs. Every run also checks that only the
// output region changed and that padded output lanes are 0. Then the weight-layout packers (the
// documented byte positions, zero padding, round trips, refusals) and the simulator's refusals
// (a corrupted stream leaves memory untouched). Replay with DNNFUSION_TEST_SEED=<printed seed>.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/requant.h"
#include "target/fpga/datapath/reference_int8.h"
#include "target/fpga/datapath/simulate.h"
#include "target/fpga/isa/isa.h"
#include "target/fpga/isa/weight_layout.h"
#include "fpga_test_util.h"

namespace dnnfusion::fpga {
namespace {

using namespace test_util;

// Runs one case through encode + simulate; expects the reference's output and no other change.
void run_case(Case& c, std::mt19937_64& g) {
  Image img{{}, &g};
  place(c, img);
  std::vector<uint8_t> mem = img.finish();
  const std::vector<uint8_t> before = mem;
  const auto words = encode({c.d}, mem.size());
  simulate(mem, words.data(), words.size());
  const std::vector<int8_t> want = reference(c);
  const std::vector<int8_t> got = read_output(mem, c.d);
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  ASSERT_EQ(bad, 0u) << describe(c.d) << ": " << bad << " outputs differ, first at " << first << ": got "
                     << int(got[first]) << " want " << int(want[first]);
  const uint64_t out_end = c.d.output_offset + activation_bytes(c.d.out_channels, out_h(c.d), out_w(c.d));
  for (size_t i = 0; i < mem.size(); ++i) {
    if (i >= c.d.output_offset && i < out_end) continue;
    ASSERT_EQ(mem[i], before[i]) << "byte " << i << " outside the output changed";
  }
}

TEST(FpgaSimulate, MatchesReferenceOnRandomLayers) {
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 20);
  const auto start = std::chrono::steady_clock::now();
  int configs = 0;
  for (int i = 0; i < 400; ++i)
    for (LayerType t : {LayerType::kConv3x3, LayerType::kConv1x1, LayerType::kDepthwise3x3, LayerType::kMaxPool,
                        LayerType::kAdd}) {
      Case c = random_case(g, t, i);
      SCOPED_TRACE(describe(c.d) + " (config " + std::to_string(configs) + ")");
      ASSERT_NO_FATAL_FAILURE(run_case(c, g));
      ++configs;
    }
  EXPECT_EQ(configs, 2000);
  for (int s = 0; s < 32; ++s) EXPECT_TRUE(shifts_seen().count(s)) << "shift " << s << " never drawn";
  std::printf("test_fpga_simulate: %d random configurations in %.2f s\n", configs,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST(FpgaSimulate, NamedShapes) {
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 21);
  auto run = [&](LayerType t, int c, int k, int h, int w, int kernel, int stride, int pad) {
    LayerDesc d = shape(t, c, k, h, w, kernel, stride, pad);
    random_activation(g, d);
    Case x = make_case(g, d, static_cast<int>(uniform(g, 0, 31)));
    SCOPED_TRACE(describe(x.d));
    run_case(x, g);
  };
  run(LayerType::kMaxPool, 64, 64, 28, 28, 2, 2, 0);   // 2x2 s2
  run(LayerType::kMaxPool, 64, 64, 27, 27, 3, 2, 1);   // 3x3 s2 p1 (resnet stem, odd size)
  run(LayerType::kConv3x3, 64, 64, 14, 14, 3, 1, 1);   // CBR
  run(LayerType::kConv3x3, 32, 72, 15, 15, 3, 2, 1);   // downsampling CBR
  run(LayerType::kConv1x1, 512, 1000, 1, 1, 1, 1, 0);  // the classifier as a 1x1 conv
  run(LayerType::kConv1x1, 96, 24, 9, 9, 1, 2, 0);     // strided projection shortcut
  run(LayerType::kDepthwise3x3, 144, 144, 11, 11, 3, 2, 1);
  run(LayerType::kAdd, 24, 24, 7, 7, 1, 1, 0);
}

TEST(FpgaSimulate, ChainedPrograms) {
  // random_chain's five layers as one stream: each reads what the earlier ones wrote.
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 22);
  for (int t = 0; t < 30; ++t) {
    Chain ch = random_chain(g, t);
    std::vector<uint8_t> mem = ch.image;
    const auto words = encode(ch.layers, mem.size());
    simulate(mem, words.data(), words.size());
    EXPECT_EQ(read_output(mem, ch.a.d), ch.b.x) << "trial " << t << " conv3x3";
    EXPECT_EQ(read_output(mem, ch.p.d), ch.s.xb) << "trial " << t << " conv1x1";
    EXPECT_EQ(read_output(mem, ch.m.d), reference(ch.m)) << "trial " << t << " final maxpool";
  }
}

TEST(FpgaSimulate, ParameterTableBitsTheHardwareDoesNotWire) {
  // A multiplier with bit 31 set or a shift above 31 cannot come from the packers; the datapath
  // reads M & 0x7fffffff and shift & 31 (ISA.md "Parameter tables"), and so does the model.
  std::mt19937_64 g(7);
  Case c = random_case(g, LayerType::kConv3x3, 3);
  Image img{{}, &g};
  place(c, img);
  std::vector<uint8_t> mem = img.finish();
  for (int k = 0; k < c.d.out_channels; ++k) {
    uint8_t* e = &mem[c.d.param_offset + 16 * static_cast<size_t>(k)];
    put_le32(e + 4, static_cast<int32_t>(static_cast<uint32_t>(c.q[k].multiplier) | 0x80000000u));
    put_le32(e + 8, c.q[k].shift + 32 * (1 + k % 3));
  }
  const auto words = encode({c.d}, mem.size());
  simulate(mem, words.data(), words.size());
  EXPECT_EQ(read_output(mem, c.d), reference(c));
}

TEST(FpgaSimulate, RefusedStreamsLeaveMemoryUntouched) {
  std::mt19937_64 g(8);
  Case c = random_case(g, LayerType::kConv1x1, 0);
  Image img{{}, &g};
  place(c, img);
  std::vector<uint8_t> mem = img.finish();
  const std::vector<uint8_t> before = mem;
  const auto words = encode({c.d}, mem.size());
  for (size_t i = 0; i < words.size(); ++i)
    for (int bit = 0; bit < 32; ++bit) {
      std::vector<uint32_t> w = words;
      w[i] ^= 1u << bit;
      EXPECT_THROW(simulate(mem, w.data(), w.size()), InvalidInput) << "word " << i << " bit " << bit;
    }
  for (size_t n = 0; n < words.size(); ++n) EXPECT_THROW(simulate(mem, words.data(), n), InvalidInput);
  std::vector<uint8_t> small(mem.begin(), mem.end() - 64);
  EXPECT_THROW(simulate(small, words.data(), words.size()), InvalidInput);
  EXPECT_EQ(mem, before);
  EXPECT_THROW(simulate_layer(nullptr, mem.size(), c.d), InvalidInput);
  LayerDesc bad = c.d;
  bad.output_offset = bad.input_offset;
  EXPECT_THROW(simulate_layer(mem.data(), mem.size(), bad), InvalidInput);
  EXPECT_THROW(simulate_layer(mem.data(), 64, c.d), InvalidInput);
  EXPECT_EQ(mem, before);
}

// ---- weight layouts ----

TEST(FpgaLayout, DocumentedBytePositions) {
  const int k = 11, c = 13;
  std::vector<int8_t> w3(static_cast<size_t>(k) * c * 9), w1(static_cast<size_t>(k) * c), wd(static_cast<size_t>(c) * 9);
  for (size_t i = 0; i < w3.size(); ++i) w3[i] = static_cast<int8_t>(1 + i % 127);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = static_cast<int8_t>(-1 - static_cast<int>(i % 127));
  for (size_t i = 0; i < wd.size(); ++i) wd[i] = static_cast<int8_t>(1 + i % 100);
  const auto p3 = pack_weights(LayerType::kConv3x3, k, c, w3);
  const auto p1 = pack_weights(LayerType::kConv1x1, k, c, w1);
  const auto pd = pack_weights(LayerType::kDepthwise3x3, c, c, wd);
  ASSERT_EQ(p3.size(), 16u * 16 * 9);
  ASSERT_EQ(p1.size(), 16u * 32);
  ASSERT_EQ(pd.size(), 16u * 9);
  // 3x3: byte ((kb * C/8 + cb) * 9 + r * 3 + s) * 64 + (k % 8) * 8 + c % 8.
  auto w3_at = [&](int ko, int ci, int r, int s) { return w3[((static_cast<size_t>(ko) * c + ci) * 3 + r) * 3 + s]; };
  EXPECT_EQ(static_cast<int8_t>(p3[((1 * 2 + 1) * 9 + 2 * 3 + 1) * 64 + 1 * 8 + 4]), w3_at(9, 12, 2, 1));
  EXPECT_EQ(static_cast<int8_t>(p3[((0 * 2 + 0) * 9 + 0) * 64 + 7 * 8 + 7]), w3_at(7, 7, 0, 0));
  // 1x1: byte ((kb * C32/32 + cs) * 8 + k % 8) * 32 + c % 32.
  EXPECT_EQ(static_cast<int8_t>(p1[(1 * 8 + 2) * 32 + 12]), w1[10 * c + 12]);
  // depthwise: byte (cb * 9 + r * 3 + s) * 8 + c % 8.
  EXPECT_EQ(static_cast<int8_t>(pd[(1 * 9 + 5) * 8 + 4]), wd[12 * 9 + 5]);
  // Every padded position is 0: the nonzero bytes are exactly the real (all nonzero) weights.
  auto nonzero = [](const std::vector<uint8_t>& v) { return std::count_if(v.begin(), v.end(), [](uint8_t b) { return b != 0; }); };
  EXPECT_EQ(nonzero(p3), static_cast<long>(w3.size()));
  EXPECT_EQ(nonzero(p1), static_cast<long>(w1.size()));
  EXPECT_EQ(nonzero(pd), static_cast<long>(wd.size()));

  const auto t = pack_params({-2, 0x01020304}, {{0x40000000, 31}, {7, 0}});
  ASSERT_EQ(t.size(), 8u * 16);
  const std::vector<uint8_t> first = {0xFE, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x40, 31, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(std::vector<uint8_t>(t.begin(), t.begin() + 16), first);
  EXPECT_EQ(t[16], 0x04);
  EXPECT_EQ(t[19], 0x01);
  EXPECT_EQ(std::count(t.begin() + 32, t.end(), 0), 6 * 16);
  const auto ta = pack_add_params({{5, 6}}, {{7, 8}});
  EXPECT_EQ(std::vector<uint8_t>(ta.begin(), ta.begin() + 16),
            (std::vector<uint8_t>{5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0}));
  const auto act = pack_activation({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 2, 2, 3);  // C=2, H=2, W=3
  ASSERT_EQ(act.size(), 8u * 6);
  EXPECT_EQ(act[0], 1);
  EXPECT_EQ(act[1], 7);
  EXPECT_EQ(act[8], 2);
  EXPECT_EQ(act[5 * 8 + 1], 12);
  EXPECT_EQ(act[2], 0);
}

TEST(FpgaLayout, RoundTrips) {
  SCOPED_TRACE(fpga_seed_note());
  std::mt19937_64 g(fpga_test_seed() + 30);
  for (int t = 0; t < 200; ++t) {
    const int k = static_cast<int>(uniform(g, 1, 70)), c = static_cast<int>(uniform(g, 1, 70));
    for (LayerType type : {LayerType::kConv3x3, LayerType::kConv1x1, LayerType::kDepthwise3x3}) {
      const int kk = type == LayerType::kDepthwise3x3 ? c : k;
      const size_t n = type == LayerType::kDepthwise3x3 ? static_cast<size_t>(c) * 9
                                                        : static_cast<size_t>(kk) * c * (type == LayerType::kConv1x1 ? 1 : 9);
      const auto w = random_int8(g, n, false);
      EXPECT_EQ(unpack_weights(type, kk, c, pack_weights(type, kk, c, w)), w);
    }
    std::vector<int32_t> bias(k);
    std::vector<Requant> q(k), qb(k);
    for (int i = 0; i < k; ++i) {
      bias[i] = static_cast<int32_t>(g());
      q[i] = {static_cast<int32_t>(uniform(g, 0, 2147483647)), static_cast<int32_t>(uniform(g, 0, 31))};
      qb[i] = {static_cast<int32_t>(uniform(g, 0, 2147483647)), static_cast<int32_t>(uniform(g, 0, 31))};
    }
    std::vector<int32_t> bias2;
    std::vector<Requant> q2, qa2, qb2;
    unpack_params(pack_params(bias, q), k, &bias2, &q2);
    EXPECT_EQ(bias2, bias);
    unpack_add_params(pack_add_params(q, qb), k, &qa2, &qb2);
    for (int i = 0; i < k; ++i) {
      EXPECT_TRUE(q2[i].multiplier == q[i].multiplier && q2[i].shift == q[i].shift);
      EXPECT_TRUE(qa2[i].multiplier == q[i].multiplier && qa2[i].shift == q[i].shift);
      EXPECT_TRUE(qb2[i].multiplier == qb[i].multiplier && qb2[i].shift == qb[i].shift);
    }
    const int h = static_cast<int>(uniform(g, 1, 9)), w = static_cast<int>(uniform(g, 1, 9));
    const auto x = random_int8(g, static_cast<size_t>(c) * h * w, false);
    const auto packed = pack_activation(x, c, h, w);
    EXPECT_EQ(unpack_activation(packed.data(), packed.size(), c, h, w), x);
  }
}

TEST(FpgaLayout, BadInputsAreRefused) {
  const std::vector<int8_t> w(2 * 3 * 9);
  EXPECT_THROW(pack_weights(LayerType::kConv3x3, 2, 3, std::vector<int8_t>(53)), InvalidInput);
  EXPECT_THROW(pack_weights(LayerType::kConv1x1, 2, 3, w), InvalidInput);
  EXPECT_THROW(pack_weights(LayerType::kDepthwise3x3, 2, 3, w), InvalidInput);  // K != C
  EXPECT_THROW(pack_weights(LayerType::kMaxPool, 2, 3, w), InvalidInput);
  EXPECT_THROW(pack_weights(LayerType::kConv3x3, 0, 3, {}), InvalidInput);
  EXPECT_THROW(pack_weights(LayerType::kConv3x3, 4097, 1, std::vector<int8_t>(4097 * 9)), InvalidInput);
  EXPECT_THROW(unpack_weights(LayerType::kConv3x3, 2, 3, std::vector<uint8_t>(10)), InvalidInput);
  EXPECT_THROW(pack_params({1, 2}, {{1, 1}}), InvalidInput);
  EXPECT_THROW(pack_params({}, {}), InvalidInput);
  EXPECT_THROW(pack_params({1}, {{-1, 1}}), InvalidInput);
  EXPECT_THROW(pack_params({1}, {{1, 32}}), InvalidInput);
  EXPECT_THROW(pack_add_params({{1, 1}}, {{1, -1}}), InvalidInput);
  EXPECT_THROW(pack_activation({1, 2, 3}, 1, 2, 2), InvalidInput);
  EXPECT_THROW(pack_activation({}, 1, 0, 2), InvalidInput);
  EXPECT_THROW(unpack_activation(nullptr, 8, 1, 1, 1), InvalidInput);
  try {
    pack_params({1}, {{1, 40}});
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("shift 0..31"), std::string::npos) << e.what();
  }
}

TEST(FpgaReference, RefusesMismatchedSizes) {
  EXPECT_THROW(ref::conv2d({1, 2}, {1, 1, 1}, {1}, 1, 1, 1, 0, {0}, {{1, 0}}, -128, 127), InvalidInput);
  EXPECT_THROW(ref::add({1}, {1, 2}, {1, 1, 1}, {{1, 0}}, {{1, 0}}, -128, 127), InvalidInput);
  EXPECT_THROW(ref::maxpool({1}, {1, 1, 1}, 3, 1, 3, -128, 127), InvalidInput);  // a window of padding only
  // A hand-computed case: 1x1 conv, one channel, acc = 3 + 2*5 = 13, M = 2^30, shift 31 -> 6.5 -> 7.
  EXPECT_EQ(ref::conv2d({5}, {1, 1, 1}, {2}, 1, 1, 1, 0, {3}, {{1 << 30, 31}}, -128, 127), std::vector<int8_t>{7});
}

}  // namespace
}  // namespace dnnfusion::fpga
